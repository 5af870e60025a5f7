"""Bad input, tried as a new user would: refused before any host is touched (issue 22, items 15-17).

Last round, 40 of 83 such inputs reached a host or an "internal error". Each case here goes
through the real entry point (r9700ctl.cli.main, in process: where an error becomes one line and
an exit code) and must give exit 64, exactly one line on standard error that names the variable,
option or file and ends with the fix in parentheses, nothing on standard output, no traceback and
no internal error. No host may be contacted: the inventory's node is 127.0.0.1 at a port where
nothing listens, and the runner, the agent launcher, paramiko and socket connections are patched
to record a call and fail (`contacts`). Cases that leave a file behind (a history that is not
r9700ctl's, an output file that cannot be replaced) also check the file is byte for byte as it was.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from child_process import REPO

from r9700ctl.cli import main


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PORT = _free_port()  # nothing listens here: a contact would be refused, never answered
NODES = f"[r9700_nodes]\nnode1 ansible_host=127.0.0.1 ansible_port={PORT}\n"
GOOD_YAML = "models:\n  default:\n    hostbw:\n      warn_fraction_of_link: 0.7\n"


@dataclass(frozen=True)
class Case:
    """One bad input: `args` ({inv} is the inventory, {dir} the case's directory), `group_vars`
    (YAML for the node's group), extra `files` (name -> text, bytes or a maker), `names` (what
    the one line must name) and `unchanged` (files that must keep their bytes)."""

    id: str
    args: tuple[str, ...]
    names: str
    group_vars: str = ""
    inventory: str = NODES
    files: dict[str, str | bytes | Callable[[Path], None]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    unchanged: tuple[str, ...] = ()


def var(case_id: str, yaml: str, names: str, command: str = "provision", *more: str) -> Case:
    return Case(case_id, (command, "{inv}", *more), names, group_vars=yaml)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _foreign_database(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE songs (title TEXT)")
    connection.commit()
    connection.close()


ADDRESS = '"0000:03:00.0"'
CASES = [
    # --- item 15: values the specs type raw/dict/str, judged on the controller -----------------
    var("power cap as text", 'r9700_power_cap_w: "abc"', "r9700_power_cap_w"),
    var("power cap a fraction", "r9700_power_cap_w: 250.5", "r9700_power_cap_w"),
    var("power cap zero", "r9700_power_cap_w: 0", "r9700_power_cap_w"),
    var("power cap negative", "r9700_power_cap_w: -5", "r9700_power_cap_w"),
    var("power cap true", "r9700_power_cap_w: true", "r9700_power_cap_w"),
    var("power cap a list", "r9700_power_cap_w: [250]", "r9700_power_cap_w"),
    var("per-GPU cap keyed by a name", "r9700_power_cap_w_by_gpu: {gpu0: 250}", "r9700_power_cap_w_by_gpu"),
    var("per-GPU cap as text", f"r9700_power_cap_w_by_gpu: {{{ADDRESS}: lots}}", "r9700_power_cap_w_by_gpu"),
    var("per-GPU cap zero", f"r9700_power_cap_w_by_gpu: {{{ADDRESS}: 0}}", "r9700_power_cap_w_by_gpu"),
    var(
        "per-GPU cap keyed by an unquoted address (YAML reads a number)",
        "r9700_power_cap_w_by_gpu: {0000:03:00.0: 250}",
        "quote each PCI address",
    ),
    var("per-GPU caps not a mapping", 'r9700_power_cap_w_by_gpu: "250"', "r9700_power_cap_w_by_gpu"),
    var("PSU without watts", f"r9700_psus: {{psu1: {{gpus: [{ADDRESS}]}}}}", "r9700_psus.psu1 has no watts"),
    var("PSU of zero watts", "r9700_psus: {psu1: {watts: 0}}", "r9700_psus.psu1.watts"),
    var(
        "a GPU on two PSUs",
        f"r9700_psus: {{a: {{watts: 1600, gpus: [{ADDRESS}]}}, b: {{watts: 1200, gpus: [{ADDRESS}]}}}}",
        "is already fed by r9700_psus.a",
    ),
    var("PSU gpus not a list", f"r9700_psus: {{a: {{watts: 1600, gpus: {ADDRESS}}}}}", "r9700_psus.a.gpus"),
    var("PSU gpus not PCI addresses", "r9700_psus: {a: {watts: 1600, gpus: [gpu0]}}", "r9700_psus.a.gpus"),
    var("PSU negative host_w", "r9700_psus: {a: {watts: 1600, host_w: -50}}", "r9700_psus.a.host_w"),
    var("PSU with a misspelt key", "r9700_psus: {a: {wats: 1600}}", "r9700_psus.a"),
    var("PSU given as a number", "r9700_psus: {a: 1600}", "r9700_psus.a"),
    var("PSU map not a mapping", "r9700_psus: [1600]", "r9700_psus"),
    var("PSU margin above 1", "r9700_psu_margin: 1.5", "r9700_psu_margin"),
    var("PSU margin negative", "r9700_psu_margin: -0.1", "r9700_psu_margin"),
    var("PSU margin as words", 'r9700_psu_margin: "ten percent"', "r9700_psu_margin"),
    var("shm size that is no size", "r9700_container_shm_size: lots", "r9700_container_shm_size"),
    var("shm size zero", 'r9700_container_shm_size: "0"', "r9700_container_shm_size"),
    var("shm size with a space", 'r9700_container_shm_size: "8 GB"', "r9700_container_shm_size"),
    var("image reference with spaces", 'r9700_container_image: "Not An Image!!"', "r9700_container_image"),
    var("image path in upper case", "r9700_container_image: rocm/PyTorch:latest", "r9700_container_image"),
    var("image with an empty tag", 'r9700_container_image: "rocm/pytorch:"', "r9700_container_image"),
    var(
        "image archive missing on the controller",
        "r9700_container_image_archive: /nonexistent/rocm.tar",
        "r9700_container_image_archive",
    ),
    var(
        "image archive relative",
        "r9700_container_image_archive: images/rocm.tar",
        "r9700_container_image_archive",
    ),
    var("image archive a directory", "r9700_container_image_archive: /tmp", "r9700_container_image_archive"),
    Case(
        "image archive a pipe",
        ("provision", "{inv}"),
        "r9700_container_image_archive",
        group_vars="r9700_container_image_archive: {dir}/image.fifo",
        files={"image.fifo": _fifo},
    ),
    var(
        "registry mirror without a scheme",
        "r9700_container_registry_mirror: mirror.example.com",
        "r9700_container_registry_mirror",
    ),
    var(
        "registry mirror over ftp",
        "r9700_container_registry_mirror: ftp://mirror.example.com",
        "r9700_container_registry_mirror",
    ),
    var(
        "registry mirror with a path",
        "r9700_container_registry_mirror: http://mirror.example.com/v2/rocm",
        "r9700_container_registry_mirror",
    ),
    var("monitoring interval zero", "r9700_monitoring_interval: 0", "r9700_monitoring_interval"),
    var("monitoring interval in words", "r9700_monitoring_interval: often", "r9700_monitoring_interval"),
    var(
        "exporter port 70000",
        "r9700_monitoring_node_exporter_port: 70000",
        "r9700_monitoring_node_exporter_port",
    ),
    var(
        "exporter port zero", "r9700_monitoring_node_exporter_port: 0", "r9700_monitoring_node_exporter_port"
    ),
    var(
        "exporter port negative",
        "r9700_monitoring_node_exporter_port: -1",
        "r9700_monitoring_node_exporter_port",
    ),
    var(
        "exporter port a name",
        "r9700_monitoring_node_exporter_port: http",
        "r9700_monitoring_node_exporter_port",
    ),
    var("textfile dir relative", "r9700_monitoring_textfile_dir: metrics", "r9700_monitoring_textfile_dir"),
    var("a choice given as a list", 'r9700_p2p: ["on"]', "r9700_p2p"),
    var("a choice given as a mapping", "r9700_p2p: {on: 1}", "r9700_p2p"),
    var("a yes/no choice given as a list", "r9700_apply_runtime: [true]", "r9700_apply_runtime"),
    var("a text choice given as a list", "r9700_driver_source: [dkms]", "r9700_driver_source"),
    var("device mode not octal", "r9700_device_mode: rw", "r9700_device_mode"),
    var("device group a list", "r9700_device_group: [render]", "r9700_device_group"),
    var("user name with a space", 'r9700_users: ["bad user"]', "r9700_users"),
    var(
        "two kernel parameters in one item",
        'r9700_kernel_params: ["iommu=pt amd_iommu=on"]',
        "r9700_kernel_params",
    ),
    var("fingerprint too short", "r9700_repo_key_fingerprint: ABC123", "r9700_repo_key_fingerprint"),
    var("repository URL without a scheme", "r9700_repo_base_url: repo.radeon.com", "r9700_repo_base_url"),
    var("proxy without a scheme", 'r9700_proxy: "proxy:3128"', "r9700_proxy"),
    var("environment name starting with a digit", "r9700_env: {1BAD: x}", "r9700_env"),
    var("environment value with a semicolon", 'r9700_env_extra: {A: "x;reboot"}', "r9700_env_extra"),
    var(
        "HSA override not major.minor.stepping",
        "r9700_hsa_override_gfx_version: gfx1201",
        "r9700_hsa_override",
    ),
    var("visible devices in words", "r9700_rocr_visible_devices: first", "r9700_rocr_visible_devices"),
    var(
        "workaround skip naming no known issue",
        "r9700_known_issue_workarounds_skip: [no-such-issue]",
        "r9700_known_issue_workarounds_skip",
    ),
    var("reboot timeout zero", "r9700_reboot_timeout: 0", "r9700_reboot_timeout"),
    var("expected GPUs zero", "r9700_expected_gpus: 0", "r9700_expected_gpus"),
    Case(
        "a choice given as a list in extra vars",
        ("provision", "{inv}", "-e", '{"r9700_p2p": ["on"]}'),
        "--extra-vars: r9700_p2p",
    ),
    Case(
        "a power cap as text in extra vars",
        ("provision", "{inv}", "-e", "r9700_power_cap_w=abc"),
        "r9700_power_cap_w",
    ),
    Case(
        "an empty bool in extra vars (Ansible refuses it on every host)",
        ("provision", "{inv}", "-e", "r9700_lifecycle_skip_converged="),
        "--extra-vars: r9700_lifecycle_skip_converged='' is not true or false",
    ),
    var("an empty count in the inventory", "r9700_expected_gpus: ''", "r9700_expected_gpus"),
    Case(
        "a host listed twice with different addresses",
        ("provision", "{inv}"),
        "node1 is listed twice with different ansible_host",
        inventory=NODES + "[rack1]\nnode1 ansible_host=127.0.0.2\n",
    ),
    Case(
        "a host listed twice with different ports",
        ("provision", "{inv}"),
        "node1 is listed twice with different ansible_port",
        inventory=NODES + f"[rack1]\nnode1 ansible_host=127.0.0.1 ansible_port={PORT + 1}\n",
    ),
    Case(
        "a host listed twice in a YAML inventory",
        ("provision", "{dir}/inventory.yml"),
        "node1 is listed twice with different ansible_host",
        files={
            "inventory.yml": "r9700_nodes:\n  hosts:\n    node1: {ansible_host: 127.0.0.1}\n"
            "rack1:\n  hosts:\n    node1: {ansible_host: 127.0.0.2}\n"
        },
    ),
    Case(
        "a drain hook naming a placeholder that does not exist",
        ("upgrade", "{inv}", "--drain-cmd", "scontrol update nodename={host} state=drain"),
        "--drain-cmd",
    ),
    Case(
        "a resume hook naming {nodename}",
        ("upgrade", "{inv}", "--resume-cmd", "resume {nodename}"),
        "--resume-cmd",
    ),
    Case("an empty drain hook", ("rollback", "{inv}", "--drain-cmd", ""), "--drain-cmd"),
    Case("save-baseline empty", ("validate", "{inv}", "--save-baseline", ""), "--save-baseline"),
    Case("save-baseline empty, --local", ("validate", "--local", "--save-baseline", ""), "--save-baseline"),
    Case("compare empty", ("validate", "{inv}", "--compare", ""), "--compare"),
    Case("an empty --limit (an unset shell variable)", ("provision", "{inv}", "--limit", ""), "--limit"),
    Case("an empty --group", ("doctor", "{inv}", "--group", ""), "--group"),
    Case("an empty --tags", ("provision", "{inv}", "--tags", ""), "--tags"),
    Case(
        "extra vars from a binary file",
        ("provision", "{inv}", "-e", "@{dir}/vars.bin"),
        "not a UTF-8 text file",
        files={"vars.bin": bytes(range(128, 256))},
    ),
    Case("extra vars from a directory", ("provision", "{inv}", "-e", "@{dir}"), "is a directory"),
    Case(
        "extra vars from a pipe",
        ("provision", "{inv}", "-e", "@{dir}/vars.fifo"),
        "not a regular file",
        files={"vars.fifo": _fifo},
    ),
    Case(
        "scrape interval of zero", ("monitoring", "scrape-config", "{inv}", "--interval", "0s"), "--interval"
    ),
    # --- every inventory command refuses before it contacts anything ---------------------------
    var("doctor with a bad power cap", "r9700_power_cap_w: abc", "r9700_power_cap_w", "doctor"),
    var("validate with a bad PSU", "r9700_psus: {a: {watts: 0}}", "r9700_psus", "validate"),
    var("verify with a list for a choice", 'r9700_p2p: ["on"]', "r9700_p2p", "verify"),
    var(
        "collect with a bad mirror",
        "r9700_container_registry_mirror: m.example",
        "registry_mirror",
        "collect",
        "--out",
        "/tmp",
    ),
    var(
        "upgrade with a bad interval", "r9700_monitoring_interval: 0", "r9700_monitoring_interval", "upgrade"
    ),
    var(
        "uninstall with a bad port",
        "r9700_monitoring_node_exporter_port: 70000",
        "exporter_port",
        "uninstall",
    ),
    var("kernel-upgrade with a bad shm size", "r9700_container_shm_size: lots", "shm_size", "kernel-upgrade"),
    Case(
        "scrape-config with a bad port",
        ("monitoring", "scrape-config", "{inv}"),
        "exporter_port",
        group_vars="r9700_monitoring_node_exporter_port: 0",
    ),
    # --- validate --cluster: what a cluster run cannot use (issue 21) ---------------------------
    Case("cluster with --level burnin", ("validate", "{inv}", "--cluster", "--level", "burnin"), "--level"),
    Case("cluster with --level config", ("validate", "{inv}", "--cluster", "--level", "config"), "--level"),
    Case(
        "cluster with --level and --expected-gpus",
        ("validate", "{inv}", "--cluster", "--level", "quick", "--expected-gpus", "4"),
        "--expected-gpus, --level do not apply to --cluster",
    ),
    Case("cluster with --allow-busy", ("validate", "{inv}", "--cluster", "--allow-busy"), "--allow-busy"),
    Case(
        "cluster with RoCE and no HCA",
        ("validate", "{inv}", "--cluster"),
        "node1: r9700_cluster_rdma is roce but r9700_cluster_rdma_hca is empty",
        group_vars="r9700_cluster_network: 10.10.0.0/24\nr9700_cluster_rdma: roce",
        inventory=NODES + f"node2 ansible_host=127.0.0.2 ansible_port={PORT}\n",
    ),
    # --- item 16: no internal error for bad input -----------------------------------------------
    Case(
        "scrape-config with a port given as a template",
        ("monitoring", "scrape-config", "{inv}"),
        "r9700_monitoring_node_exporter_port",
        group_vars='r9700_monitoring_node_exporter_port: "{{ 9000 + 100 }}"',
    ),
    Case(
        "scrape-config -o into /proc",
        ("monitoring", "scrape-config", "{inv}", "-o", "/proc/r9700.yml"),
        "--output",
    ),
    Case("scrape-config -o a directory", ("monitoring", "scrape-config", "{inv}", "-o", "{dir}"), "--output"),
    Case("provision --json into /proc", ("provision", "{inv}", "--json", "/proc/run.json"), "--json"),
    Case("provision --json /dev/stdout", ("provision", "{inv}", "--json", "/dev/stdout"), "--json"),
    Case(
        "provision --json a pipe",
        ("provision", "{inv}", "--json", "{dir}/out.fifo"),
        "--json",
        files={"out.fifo": _fifo},
    ),
    Case(
        "provision --json into a missing directory",
        ("provision", "{inv}", "--json", "{dir}/no/run.json"),
        "--json",
    ),
    Case(
        "provision --json under a file",
        ("provision", "{inv}", "--json", "{dir}/inventory.ini/run.json"),
        "--json",
    ),
    Case("validate --json into /sys", ("validate", "{inv}", "--json", "/sys/fleet.json"), "--json"),
    Case("validate --html into /proc", ("validate", "{inv}", "--html", "/proc/fleet.html"), "--html"),
    Case("upgrade --json into /proc", ("upgrade", "{inv}", "--check", "--json", "/proc/plan.json"), "--json"),
    Case(
        "doctor --json a pipe",
        ("doctor", "{inv}", "--json", "{dir}/out.fifo"),
        "--json",
        files={"out.fifo": _fifo},
    ),
    Case(
        "thresholds file that is binary",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "t.yaml",
        files={"t.yaml": bytes(range(256)) * 4},
    ),
    Case(
        "thresholds file of the wrong shape",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "t.yaml",
        files={"t.yaml": "- 1\n- 2\n"},
    ),
    Case(
        "thresholds section that is a number",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "models.default",
        files={"t.yaml": "models:\n  default: 5\n"},
    ),
    Case(
        "thresholds family given a value",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "models.default.pcie",
        files={"t.yaml": "models:\n  default:\n    pcie: 16\n"},
    ),
    Case(
        "threshold of the wrong type",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "models.default.pcie.expect_width",
        files={"t.yaml": "models:\n  default:\n    pcie:\n      expect_width: [16]\n"},
    ),
    Case(
        "threshold text where a number belongs",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "models.default.hostbw.warn_fraction_of_link",
        files={"t.yaml": "models:\n  default:\n    hostbw:\n      warn_fraction_of_link: fast\n"},
    ),
    Case(
        "threshold NaN",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "warn_fraction_of_link",
        files={"t.yaml": "models:\n  default:\n    hostbw:\n      warn_fraction_of_link: .nan\n"},
    ),
    Case(
        "threshold a string where true/false belongs",
        ("validate", "--local", "--thresholds", "{dir}/t.yaml"),
        "iommu_passthrough_expected",
        files={"t.yaml": 'models:\n  default:\n    platform:\n      iommu_passthrough_expected: "yes"\n'},
    ),
    Case(
        "inventory that is a pipe",
        ("provision", "{dir}/inventory.fifo"),
        "inventory.fifo",
        files={"inventory.fifo": _fifo},
    ),
    Case(
        "inventory saved as UTF-16",
        ("provision", "{dir}/u16.ini"),
        "u16.ini",
        files={"u16.ini": NODES.encode("utf-16")},
    ),
    Case(
        "inventory saved as UTF-16LE without a byte-order mark",
        ("doctor", "{dir}/u16.ini"),
        "UTF-16LE",
        files={"u16.ini": NODES.encode("utf-16-le")},
    ),
    Case(
        "inventory saved as Latin-1",
        ("provision", "{dir}/latin.ini"),
        "latin.ini:2",
        files={"latin.ini": "[r9700_nodes]\nn\xf6de1 ansible_host=127.0.0.1\n".encode("latin-1")},
    ),
    Case(
        "inventory that is binary",
        ("provision", "{dir}/bin.ini"),
        "bin.ini",
        files={"bin.ini": b"\x00\x01\x02" * 50},
    ),
    Case("inventory that is a device", ("provision", "/dev/null"), "/dev/null"),
    Case(
        "inventory whose children name an undefined group",
        ("provision", "{inv}"),
        "includes undefined group 'rack1'",
        inventory="[r9700_nodes:children]\nrack1\n",
    ),
    Case(
        "inventory with vars of an undefined group",
        ("provision", "{inv}"),
        "undefined group 'rack9'",
        inventory=NODES + "[rack9:vars]\nr9700_expected_gpus=4\n",
    ),
    # --- item 17: history never writes to a file it did not create -----------------------------
    Case(
        "history on an empty file",
        ("history",),
        "not an r9700ctl history",
        files={"history.db": b""},
        env={"R9700CTL_HISTORY": "{dir}/history.db"},
        unchanged=("history.db",),
    ),
    Case(
        "history on another program's database",
        ("history",),
        "not an r9700ctl history",
        files={"history.db": _foreign_database},
        env={"R9700CTL_HISTORY": "{dir}/history.db"},
        unchanged=("history.db",),
    ),
    Case(
        "validate --local recording into another program's database",
        ("validate", "--local", "--level", "config"),
        "not an r9700ctl history",
        files={"history.db": _foreign_database},
        env={"R9700CTL_HISTORY": "{dir}/history.db"},
        unchanged=("history.db",),
    ),
    Case(
        "validate INVENTORY recording into an empty file",
        ("validate", "{inv}"),
        "not an r9700ctl history",
        files={"history.db": b""},
        env={"R9700CTL_HISTORY": "{dir}/history.db"},
        unchanged=("history.db",),
    ),
]


@pytest.fixture
def contacts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way r9700ctl reaches a node, replaced by a recorder that fails the command."""
    calls: list[str] = []

    def refuse(what: str) -> Callable[..., None]:
        def called(*args: object, **kwargs: object) -> None:
            calls.append(what)
            raise ConnectionRefusedError(f"test: {what} was called: a host would have been contacted")

        return called

    import paramiko

    monkeypatch.setattr("r9700ctl.ansible_run.run_playbook", refuse("the Ansible runner"))
    monkeypatch.setattr("r9700ctl.launch.run_agent", refuse("the agent"))
    monkeypatch.setattr(paramiko.SSHClient, "connect", refuse("paramiko"))
    monkeypatch.setattr(socket.socket, "connect", refuse("a socket"))
    monkeypatch.setattr(socket, "create_connection", refuse("a socket"))
    return calls


def _materialise(case: Case, directory: Path) -> tuple[list[str], dict[str, bytes]]:
    (directory / "inventory.ini").write_text(case.inventory, encoding="utf-8")
    if case.group_vars:
        (directory / "group_vars").mkdir()
        text = case.group_vars.replace("{dir}", str(directory))
        (directory / "group_vars" / "r9700_nodes.yml").write_text(text + "\n", encoding="utf-8")
    for name, content in case.files.items():
        target = directory / name
        if callable(content):
            content(target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    args = [
        a.replace("{inv}", str(directory / "inventory.ini")).replace("{dir}", str(directory))
        for a in case.args
    ]
    before = {name: (directory / name).read_bytes() for name in case.unchanged}
    return args, before


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_64_and_no_host_is_contacted(
    case: Case,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    contacts: list[str],
) -> None:
    directory = tmp_path / "case"
    directory.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.replace("{dir}", str(directory)))
    args, before = _materialise(case, directory)
    monkeypatch.setattr(sys, "argv", ["r9700ctl", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    _assert_refused_in_one_line(exited.value.code, out, err, case.names)
    assert contacts == []
    for name, data in before.items():
        assert (directory / name).read_bytes() == data, f"{name} was changed"
    assert not (tmp_path / "state" / "r9700ctl" / "runs").exists(), "a run directory was created"


def _assert_refused_in_one_line(code: object, out: str, err: str, *names: str) -> None:
    """Exit 64, nothing on standard output, one line on standard error that names `names` and
    ends with the fix in parentheses."""
    lines = err.splitlines()
    assert (code, out, len(lines)) == (64, "", 1), err
    line = lines[0]
    assert line.startswith("error: ") and "internal error" not in line and "Traceback" not in err, line
    for name in names:
        assert name in line, line
    assert re.search(r"\([^()]*\w[^()]*(\([^()]*\)[^()]*)*\)$", line), (
        f"no fix in parentheses at the end: {line}"
    )


def test_every_case_has_its_own_id() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 83


def test_an_inventory_given_as_a_shell_pipe_is_refused_in_a_real_shell(tmp_path: Path) -> None:
    """`r9700ctl provision <(generate-inventory)`: the shell hands over /dev/fd/N, a pipe that the
    first reader empties; Ansible reads an inventory more than once, so it is refused, in one line."""
    done = subprocess.run(
        ["bash", "-c", f'{sys.executable} -m r9700ctl provision <(printf "{NODES}")'],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(tmp_path / "state")},
        check=False,
    )
    assert done.returncode == 64, done.stderr
    assert re.fullmatch(
        r"error: /dev/fd/\d+: the inventory is a pipe \(save it to a file first .*\)\n", done.stderr
    )


def test_scrape_config_of_a_yaml_inventory_prints_the_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug pinned: every YAML inventory crashed scrape-config ("internal error: RepresenterError"):
    Ansible hands back host names in its own str type, which yaml.safe_dump cannot write."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "r9700_nodes:\n  hosts:\n    node1: {ansible_host: 10.0.0.11}\n"
        "    node2: {ansible_host: 10.0.0.12, r9700_monitoring_node_exporter_port: 9200}\n"
    )
    monkeypatch.setattr(sys, "argv", ["r9700ctl", "monitoring", "scrape-config", str(inventory)])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    assert (exited.value.code, err) == (0, "")
    assert "- 10.0.0.11:9100\n" in out and "- 10.0.0.12:9200\n" in out and "instance: node2\n" in out


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("r9700_power_cap_w", 250),
        ("r9700_power_cap_w", "250"),  # an INI inventory hands over text
        ("r9700_power_cap_w_by_gpu", {"0000:03:00.0": 250, "23:00.0": 275}),
        (
            "r9700_psus",
            {"psu1": {"watts": 1600, "gpus": ["0000:03:00.0"], "host_w": 350}, "psu2": {"watts": 1200}},
        ),
        ("r9700_psu_margin", 0),
        ("r9700_container_shm_size", "8G"),
        ("r9700_container_shm_size", "1024"),
        ("r9700_container_image", "rocm/pytorch:rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.9.1"),
        ("r9700_container_image", "registry.example:5000/rocm/pytorch@sha256:" + "a" * 64),
        ("r9700_container_image", "localhost:5000/pytorch:latest"),
        ("r9700_container_registry_mirror", "http://10.213.3.1:5000"),
        ("r9700_container_registry_mirror", "https://mirror.example/"),
        ("r9700_monitoring_interval", "15min"),
        ("r9700_monitoring_interval", "1h 30min"),
        ("r9700_monitoring_interval", "90"),
        ("r9700_monitoring_node_exporter_port", 9100),
        ("r9700_p2p", "on"),
        ("r9700_p2p", False),
        ("r9700_device_group", 110),
        ("r9700_device_mode", "0660"),
        ("r9700_kernel_params", ["iommu=pt", "amdgpu.ppfeaturemask=0xffffffff"]),
        ("r9700_repo_key_fingerprint", "CA8B B472 7A47 B4D0 9B4E  E896 9386 B48A 1A69 3C5C"),
        ("r9700_repo_base_url", "http://10.213.4.1:8080"),
        ("r9700_proxy", "http://proxy.example:3128"),
        ("r9700_env", {"NCCL_DEBUG": "INFO", "MIOPEN_USER_DB_PATH": "/tmp/miopen"}),
        ("r9700_rocr_visible_devices", "0,1"),
        ("r9700_known_issue_workarounds_skip", ["r9700-rccl-72-hang"]),
    ],
    ids=lambda v: str(v)[:40],
)
def test_good_values_pass_the_same_checks(name: str, value: object) -> None:
    """The checks refuse what the roles or the tools would refuse, nothing a real setup uses."""
    from r9700ctl import variables

    checked, bad = variables.check_values({name: value})
    assert bad == [] and name in checked, [b.what() for b in bad]


# --- item 16: an existing output file that the atomic writer cannot replace --------------------
# Every writer renames a new file over PATH (r9700ctl.agent.atomic.write_atomic), so an existing
# PATH must be replaceable, not only its directory writable. An immutable ('i') or append-only
# ('a') file cannot be renamed over, by root either (man 1 chattr); in a sticky directory only
# the file's owner, the directory's owner or a privileged process may (man 2 rename, EPERM).
# Last round these passed the check, the run contacted the host, and the report was lost at the
# end ("cannot write --json: Operation not permitted", exit 3).
OUTPUT_OPTIONS = [
    ("provision --json", ("provision", "{inv}", "--json", "{out}"), "--json"),
    ("doctor --json", ("doctor", "{inv}", "--json", "{out}"), "--json"),
    ("validate --json", ("validate", "{inv}", "--json", "{out}"), "--json"),
    ("validate --html", ("validate", "{inv}", "--html", "{out}"), "--html"),
    ("validate --prom", ("validate", "{inv}", "--prom", "{out}"), "--prom"),
    ("validate --junit", ("validate", "{inv}", "--junit", "{out}"), "--junit"),
    ("validate --local --prom", ("validate", "--local", "--prom", "{out}"), "--prom"),
    ("verify --junit", ("verify", "{inv}", "--junit", "{out}"), "--junit"),
    ("upgrade --check --json", ("upgrade", "{inv}", "--check", "--json", "{out}"), "--json"),
    ("scrape-config -o", ("monitoring", "scrape-config", "{inv}", "-o", "{out}"), "--output"),
]
KEPT = b'{"an earlier report": "kept"}\n'


@pytest.fixture
def chattr() -> Iterator[Callable[[Path, str], None]]:
    """chattr +i / +a on a file, undone after the test (so that pytest can remove it)."""
    marked: list[Path] = []

    def mark(path: Path, attribute: str) -> None:
        if shutil.which("chattr") is None:
            pytest.skip("no chattr here")
        done = subprocess.run(["chattr", attribute, str(path)], capture_output=True, text=True, check=False)
        if done.returncode != 0:  # not root, or a file system without the flags (tmpfs before 6.0)
            pytest.skip(f"chattr {attribute} does not work here: {done.stderr.strip()}")
        marked.append(path)

    yield mark
    for path in marked:
        subprocess.run(["chattr", "-ia", str(path)], capture_output=True, check=False)


def _fingerprint(path: Path) -> tuple[bytes, int, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_ino, st.st_mtime_ns, st.st_mode


@pytest.mark.parametrize("attribute", ["+i", "+a"], ids=["immutable", "append-only"])
@pytest.mark.parametrize(
    ("args", "flag"), [(a, f) for _, a, f in OUTPUT_OPTIONS], ids=[i for i, _, _ in OUTPUT_OPTIONS]
)
def test_an_output_file_that_cannot_be_replaced_is_refused_before_anything_runs(
    args: tuple[str, ...],
    flag: str,
    attribute: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    contacts: list[str],
    chattr: Callable[[Path, str], None],
) -> None:
    (tmp_path / "inventory.ini").write_text(NODES, encoding="utf-8")
    reports = tmp_path / "ro"
    reports.mkdir()
    target = reports / "f.json"
    target.write_bytes(KEPT)
    chattr(target, attribute)
    before = _fingerprint(target)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = [a.replace("{inv}", str(tmp_path / "inventory.ini")).replace("{out}", str(target)) for a in args]
    monkeypatch.setattr(sys, "argv", ["r9700ctl", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    _assert_refused_in_one_line(exited.value.code, out, err, flag, str(target), "chattr -i or -a")
    assert contacts == []
    assert _fingerprint(target) == before, "the existing file was changed"
    assert os.listdir(reports) == ["f.json"], "a probe file was left behind"
    assert not (tmp_path / "state" / "r9700ctl" / "runs").exists(), "a run directory was created"


OTHER_OWNER, RUNNER = 4242, 65534  # the file's owner (no account needed) and the user who runs r9700ctl


def _main_as(
    uid: int, argv: list[str], env: dict[str, str], contacts: list[str]
) -> tuple[object, str, str, list[str]]:
    """r9700ctl's main in a forked child that has become `uid` (the patches of `contacts` come
    with the fork): its exit code, stdout, stderr and the contacts it recorded there."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.environ.update(env)
            sys.argv = ["r9700ctl", *argv]
            out, err = io.StringIO(), io.StringIO()
            code: object = None
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main()
                except SystemExit as exc:
                    code = exc.code
            result = [code, out.getvalue(), err.getvalue(), list(contacts)]
        except BaseException:  # everything goes back to the parent as text
            result = ["child failed", "", traceback.format_exc(), []]
        os.write(writer, json.dumps(result).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    code, out, err, calls = json.loads(data)
    return code, out, err, calls


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: to make another user's file and to become a third user"
)
@pytest.mark.parametrize(
    ("args", "flag"),
    [(a, f) for i, a, f in OUTPUT_OPTIONS if i in ("provision --json", "scrape-config -o")],
    ids=["provision --json", "scrape-config -o"],
)
def test_another_users_file_in_a_sticky_directory_is_refused_for_a_user_who_cannot_replace_it(
    args: tuple[str, ...], flag: str, contacts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--json /tmp/f.json` where f.json is another user's: the directory is sticky, the file is
    even writable by everyone, and yet a rename over it is refused, so the check refuses it too."""
    base = Path(tempfile.mkdtemp(prefix="r9700ctl-sticky-"))  # pytest's own tmp is root's, 0700
    try:
        base.chmod(0o755)
        (base / "inventory.ini").write_text(NODES, encoding="utf-8")
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        target = shared / "f.json"
        target.write_bytes(KEPT)
        os.chown(target, OTHER_OWNER, OTHER_OWNER)
        target.chmod(0o666)
        before = _fingerprint(target)
        argv = [a.replace("{inv}", str(base / "inventory.ini")).replace("{out}", str(target)) for a in args]
        env = {"HOME": str(base), "XDG_STATE_HOME": str(base / "state"), "NO_COLOR": "1"}
        # The same command once as root, on a file it may replace (its run ends at the patched
        # runner), so that every module the command imports is loaded before the child drops
        # root: a Python installed under /root (0700) is unreadable to the other user.
        warm = base / "warm"
        warm.mkdir()
        monkeypatch.setenv("XDG_STATE_HOME", str(warm / "state"))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            monkeypatch.setattr(
                sys, "argv", ["r9700ctl", *[a.replace(str(target), str(warm / "f.json")) for a in argv]]
            )
            with contextlib.suppress(SystemExit):
                main()
        contacts.clear()
        code, out, err, calls = _main_as(RUNNER, argv, env, contacts)
        assert code != "child failed", err
        _assert_refused_in_one_line(
            code, out, err, flag, str(target), f"uid {OTHER_OWNER} in a sticky directory"
        )
        assert calls == [] and contacts == []
        assert _fingerprint(target) == before, "the existing file was changed"
        assert os.listdir(shared) == ["f.json"], "a probe file was left behind"
        assert not (base / "state").exists(), "a run directory was created"
    finally:
        shutil.rmtree(base)


def test_the_check_leaves_a_replaceable_file_and_a_link_to_it_as_they_were(tmp_path: Path) -> None:
    """The probe swapped in and out: same bytes, same inode, same mtime, nothing left beside it."""
    from r9700ctl.cli.output import check_output_path

    target = tmp_path / "f.json"
    target.write_bytes(KEPT)
    link = tmp_path / "latest.json"
    link.symlink_to(target.name)
    before = _fingerprint(target)
    check_output_path("--json", target)
    check_output_path("--json", link)
    assert _fingerprint(target) == before
    assert link.is_symlink() and os.readlink(link) == target.name
    assert sorted(os.listdir(tmp_path)) == ["f.json", "latest.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's privilege over a sticky directory is what is shown")
def test_root_may_replace_another_users_file_in_a_sticky_directory(tmp_path: Path) -> None:
    """The rename would succeed for root (CAP_FOWNER, man 2 rename), so the check must not refuse."""
    from r9700ctl.cli.output import check_output_path

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = shared / "f.json"
    target.write_bytes(KEPT)
    os.chown(target, OTHER_OWNER, OTHER_OWNER)
    before = _fingerprint(target)
    check_output_path("--json", target)
    assert _fingerprint(target) == before and os.listdir(shared) == ["f.json"]


def test_where_the_file_system_cannot_swap_the_sticky_rule_is_applied_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS answers renameat2(RENAME_EXCHANGE) with EINVAL: another user's file in a sticky
    directory is still refused, and a file of one's own still passes."""
    from r9700ctl.cli import output
    from r9700ctl.errors import BadInput

    monkeypatch.setattr(output, "_exchange", lambda _one, _other: errno.EINVAL)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = shared / "f.json"
    target.write_bytes(KEPT)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(target).st_uid)
    output.check_output_path("-o", target)
    monkeypatch.setattr(os, "geteuid", lambda: RUNNER)
    with pytest.raises(BadInput) as refused:
        output.check_output_path("-o", target)
    assert "-o: cannot replace the existing file (Operation not permitted)" in refused.value.one_line()
    assert "in a sticky directory" in refused.value.hint
    assert _fingerprint(target)[0] == KEPT and os.listdir(shared) == ["f.json"]


def test_cluster_refuses_a_level_typed_but_not_one_from_the_environment():
    """R9700CTL_VALIDATE_LEVEL is a standing preference for validate's fleet runs; a --level typed
    with --cluster asks for something the cluster phases do not do."""
    from r9700ctl.cli.validate_cluster import not_for_cluster

    assert not_for_cluster({"level": "burnin"}, given=set()) == []
    assert not_for_cluster({"level": "burnin"}, given={"level"}) == ["--level"]
    both = not_for_cluster({"duration": 60.0, "allow_busy": True}, given=set())
    assert both == ["--duration", "--allow-busy"]
