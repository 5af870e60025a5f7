"""`lab down`: remove every process, mount, namespace, interface and file a lab made, then check.

Only PIDs recorded in lab.json are signalled, plus processes found inside the lab's own network
namespaces. Killing a node's PID 1 makes the kernel kill its whole PID namespace (ssh sessions,
anything a playbook started) and drop its private mounts. Safe to run twice and after an
aborted `up`: every step skips what is already gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.errors import R9700Error
from r9700ctl.lab import aptrepo, dockerd, locks, network, node, processes, rootfs, state
from r9700ctl.lab.hostcheck import tool
from r9700ctl.lab.naming import LabNames


@dataclass
class DownReport:
    directory: Path
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def had_lab(self) -> bool:
        return bool(self.removed)


def down(directory: Path, progress: Callable[[str], None] | None = None) -> DownReport:
    report = progress or (lambda _: None)
    started = time.monotonic()
    result = DownReport(directory=directory)
    lab = state.load(directory)
    if lab is None:
        result.left = _stray_entries(directory)
        if result.left:
            raise R9700Error(
                what=f"{directory} holds lab files but no lab.json: {', '.join(result.left)}",
                hint="remove them by hand after checking nothing of the lab runs (docs/lab.md, 'Cleanup')",
            )
        return result
    names = LabNames(lab.lab_id)
    _close_ssh_masters(directory, lab, result)
    _stop_nodes(directory, lab, result)
    for label, pid in (
        ("mirror HTTP server", lab.mirror_pid),
        ("apt-cacher-ng", lab.proxy_pid),
        ("docker-registry", lab.registry_pid),
    ):
        if processes.stop(processes.verified(pid, f"{directory}/")):
            result.removed.append(f"process {pid} ({label})")
    aptrepo.stop_agent(directory / "gnupg")
    network_left = []
    with locks.lab_ids():  # no parallel `up` may take the id between the check, removal and recheck
        # Cgroups are named after the lab id like the network (r9700ctl/lab/dockerd.py): a stale
        # lab.json's are a newer lab's, so they follow the same rule.
        ours = network_is_ours(lab)
        if ours:
            _stop_namespace_processes(names, result)
            _remove_cgroups(lab, result)
            _remove_network(names, result)
            network_left = _network_leftovers(names) + _cgroup_leftovers(lab)
            report(f"processes, cgroups and network of lab {names.prefix} removed")
        else:
            report(f"processes removed; network and cgroups of {names.prefix} are another lab's: left alone")
    _unmount_all(directory, result)
    _remove_files(directory, lab, result)
    result.left = network_left + leftovers(directory, lab)
    if result.left:
        raise R9700Error(
            what=f"lab down left {len(result.left)} thing(s) behind: {'; '.join(result.left)}",
            where=str(directory),
            hint="run `r9700ctl lab down` again; if they stay, see docs/lab.md 'Cleanup'",
        )
    state.state_path(directory).unlink(missing_ok=True)
    result.removed.append(f"file {state.state_path(directory)}")
    _remove_if_empty(directory, result)
    result.seconds = time.monotonic() - started
    return result


def _close_ssh_masters(directory: Path, lab: state.LabState, result: DownReport) -> None:
    """Ask ssh connection masters (ours, testinfra's) to exit while the nodes still answer."""
    config = directory / "ssh_config"
    if not config.is_file() or not Path(lab.control_dir).is_dir():
        return
    for entry in lab.nodes:
        for user in (rootfs.LAB_USER, "root"):  # one master per user and node
            proc = subprocess.run(
                [tool("ssh"), "-F", str(config), "-O", "exit", f"{user}@{entry.address}"],
                capture_output=True,
                timeout=10,
                check=False,
            )
            if proc.returncode == 0:
                result.removed.append(f"ssh connection master for {user}@{entry.name}")


def _stop_nodes(directory: Path, lab: state.LabState, result: DownReport) -> None:
    for entry in lab.nodes:
        unshare = processes.verified(entry.pid, f"{directory}/")
        if not node.stop(unshare):
            continue
        result.removed.append(f"process {unshare} ({entry.name}, with everything in its PID namespace)")


def _stop_namespace_processes(names: LabNames, result: DownReport) -> None:
    """Whatever still runs inside the lab's network namespaces (someone's `ip netns exec` shell)."""
    for ns in network.lab_netns(names):
        for pid in network.netns_pids(ns):
            processes.stop(pid, grace=2.0)
            result.removed.append(f"process {pid} (inside network namespace {ns})")


def _remove_cgroups(lab: state.LabState, result: DownReport) -> None:
    """The nodes' cgroups and dockerd's below them, once the nodes' processes are gone."""
    for entry in lab.nodes:
        present = [c for c in entry.cgroups if Path(c).exists()]
        dockerd.remove_cgroups(present)
        result.removed += [f"cgroup {c}" for c in present if not Path(c).exists()]


def _cgroup_leftovers(lab: state.LabState) -> list[str]:
    return [f"cgroup {c}" for entry in lab.nodes for c in entry.cgroups if Path(c).exists()]


def _remove_network(names: LabNames, result: DownReport) -> None:
    for ns in network.lab_netns(names):
        if network.delete_netns(ns):
            result.removed.append(f"network namespace {ns}")
    # A namespace still referenced by a socket can outlive its name: delete the host ends too.
    for link in sorted(network.lab_links(names), key=lambda name: name == names.bridge):
        if network.delete_link(link):
            result.removed.append(f"interface {link}")


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below `directory` in the host's mount namespace, deepest first."""
    prefix = str(directory.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = _unescape(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def _unmount_all(directory: Path, result: DownReport) -> None:
    """Host mounts exist only if `up` stopped while it wrote a node's files (the overlay)."""
    for point in mounts_under(directory):
        proc = subprocess.run([tool("umount"), point], capture_output=True, check=False, timeout=60)
        if proc.returncode != 0:
            subprocess.run([tool("umount"), "-l", point], capture_output=True, check=False, timeout=60)
        result.removed.append(f"mount {point}")


def _remove_files(directory: Path, lab: state.LabState, result: DownReport) -> None:
    if mounts_under(directory):
        return  # never delete below a mount point: it could be a file system of the host
    control = Path(lab.control_dir) if lab.control_dir else None
    if control and control.exists() and not _inside(control, directory):
        shutil.rmtree(control, ignore_errors=True)
        result.removed.append(f"directory {control}")
    for name in state.LAB_ENTRIES:
        path = directory / name
        if name == state.STATE_FILE or not (path.exists() or path.is_symlink()):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        result.removed.append(f"{'directory' if name in _DIRS else 'file'} {path}")


_DIRS = {"cm", "nodes", "mirror", "gnupg", "acng", "logs", "registry"}


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def _remove_if_empty(directory: Path, result: DownReport) -> None:
    try:
        directory.rmdir()
    except OSError:
        return  # not empty: the user's own files stay
    result.removed.append(f"directory {directory}")


def network_is_ours(lab: state.LabState) -> bool:
    """May `down` delete the interfaces and namespaces named after this lab's id?

    Not after a reboot (nothing of the lab survived it; the id may serve a newer lab), and not
    when a bridge of that name exists with another ifindex (a newer lab took the freed id).
    While any interface or namespace of an id exists no new lab takes it, so a missing bridge
    means the names left over are this lab's.
    """
    if lab.boot_id and lab.boot_id != state.boot_id():
        return False
    index = network.link_ifindex(LabNames(lab.lab_id).bridge)
    return index is None or index == lab.bridge_ifindex


def _network_leftovers(names: LabNames) -> list[str]:
    left = [f"network namespace {ns}" for ns in network.lab_netns(names)]
    return left + [f"interface {link}" for link in network.lab_links(names)]


def leftovers(directory: Path, lab: state.LabState) -> list[str]:
    """Mounts, processes and files of this lab that still exist (network, cgroups: checked where ours)."""
    left = [f"mount {point}" for point in mounts_under(directory)]
    pids = [(n.name, n.pid) for n in lab.nodes] + [
        ("mirror", lab.mirror_pid),
        ("proxy", lab.proxy_pid),
        ("registry", lab.registry_pid),
    ]
    left += [f"process {pid} ({label})" for label, pid in pids if processes.verified(pid, f"{directory}/")]
    left += [f"process {pid} (ssh to the lab)" for pid in _lab_ssh_clients(directory, lab)]
    left += [f"{'directory' if n in _DIRS else 'file'} {directory / n}" for n in _lab_files(directory)]
    if lab.control_dir and Path(lab.control_dir).exists():
        left.append(f"directory {lab.control_dir}")
    return left


def _lab_files(directory: Path) -> list[str]:
    return [n for n in state.LAB_ENTRIES if n != state.STATE_FILE and (directory / n).exists()]


def _stray_entries(directory: Path) -> list[str]:
    return [n for n in _lab_files(directory) if n in {"nodes", "mirror", "acng"}]


def _lab_ssh_clients(directory: Path, lab: state.LabState, wait: float = 5.0) -> list[int]:
    """ssh clients of this lab (by its ssh_config or control path); masters exit once their node is gone."""
    markers = [str(directory / "ssh_config").encode()]
    if lab.control_dir:
        markers.append(f"ssh: {lab.control_dir}/".encode())  # a master's process title
    deadline = time.monotonic() + wait
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            argv0 = cmdline.split(b"\0", 1)[0]
            is_ssh = argv0.rsplit(b"/", 1)[-1] == b"ssh" or argv0.startswith(b"ssh: ")
            if is_ssh and any(m in cmdline for m in markers) and processes.alive(int(entry.name)):
                found.append(int(entry.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
