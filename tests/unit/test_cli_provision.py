"""`r9700ctl provision` as a user meets it: bad input, the run on localhost, the report.

Bad input goes through the real entry point (r9700ctl.cli.main), which is where an error
becomes one line and an exit code; each case asserts exit 64, that exact line, and that the
runner was never called (the hosts sit on TEST-NET-1, 192.0.2.0/24, where nothing answers).
Runs use a real ansible-playbook against `localhost ansible_connection=local`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from r9700ctl import manifest, paths
from r9700ctl.cli import cli, main

NODE_RECORD_PLAY = """\
- name: Record the node (test copy of provision.yml without the provisioning roles)
  hosts: "{{ r9700_group }}"
  gather_facts: true
  roles:
    - role: r9700ctl.nodes.r9700_node_record
      tags: [r9700_node_record]
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _state_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def runner_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Records any call of the runner: bad input must stop before it."""
    calls: list[object] = []

    def refuse(request: object, on_progress: object = None) -> None:
        calls.append(request)
        raise AssertionError("the runner was called: a host would have been contacted")

    monkeypatch.setattr("r9700ctl.ansible_run.run_playbook", refuse)
    return calls


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """The console script, in process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["r9700ctl", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


def ini(tmp_path: Path, body: str, name: str = "inventory.ini") -> Path:
    return write(tmp_path / name, body)


GOOD_NODES = """
[r9700_nodes]
node1 ansible_host=192.0.2.11
node2 ansible_host=192.0.2.12
"""


def bad_input_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(id, arguments, the exact error line) for every kind of bad input."""
    releases = ", ".join(manifest.load().release_names())
    cases: list[tuple[str, list[str], str]] = []

    def case(case_id: str, args: list[str], line: str) -> None:
        cases.append((case_id, args, line))

    missing = tmp / "missing.ini"
    case(
        "missing path",
        [str(missing)],
        f"{missing}: inventory file not found "
        "(give the path of an INI or YAML inventory; inventory/example.ini shows the format)",
    )
    (tmp / "invdir").mkdir()
    case(
        "a directory",
        [str(tmp / "invdir")],
        f"{tmp / 'invdir'}: is a directory, not an inventory file "
        "(give the inventory file inside it, for example inventory.ini)",
    )
    p = ini(tmp, "[r9700_nodes]\nnode1 ansible_host=192.0.2.11\n[r9700_nodes:vars]\nexpected_gpus\n", "b.ini")
    case(
        "unparsable INI names file and line",
        [str(p)],
        f"{p}:4: cannot parse as INI inventory: Expected key=value, got: expected_gpus "
        f"(fix the syntax; `ansible-inventory -i {p} --graph` shows how Ansible reads it)",
    )
    p = ini(tmp, "[r9700_nodes\nnode1 ansible_host=192.0.2.11\n", "open.ini")
    case(
        "an unclosed [group] names the line, not Python's unpacking error",
        [str(p)],
        f"{p}:1: cannot parse as INI inventory: '[r9700_nodes' opens a [group] header but never "
        f"closes it (add the ']') "
        f"(fix the syntax; `ansible-inventory -i {p} --graph` shows how Ansible reads it)",
    )
    p = write(tmp / "bad2.yml", "r9700_nodes:\n  hosts:\n    node1: {ansible_host: [}\n")
    case(
        "unparsable YAML names file and line",
        [str(p)],
        f"{p}:3: cannot parse as YAML inventory: YAML parsing failed: Colons in unquoted values must be "
        f"followed by a non-space character. "
        f"(fix the syntax; `ansible-inventory -i {p} --graph` shows how Ansible reads it)",
    )
    p = ini(tmp, "[gpus]\nnode1 ansible_host=192.0.2.11\n[other]\nnode2 ansible_host=192.0.2.12\n", "ng.ini")
    case(
        "missing group names the groups that exist",
        [str(p)],
        f"{p}: no group 'r9700_nodes' in this inventory (groups: gpus, other) "
        "(put the nodes under [r9700_nodes], or name their group with --group)",
    )
    p = ini(tmp, "[r9700_nodes]\n\n[other]\nnode2 ansible_host=192.0.2.12\n", "empty.ini")
    case(
        "empty group",
        [str(p)],
        f"{p}: group 'r9700_nodes' has no hosts (list the nodes under [r9700_nodes], one per line)",
    )
    p = ini(tmp, "[r9700_nodes]\nnode1 ansible_host=192.0.2.11 r9700_expected_gpus=four\n", "gpus1.ini")
    case(
        "expected GPUs not an integer",
        [str(p)],
        f"{p}:2: node1: r9700_expected_gpus='four' is not a whole number, 1 or more {GPUS_FIX}",
    )
    p = ini(tmp, GOOD_NODES + "[r9700_nodes:vars]\nr9700_expected_gpus=0\n", "gpus0.ini")
    case(
        "expected GPUs below one",
        [str(p)],
        f"{p}:5: node1: r9700_expected_gpus=0 is not a whole number, 1 or more {GPUS_FIX}",
    )
    p = ini(tmp, GOOD_NODES + "[r9700_nodes:vars]\nr9700_driver_source=rpm\n", "source.ini")
    case(
        "a value outside the argument spec's choices",
        [str(p)],
        f"{p}:5: node1: r9700_driver_source='rpm' is not one of dkms, inbox, present "
        "(set r9700_driver_source to one of dkms, inbox, present: where the amdgpu kernel driver comes from)",
    )
    p = ini(tmp, GOOD_NODES + "[r9700_nodes:vars]\nr9700_validate_timeout=long\n", "timeout.ini")
    case(
        "a value of another role's spec",
        [str(p)],
        f"{p}:5: node1: r9700_validate_timeout='long' is not a whole number, 1 or more "
        "(set r9700_validate_timeout to a whole number, 1 or more: seconds the agent may run before it "
        "is stopped (exit status 124 recorded))",
    )
    p = ini(tmp, GOOD_NODES + "[r9700_nodes:vars]\nr9700_rocm_version=6.3.9\n", "rocm.ini")
    case(
        "ROCm release not in the manifest lists the known ones",
        [str(p)],
        f"{p}:5: node1: r9700_rocm_version '6.3.9' is not a ROCm release r9700ctl knows "
        f"(use auto or one of: {releases})",
    )
    p = ini(
        tmp,
        "[r9700_nodes]\nnode1 ansible_host=192.0.2.11\nnode2 ansible_host=192.0.2.12\n"
        "gpu-a ansible_host=192.0.2.11 ansible_port=22\n",
        "dup.ini",
    )
    case(
        "two hosts on one address and port",
        [str(p)],
        f"{p}: hosts node1 and gpu-a both connect to 192.0.2.11 port 22 "
        "(give each host its own ansible_host (or ansible_port), or remove the duplicate entry)",
    )
    p = ini(
        tmp,
        "[r9700_nodes]\nnode1 ansible_host=192.0.2.11\nnode2 ansible_host=192.0.2.12 r9700_expectd_gpus=4\n",
        "typo.ini",
    )
    case(
        "unknown r9700_ variable with a did-you-mean",
        [str(p)],
        f"{p}:3: node2: unknown variable r9700_expectd_gpus (did you mean r9700_expected_gpus?)",
    )
    gv_dir = tmp / "with_group_vars"
    p = write(gv_dir / "inventory.ini", GOOD_NODES)
    write(gv_dir / "group_vars" / "all.yml", "---\nr9700_expected_gpus: 4\nr9700_rocm_verison: auto\n")
    case(
        "unknown variable in group_vars beside the inventory",
        [str(p)],
        f"{gv_dir / 'group_vars' / 'all.yml'}:3: node1: unknown variable r9700_rocm_verison "
        "(did you mean r9700_rocm_version?)",
    )
    hv_dir = tmp / "with_host_vars"
    p = write(hv_dir / "inventory.ini", GOOD_NODES)
    write(hv_dir / "host_vars" / "node2.yml", "---\nr9700_expected_gpus: -1\n")
    case(
        "bad value in host_vars",
        [str(p)],
        f"{hv_dir / 'host_vars' / 'node2.yml'}:2: node2: r9700_expected_gpus=-1 is not a whole number, "
        f"1 or more {GPUS_FIX}",
    )
    good = ini(tmp, GOOD_NODES, "good.ini")
    case(
        "unknown variable in extra vars",
        [str(good), "-e", "r9700_expectd_gpus=4"],
        "--extra-vars: unknown variable r9700_expectd_gpus (did you mean r9700_expected_gpus?)",
    )
    case(
        "bad value in extra vars",
        [str(good), "-e", '{"r9700_expected_gpus": 2.5}'],
        f"--extra-vars: r9700_expected_gpus=2.5 is not a whole number, 1 or more {GPUS_FIX}",
    )
    case(
        "extra vars file missing",
        [str(good), "-e", f"@{tmp / 'nothere.yml'}"],
        f"{tmp / 'nothere.yml'}: -e @{tmp / 'nothere.yml'}: file not found "
        "(give the path of a YAML or JSON file after @)",
    )
    case(
        "extra vars that are not variables",
        [str(good), "-e", "[1, 2]"],
        "-e [1, 2]: not a set of variables "
        "(use key=value, @file.yml or a JSON object such as '{\"r9700_expected_gpus\": 4}')",
    )
    case(
        "a password in extra vars",
        [str(good), "-e", "ansible_become_password=hunter2"],
        "-e ansible_become_password: a secret on the command line ends up in shell history and run artifacts "
        "(use --ask-become-pass, or SSH keys for the connection)",
    )
    case(
        "a variable r9700ctl sets itself",
        [str(good), "-e", "r9700_group=other"],
        "--extra-vars: r9700_group is set by r9700ctl itself (remove it; r9700ctl sets it from --group)",
    )
    case(
        "limit matching no host of the group",
        [str(good), "--limit", "node9"],
        "--limit node9 matches no host of group 'r9700_nodes' (hosts: node1, node2) "
        "(name hosts or groups of the inventory, for example --limit node1,node2)",
    )
    case(
        "forks below one",
        [str(good), "--forks", "0"],
        "Invalid value for '--forks': 0 is not in the range x>=1. (try 'r9700ctl provision --help')",
    )
    case(
        "JSON report into a missing directory",
        [str(good), "--json", str(tmp / "no" / "such" / "run.json")],
        f"{tmp / 'no' / 'such' / 'run.json'}: --json: directory {tmp / 'no' / 'such'} does not exist "
        "(create the directory first or give another path)",
    )
    return cases


# The fix for a bad r9700_expected_gpus: the allowed values, then the description from
# roles/r9700_preflight/meta/argument_specs.yml.
GPUS_FIX = (
    "(set r9700_expected_gpus to a whole number, 1 or more: "
    "number of discrete AMD GPUs each node must show; unset skips the comparison)"
)
BAD_INPUT_IDS = [
    "missing path",
    "a directory",
    "unparsable INI names file and line",
    "an unclosed [group] names the line, not Python's unpacking error",
    "unparsable YAML names file and line",
    "missing group names the groups that exist",
    "empty group",
    "expected GPUs not an integer",
    "expected GPUs below one",
    "a value outside the argument spec's choices",
    "a value of another role's spec",
    "ROCm release not in the manifest lists the known ones",
    "two hosts on one address and port",
    "unknown r9700_ variable with a did-you-mean",
    "unknown variable in group_vars beside the inventory",
    "bad value in host_vars",
    "unknown variable in extra vars",
    "bad value in extra vars",
    "extra vars file missing",
    "extra vars that are not variables",
    "a password in extra vars",
    "a variable r9700ctl sets itself",
    "limit matching no host of the group",
    "forks below one",
    "JSON report into a missing directory",
]


@pytest.mark.parametrize("case_id", BAD_INPUT_IDS)
def test_bad_input_gets_one_line_and_exit_64_before_any_host_is_contacted(
    case_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    runner_calls: list[object],
) -> None:
    """Ansible alone warns and goes on (or runs a typo'd variable as if unset); here each mistake
    stops the run with the file, the line where known, what is wrong and the fix."""
    cases = {name: (args, line) for name, args, line in bad_input_cases(tmp_path)}
    assert list(cases) == BAD_INPUT_IDS
    args, line = cases[case_id]
    code, out, err = run_main(monkeypatch, capsys, "provision", *args)
    assert (code, err, out) == (64, f"error: {line}\n", ""), case_id
    assert runner_calls == [], case_id
    assert not (tmp_path / "state").exists(), f"{case_id}: a run directory was created"


# --- real runs on localhost ---------------------------------------------------------------------


@pytest.fixture
def local_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An inventory of this machine (local connection, no become) and the provision play without
    the provisioning roles, which must never touch the machine running the tests."""
    record = tmp_path / "etc" / "node.json"
    connection = f"ansible_connection=local ansible_become=false ansible_python_interpreter={sys.executable}"
    inventory = write(
        tmp_path / "inventory.ini",
        f"""
        [r9700_nodes]
        localnode ansible_host=localhost {connection} r9700_node_record_path={record}

        [r9700_nodes:vars]
        r9700_expected_gpus=2
        """,
    )
    play = write(tmp_path / "playbooks" / "provision.yml", NODE_RECORD_PLAY)
    monkeypatch.setattr(paths, "playbook", lambda name: play if name == "provision.yml" else None)
    return {"inventory": inventory, "record": record}


def test_provision_of_a_node_records_it_and_a_second_run_changes_nothing(
    local_node: dict[str, Path], tmp_path: Path
) -> None:
    """The end-to-end path: checks, ansible-runner, node.json; idempotent (no timestamps in the file)."""
    runner = CliRunner()
    report = tmp_path / "run.json"
    first = runner.invoke(
        cli, ["provision", str(local_node["inventory"]), "--json", str(report)], catch_exceptions=False
    )
    assert first.exit_code == 0, first.output
    # A pipe gets a log: one line per task that changed, no running totals, no Ansible-internal names.
    assert "localnode: changed Ensure the node record describes this node\n" in first.output
    assert "Gathering Facts" not in first.output and "arg spec" not in first.output
    assert "ok=" not in first.output
    assert "1 host(s) in " in first.output and ": 0 ok, 1 changed, 0 failed, 0 unreachable\n" in first.output
    assert "run artifacts:" not in first.output
    row = next(line for line in first.output.splitlines() if line.startswith("localnode ")).split()
    assert row[1:5] == ["CHANGED", "6", "2", "0"]

    record = json.loads(local_node["record"].read_text())
    assert record["schema"] == "r9700ctl.node/1"
    assert record["gpu_source"] == "sysfs"
    # This machine's own display devices, as the node package reads them (lab nodes: tests/lab).
    from r9700ctl.agent import sysfs

    assert record["gpus"] == sysfs.display_devices(Path("/"))
    from r9700ctl import __version__

    assert record["toolkit_version"] == __version__
    assert set(record) >= {"os", "kernel", "cpu", "memory_mb", "hostname", "architecture"}

    document = json.loads(report.read_text())
    assert document["schema"] == "r9700ctl.provision/1"
    assert document["exit_code"] == 0 and document["status"] == "successful"
    assert document["hosts"][0] | {"duration_s": 0} == {
        "host": "localnode",
        "address": "localhost",
        "status": "CHANGED",
        "ok": 6,
        "changed": 2,
        "failed": 0,
        "unreachable": 0,
        "skipped": 0,
        "rescued": 0,
        "ignored": 0,
        "duration_s": 0,
        "failed_tasks": [],
        "reboot_pending": False,
        "reboot_reasons": [],
        "versions": {},
        "rocm_choice": "",  # this play has no r9700_preflight
        "known_issues": [],
        "p2p": None,
        "containers": None,
        "converged": False,  # this play has no r9700_lifecycle converged step
        "converged_reason": None,
        "interrupted_in": None,
    }
    run_dir = Path(document["artifact_dir"])
    assert run_dir.parent == tmp_path / "state" / "r9700ctl" / "runs"
    assert json.loads((run_dir / "report.json").read_text())["hosts"] == document["hosts"]

    second = runner.invoke(cli, ["provision", str(local_node["inventory"])], catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert ": 1 ok, 0 changed, 0 failed, 0 unreachable\n" in second.output
    row = next(line for line in second.output.splitlines() if line.startswith("localnode ")).split()
    assert row[1:4] == ["OK", "6", "0"]


def test_check_mode_on_a_fresh_node_writes_nothing(local_node: dict[str, Path]) -> None:
    result = CliRunner().invoke(
        cli, ["provision", str(local_node["inventory"]), "--check", "--diff"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "(check mode: nothing was changed)" in result.output
    assert not local_node["record"].exists()


def test_an_unreachable_host_is_reported_and_the_others_still_run(
    local_node: dict[str, Path], tmp_path: Path
) -> None:
    """A host that does not answer must not stop the run; it is UNREACHABLE and the exit code is 3."""
    inventory = local_node["inventory"]
    inventory.write_text(
        inventory.read_text().replace(
            "\n\n[r9700_nodes:vars]",
            # Port 9 on loopback: nothing listens, so the connection is refused at once.
            "\ndeadnode ansible_host=127.0.0.1 ansible_port=9 ansible_ssh_common_args='-o ConnectTimeout=3'"
            "\n\n[r9700_nodes:vars]",
        )
    )
    report = tmp_path / "run.json"
    args = ["provision", str(inventory), "--json", str(report)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 3, result.output
    lines = result.output.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith(("localnode ", "deadnode "))] == [
        ["localnode", "CHANGED"],
        ["deadnode", "UNREACHABLE"],
    ]
    assert any(
        line.startswith("deadnode: UNREACHABLE: ssh: connect to host 127.0.0.1 port 9: Connection refused (")
        for line in lines
    ), result.output
    document = json.loads(report.read_text())
    assert document["exit_code"] == 3
    assert f"run artifacts: {document['artifact_dir']}" in lines
    assert local_node["record"].exists()


def test_json_to_stdout_is_the_document_alone(local_node: dict[str, Path]) -> None:
    args = ["provision", str(local_node["inventory"]), "--json", "-"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == "r9700ctl.provision/1"
    assert "localnode: changed Ensure the node record describes this node\n" in result.stderr


def test_the_installed_provision_playbook_passes_ansible_syntax_check(tmp_path: Path) -> None:
    """provision.yml is what users run: it must parse, by its name in the installed collection."""
    import subprocess

    inventory = write(tmp_path / "inv.ini", "[r9700_nodes]\nnode1 ansible_connection=local\n")
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "ANSIBLE_COLLECTIONS_PATH": str(paths.collections_path(tmp_path / "collections")),
    }
    done = subprocess.run(
        ["ansible-playbook", "--syntax-check", "-i", str(inventory), paths.playbook("provision.yml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def use_play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasks: str) -> None:
    """Swap provision.yml for a play of these tasks (the runner and the report are the same)."""
    body = textwrap.indent(textwrap.dedent(tasks).strip("\n"), "    ")
    play = write(
        tmp_path / "swapped" / "provision.yml",
        '- name: Swapped play\n  hosts: "{{ r9700_group }}"\n  gather_facts: false\n  tasks:\n' + body + "\n",
    )
    monkeypatch.setattr(paths, "playbook", lambda name: play)


def test_a_failed_host_exits_2_and_names_the_task_and_the_artifacts(
    local_node: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_play(
        tmp_path,
        monkeypatch,
        """
        - name: Install a package that does not exist
          ansible.builtin.shell: "echo 'E: Unable to locate package rocm-nope' >&2; exit 100"
        """,
    )
    result = CliRunner().invoke(cli, ["provision", str(local_node["inventory"])], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    error = "rc 100: E: Unable to locate package rocm-nope"
    assert f"localnode: FAILED Install a package that does not exist: {error}" in lines
    assert f"localnode: FAILED at 'Install a package that does not exist': {error}" in lines
    assert any(line.startswith("run artifacts: ") for line in lines)


def test_a_reboot_the_node_could_not_do_exits_1_and_says_why(
    local_node: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The convention of the roles: set_fact r9700_reboot_pending (and r9700_reboot_reasons)."""
    use_play(
        tmp_path,
        monkeypatch,
        """
        - name: Report that the driver needs a reboot
          ansible.builtin.set_fact:
            r9700_reboot_pending: true
            r9700_reboot_reasons: [amdgpu-dkms 6.14 installed]
        """,
    )
    report = tmp_path / "run.json"
    args = ["provision", str(local_node["inventory"]), "--json", str(report)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert "localnode: reboot pending (amdgpu-dkms 6.14 installed)" in lines
    assert "reboot localnode, then run provision again: it should change nothing" in lines
    document = json.loads(report.read_text())
    assert document["reboot_pending"] == ["localnode"]
    assert document["hosts"][0]["reboot_reasons"] == ["amdgpu-dkms 6.14 installed"]


def test_verbose_shows_every_result_and_passes_v_to_ansible(
    local_node: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_play(tmp_path, monkeypatch, '- name: Change something\n  ansible.builtin.command: "true"\n')
    result = CliRunner().invoke(
        cli, ["provision", str(local_node["inventory"]), "-vv"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "localnode: changed Change something\n" in result.output
    assert (
        'changed: [localnode] => {"changed": true, "cmd": ["true"]' in result.output
    )  # Ansible's own, at -vv
    request = json.loads(next((tmp_path / "state").rglob("request.json")).read_text())
    assert request["verbosity"] == 2


def test_the_become_password_is_asked_only_after_the_inventory_passed(
    local_node: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A typo must not cost the operator a password prompt first; the answer reaches ansible only."""
    use_play(
        tmp_path, monkeypatch, '- name: Nothing\n  ansible.builtin.command: "true"\n  changed_when: false\n'
    )
    bad = write(tmp_path / "bad.ini", "[r9700_nodes]\nnode1 r9700_expectd_gpus=1\n")
    code, out, err = run_main(monkeypatch, capsys, "provision", str(bad), "-K")
    assert (code, out) == (64, "")
    assert err.startswith(f"error: {bad}:2: node1: unknown variable r9700_expectd_gpus")
    result = CliRunner().invoke(
        cli, ["provision", str(local_node["inventory"]), "-K"], input="s3cret-pw\n", catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("BECOME password: \n")
    assert "s3cret-pw" not in result.output
    for path in (tmp_path / "state").rglob("*"):
        assert not path.is_file() or b"s3cret-pw" not in path.read_bytes(), path


def test_the_display_pci_devices_are_read_from_a_sysfs_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node record's program (r9700-pci-devices, the node package's one sysfs reader) reads
    sysfs under a root it is given: a fake tree stands in here. Every display-class function
    counts (whoever made it); audio and bridges do not."""
    from agent_stage import node_program_file

    def read_display_devices(root: Path) -> list[dict[str, Any]]:
        command = [sys.executable, str(node_program_file()), "r9700-pci-devices", "--root", str(root)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout)["devices"]

    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    for address, vendor, device, pci_class in [
        ("0000:c3:00.0", "0x1002", "0x7551", "0x030000"),  # R9700
        ("0000:c3:00.1", "0x1002", "0xab40", "0x040300"),  # its HDMI audio
        ("0000:03:00.0", "0x1002", "0x7551", "0x030000"),  # R9700
        ("0000:02:00.0", "0x1a03", "0x2000", "0x030000"),  # ASPEED BMC graphics
        ("0000:00:01.1", "0x1022", "0x14ab", "0x060400"),  # a PCIe bridge
        ("0000:41:00.0", "0x10DE", "0x2335", "0x030200"),  # an NVIDIA 3D controller
    ]:
        for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
            write(devices / address / name, value + "\n")
    found = read_display_devices(tmp_path)
    assert [(d["address"], d["vendor_name"]) for d in found] == [
        ("0000:02:00.0", "ASPEED"),
        ("0000:03:00.0", "AMD"),
        ("0000:41:00.0", "NVIDIA"),
        ("0000:c3:00.0", "AMD"),
    ]
    assert found[2]["vendor"] == "0x10de"
    assert read_display_devices(tmp_path / "nothing") == []


def test_on_a_terminal_each_host_has_one_live_line_with_its_task_and_counts() -> None:
    """The live display (rich) redraws one line per host; failures are printed above it at once."""
    import io

    from rich.console import Console

    from r9700ctl.ansible_run import HostResult, Progress
    from r9700ctl.report.progress import LiveProgress

    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=100, color_system=None)
    node1, node2 = HostResult("node1", ok=3, changed=1, started=True), HostResult("node2", ok=2, started=True)
    with LiveProgress(console, hosts=["node1", "node2"]) as live:
        live(Progress("node1", "Install ROCm", "start", node1))
        live(Progress("node2", "Add the ROCm repository", "start", node2))
        node2.failed = 1
        live(Progress("node2", "Add the ROCm repository", "failed", node2, "403 Forbidden"))
        frame = live._table()
    text = stream.getvalue()
    assert "node2: FAILED Add the ROCm repository: 403 Forbidden" in text
    with console.capture() as captured:
        console.print(frame)
    rows = [line.split() for line in captured.get().splitlines()]
    assert rows == [
        ["node1", "Install", "ROCm", "ok=3", "changed=1"],
        ["node2", "Add", "the", "ROCm", "repository", "[failed]", "ok=2", "changed=0", "failed=1"],
    ]


def test_the_plain_log_shows_changes_and_failures_with_their_own_counts_and_a_heartbeat() -> None:
    """Piped output: per host a line per task that changed or failed, item counts of that task,
    a "still at" line while a task runs long, no Ansible-internal task names."""
    import io

    from rich.console import Console

    from r9700ctl.ansible_run import HostResult, Progress
    from r9700ctl.report.progress import PlainProgress

    out = io.StringIO()
    now = [0.0]
    plain = PlainProgress(Console(file=out, width=60), heartbeat_s=30, clock=lambda: now[0])
    host = HostResult(host="node1")

    def event(task: str, kind: str, **extra: Any) -> None:
        plain(Progress("node1", task, kind, host, **extra))

    event("Validating arguments against arg spec 'main' - Install ROCm", "start", role="r9700_rocm")
    event("Validating arguments against arg spec 'main' - Install ROCm", "ok", role="r9700_rocm")
    event("Ensure the ROCm packages are installed", "start")
    now[0] = 31.0
    plain.heartbeat()
    plain.heartbeat()  # said once per heartbeat period
    event("Ensure the ROCm packages are installed", "changed", items=(2, 3))
    event("Ensure nothing else changed", "ok")
    event(
        "Preflight | Judge the node",
        "ok",
        warnings=("node1: rocm.version: FORCED by r9700_allow_unsupported",),
    )
    event("Validating arguments against arg spec 'main' - Set up access", "failed", role="r9700_access",
          message="r9700_render_group must be a string")  # fmt: skip
    assert out.getvalue().splitlines() == [
        "node1: still at Ensure the ROCm packages are installed (31s)",
        "node1: changed Ensure the ROCm packages are installed (2 of 3 items changed)",
        "node1: WARNING rocm.version: FORCED by r9700_allow_unsupported",
        "node1: FAILED checking the role's variables (r9700_access): r9700_render_group must be a string",
    ]


def test_the_summary_names_the_rocm_release_each_host_has() -> None:
    from r9700ctl.ansible_run import HostResult
    from r9700ctl.report.provision import rocm_release

    after = {"rocm-core": "7.1.1.70101-38~24.04"}
    installed = HostResult("node1", facts={"r9700_versions": {"before": {}, "after": after}})
    assert rocm_release(installed) == "7.1.1"
    assert rocm_release(HostResult("node2")) == "-"  # failed before ROCm, or nothing recorded


def test_the_summary_table_is_whole_in_a_pipe_and_fits_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe has no width: the table keeps its natural width (the error whole, one line per host);
    a terminal of 80 columns gets the error cut with an ellipsis, still one line per host."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from r9700ctl.ansible_run import FailedTask, HostResult
    from r9700ctl.cli.app import Application
    from r9700ctl.report import print_plain
    from r9700ctl.report.provision import summary_table

    error = "apt-get install rocm: E: Unable to locate package rocm-hip-sdk (the ROCm source is missing) " * 2
    host = HostResult("node1", ok=3, failed=1, started=True, failed_tasks=[FailedTask("Install ROCm", error)])
    outcome = SimpleNamespace(hosts=[host])
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stdout", piped)
    console = Application().console()
    print_plain(console, summary_table(outcome, plain=True, width=console.width))  # type: ignore[arg-type]
    rows = piped.getvalue().splitlines()
    assert len(rows) == 2 and rows[1].startswith("node1") and rows[1].endswith(error.strip())

    screen = io.StringIO()
    terminal = Console(file=screen, width=80, force_terminal=True, color_system=None)
    terminal.print(summary_table(outcome, plain=False, width=80))  # type: ignore[arg-type]
    lines = screen.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].rstrip().endswith("…") and max(len(line) for line in lines) <= 80


def test_a_converged_node_runs_only_preflight_and_the_check_before_its_play_ends(tmp_path: Path) -> None:
    """The tasks provision.yml runs before a converged node ends its play: preflight's three and the
    converged step's two, nothing else (each task a node reaches costs the controller ~30 ms per node:
    the no-op provision's node-count ratio, docs/benchmarks.md). The step is imported by its own
    entry point, so neither lifecycle's argument check nor its step include runs first."""
    import subprocess

    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "ANSIBLE_COLLECTIONS_PATH": str(paths.collections_path(tmp_path / "collections")),
        "ANSIBLE_HOME": str(tmp_path / "home"),
    }
    done = subprocess.run(
        ["ansible-playbook", "--list-tasks", "-i", "localhost,", paths.playbook("provision.yml")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    listed = [line.strip().split("\t")[0] for line in done.stdout.splitlines() if " : " in line]
    ends = next(i for i, task in enumerate(listed) if "Leave a converged node as it is" in task)
    # The names as the role files have them: preflight's argument check and tasks, the step's first two.
    roles = Path(__file__).resolve().parents[2] / "roles"
    preflight = [t["name"] for t in yaml.safe_load((roles / "r9700_preflight/tasks/main.yml").read_text())]
    converged = [
        t["name"] for t in yaml.safe_load((roles / "r9700_lifecycle/tasks/converged.yml").read_text())
    ]
    assert [task.split(" - ")[0] for task in listed[:ends]] == [
        "r9700ctl.nodes.r9700_preflight : Validating arguments against arg spec 'main'",
        *(f"r9700ctl.nodes.r9700_preflight : {name}" for name in preflight),
        *(f"r9700ctl.nodes.r9700_lifecycle : {name}" for name in converged[:2]),
    ], listed[: ends + 1]
    assert len(preflight) == 2 and converged[2].startswith("Converged | Leave a converged node"), (
        preflight,
        converged,
    )
