"""The lab itself, end to end: real namespaces, real sshd, real apt, real Ansible."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_process import r9700ctl
from stand_in_rocm import add_rocm_source

from r9700ctl.agent.parsers import rocminfo as rocminfo_parser
from r9700ctl.errors import BadInput
from r9700ctl.lab import NodeOptions, down, processes, status, up
from r9700ctl.lab import network as lab_network
from r9700ctl.lab import state as lab_state
from r9700ctl.lab.naming import LabNames
from r9700ctl.lab.teardown import mounts_under

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def changed_lab(make_lab_module):
    """A lab these tests may change (packages, sources); the session's `lab` stays pristine."""
    return make_lab_module(nodes=2)


ROCM = "7.1.1"  # any manifest release with gfx1201 works; the mirror serves them all


def _ssh_argv(lab, *options: str) -> list[str]:
    return ["ssh", "-F", str(lab.ssh_config), "-o", "ControlPath=none", *options]


def test_ssh_as_r9700_works_and_host_keys_are_checked(lab):
    for name, _ in lab.nodes:
        result = lab.ssh(name, "id -un; hostname; cat /proc/1/comm")
        assert (result.returncode, result.stdout.split()) == (0, ["r9700", name, "sshd"]), result.stderr
    # Against an empty known_hosts the same connection must be refused, not trusted on first use.
    unknown = subprocess.run(
        [*_ssh_argv(lab, "-o", "UserKnownHostsFile=/dev/null"), f"r9700@{lab.nodes[0][1]}", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 255
    assert "Host key verification failed" in unknown.stderr


def test_every_node_has_its_own_host_key(lab):
    keys = [line.split()[2] for line in lab.known_hosts.read_text().splitlines()]
    assert len(keys) == len(lab.nodes) == len(set(keys))


def test_root_login_by_key_works(lab):
    result = lab.ssh("node2", "id -u", user="root")
    assert (result.returncode, result.stdout) == (0, "0\n"), result.stderr


def test_sudo_without_a_password_and_python3_are_there(lab):
    result = lab.ssh("node1", "sudo -n id -un && python3 -c 'import apt, debian; print(\"ok\")'")
    assert (result.returncode, result.stdout) == (0, "root\nok\n"), result.stderr


def test_a_node_sees_only_its_own_processes_and_cannot_change_the_host_kernel(lab):
    """Safety, not cosmetics: a node's root is the lab host's root, so kernel settings stay read-only."""
    ps = lab.ssh("node1", "ps -e -o comm=")
    assert "sshd" in ps.stdout.split() and "apt-cacher-ng" not in ps.stdout
    write = lab.ssh("node1", "sudo sh -c 'cat /proc/sys/kernel/pid_max > /proc/sys/kernel/pid_max'")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    sysfs = lab.ssh("node1", "sudo touch /sys/r9700ctl-lab-test")
    assert sysfs.returncode != 0 and "Read-only file system" in sysfs.stderr
    disks = lab.ssh("node1", "ls /dev")
    assert sorted(disks.stdout.split()) == sorted(
        [
            "dri",  # the stand-in GPU's device nodes (r9700ctl/lab/machine.py), no disk of the host
            "fd",
            "full",
            "kfd",
            "null",
            "ptmx",
            "pts",
            "random",
            "shm",
            "stderr",
            "stdin",
            "stdout",
            "tty",
            "urandom",
            "zero",
        ]
    )


def test_stand_in_rocm_installs_from_the_signed_mirror_and_rocminfo_replays_the_nodes_machine(changed_lab):
    update = add_rocm_source(changed_lab, "node1")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    key = changed_lab.ssh(
        "node1", "gpg --show-keys --with-colons /etc/apt/keyrings/rocm.asc | grep ^fpr | cut -d: -f10"
    )
    assert key.stdout.strip().splitlines()[0] == changed_lab.key_fingerprint
    install = changed_lab.ssh(
        "node1", "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q rocm-hip-runtime"
    )
    assert install.returncode == 0, install.stdout + install.stderr
    link = changed_lab.ssh("node1", "readlink -f /opt/rocm; dpkg-query -W -f '${Version}' rocm-core")
    assert link.stdout.splitlines() == [f"/opt/rocm-{ROCM}", "7.1.1.70101-38~22.04"]
    # The stand-in replays the node's own machine: the same GPUs, at the addresses sysfs shows.
    rocminfo = changed_lab.ssh("node1", "/opt/rocm/bin/rocminfo")
    assert rocminfo.returncode == 0, rocminfo.stderr
    agents = [a.bdf for a in rocminfo_parser.parse(rocminfo.stdout).gpus]
    on_bus = changed_lab.ssh("node1", "grep -l '^0x0300' /sys/bus/pci/devices/*/class")
    assert agents == [line.split("/")[-2] for line in on_bus.stdout.split()]
    assert len(agents) == changed_lab.gpus


def test_a_debian_package_comes_through_the_apt_proxy(changed_lab):
    """The node's Debian is the lab's signed cut of bookworm main (r9700ctl/lab/debian_subset.py):
    its index from the lab mirror, the package itself from Debian through the host's proxy."""
    result = changed_lab.ssh(
        "node2",
        "sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q pciutils"
        " && apt-cache policy pciutils && apt-cache stats",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    log = (changed_lab.directory / "acng/log/apt-cacher.log").read_text()
    assert "pciutils_" in log  # fetched by the host's apt-cacher-ng, not by the node
    source = r"\d+ http://lab-debian:\d+/debian bookworm/main amd64 Packages"
    assert re.search(source, result.stdout), result.stdout
    names = int(re.search(r"Total package names: (\d+)", result.stdout).group(1))
    assert names < 10_000, result.stdout  # bookworm main alone has 63,000


def test_the_running_kernel_has_a_headers_candidate_from_lab_plumbing(changed_lab):
    result = changed_lab.ssh(
        "node2", "sudo apt-get update -q >/dev/null; apt-cache policy linux-headers-$(uname -r)"
    )
    assert "Candidate:" in result.stdout and "Candidate: (none)" not in result.stdout, result.stdout


def test_nothing_answers_at_the_unused_address(lab):
    """A connection there times out (like a powered-off server) instead of being refused."""
    started = time.monotonic()
    with pytest.raises(TimeoutError), socket.create_connection((lab.unused_address(), 22), timeout=1.5):
        pass
    assert time.monotonic() - started >= 1.4


def test_ansible_reaches_every_node_with_the_lab_inventory(lab):
    ansible = Path(sys.executable).with_name("ansible")
    result = subprocess.run(
        [
            str(ansible),
            "-i",
            str(lab.inventory),
            "r9700_nodes",
            "-m",
            "ansible.builtin.command",
            "-a",
            "id -un",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name, _ in lab.nodes:
        assert f"{name} | CHANGED | rc=0 >>\nroot" in result.stdout  # become=true via passwordless sudo


def test_status_reports_every_part_up(lab):
    result = status(lab.directory)
    assert result.healthy, result.to_json()
    assert [c.name for c in result.components] == ["bridge", "mirror", "proxy", "registry", "node1", "node2"]
    cli = r9700ctl("lab", "status", "--dir", str(lab.directory), "--json", "-", timeout=60)
    assert cli.returncode == 0 and json.loads(cli.stdout)["healthy"] is True


def test_up_on_a_running_lab_reuses_it_and_refuses_another_shape(lab):
    again = up(lab.directory, nodes=2)
    assert (again.subnet, again.key_fingerprint, again.nodes) == (lab.subnet, lab.key_fingerprint, lab.nodes)
    with pytest.raises(BadInput, match=r"already holds a lab of 2 node\(s\) x 4 GPU\(s\)"):
        up(lab.directory, nodes=3)


def test_a_broken_lab_is_reported_and_rebuilt_by_up(make_lab):
    broken = make_lab(nodes=1)
    os.kill(broken.node_pid("node1"), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while status(broken.directory).healthy and time.monotonic() < deadline:
        time.sleep(0.1)
    cli = r9700ctl("lab", "status", "--dir", str(broken.directory), timeout=60)
    assert cli.returncode == 2, cli.stdout
    assert "NOT healthy" in cli.stdout and "node1    down" in cli.stdout
    rebuilt = up(broken.directory, nodes=1)
    assert rebuilt.ssh("node1", "true").returncode == 0


@pytest.mark.parametrize("stale", ["after-reboot", "id-reused"])
def test_down_of_a_stale_lab_never_touches_the_lab_that_now_has_its_id(lab, tmp_path, stale):
    """Bug pinned: lab.json outlives a reboot; `down` on it deleted a newer lab's network and PIDs."""
    current = json.loads((lab.directory / "lab.json").read_text())
    directory = tmp_path / "stale"
    directory.mkdir()
    old = lab_state.LabState.from_json(current)
    old.directory = str(directory)  # same id, same PIDs (as if recycled), another lab directory
    old.control_dir = str(directory / "cm")
    old.boot_id = "an-earlier-boot" if stale == "after-reboot" else lab_state.boot_id()
    old.bridge_ifindex = (current["bridge_ifindex"] or 0) + 1000 if stale == "id-reused" else 1
    lab_state.save(old)
    report = down(directory)
    assert not directory.exists()
    assert not any(item.startswith(("process", "interface", "network namespace")) for item in report.removed)
    assert status(lab.directory).healthy


def test_special_nodes_without_sshd_sudo_or_headers(lab, make_lab):
    other = make_lab(nodes=3, node_options={
        "node1": NodeOptions(sshd=False),
        "node2": NodeOptions(sudo=False),
        "node3": NodeOptions(kernel_headers=False),
    })  # fmt: skip
    assert other.subnet != lab.subnet, "two labs at once must not share a subnet"
    with pytest.raises(ConnectionRefusedError), socket.create_connection((other.nodes[0][1], 22), timeout=5):
        pass
    no_sudo = other.ssh("node2", "sudo -n true")
    assert no_sudo.returncode != 0 and "password is required" in no_sudo.stderr
    headers = other.ssh(
        "node3", "sudo apt-get update -q >/dev/null; apt-cache policy linux-headers-$(uname -r)"
    )
    assert headers.returncode == 0 and "Candidate" not in headers.stdout  # no package of that name at all
    assert status(other.directory).healthy


def test_add_node_extends_a_running_lab_and_its_inventory(make_lab):
    other = make_lab(nodes=1)
    name, address = other.add_node()
    assert (name, address) == ("node2", LabNames(other.lab_id).node_address(2))
    assert f"node2 ansible_host={address}" in other.inventory.read_text()
    assert other.ssh("node2", "hostname").stdout == "node2\n"


class _LabTrace:
    """What one lab made, by kernel identity: other test sessions may reuse its id right after."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        lab = json.loads((directory / "lab.json").read_text())
        self.names = LabNames(lab["lab_id"])
        self.pids = [n["pid"] for n in lab["nodes"]] + [lab["mirror_pid"], lab["proxy_pid"]]
        self.links = {k: v for k, v in _ifindexes().items() if self.names.owns_name(k)}
        self.netns = {ns: _inode(ns) for ns in lab_network.netns_names() if self.names.owns_name(ns)}

    def left(self) -> list[str]:
        left = [f"link {k}" for k, v in _ifindexes().items() if self.links.get(k) == v]
        left += [f"netns {ns}" for ns in lab_network.netns_names() if self.netns.get(ns) == _inode(ns)]
        left += [f"pid {pid}" for pid in self.pids if processes.verified(pid, f"{self.directory}/")]
        left += mounts_under(self.directory) if self.directory.exists() else []
        return left + ([str(self.directory)] if self.directory.exists() else [])


def _ifindexes() -> dict[str, int]:
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout)
    return {link["ifname"]: link["ifindex"] for link in links}


def _inode(ns: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return None


def test_down_leaves_nothing_a_second_up_is_fast_and_down_twice_is_safe(lab_requirements):
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))
    first = up(directory, nodes=2)  # warms the root file system cache if the session lab did not
    trace = _LabTrace(directory)
    assert len(trace.links) == 3 and len(trace.netns) == 2  # the bridge and two veths; two namespaces
    assert first.ssh("node1", "true").returncode == 0
    report = down(directory)
    assert report.left == [] and report.had_lab
    assert trace.left() == []

    started = time.monotonic()
    second = up(directory, nodes=2)
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"a warm lab up took {elapsed:.1f} s"
    assert second.ssh("node2", "true").returncode == 0
    down(directory)
    again = down(directory)  # nothing left to remove, still fine
    assert again.removed == [] and not directory.exists()


def test_a_failed_up_removes_what_it_made(lab_requirements):
    """Ctrl-C (or any error) in the middle of `up` must not leave namespaces, mounts or daemons."""
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))
    traces: list[_LabTrace] = []

    def interrupt_after_first_node(message: str) -> None:
        if message.startswith("node1 started"):
            traces.append(_LabTrace(directory))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        up(directory, nodes=2, progress=interrupt_after_first_node)
    assert traces[0].links and traces[0].netns and any(traces[0].pids)
    assert traces[0].left() == []
