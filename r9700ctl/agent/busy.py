"""Which other processes use each GPU, found before (and after) measuring. Standard library only.

A busy GPU is not a broken GPU: a card shared with a training job measures half its TFLOPS, and
a hardware FAIL with a reseat hint would send the operator the wrong way. Sources:
- KFD (AMD): /sys/class/kfd/kfd/proc/<pid>/ exists for every process with a ROCm context; its
  per-GPU entries (vram_<gpu_id>, sdma_<gpu_id>, stats_<gpu_id>) say which GPUs, matched to
  /sys/class/kfd/kfd/topology/nodes/*/gpu_id. A pid that /proc does not show is listed in the
  evidence but not counted (a process that just ended, or one outside this PID namespace).
- NVIDIA: NVML's running compute processes, through
  `nvidia-smi --query-compute-apps=pid,process_name,gpu_bus_id`.
- Open files: holders of /dev/kfd (every AMD GPU), /dev/dri/renderD<N> (that GPU) and
  /dev/nvidia<N> (that GPU, by the "Device Minor" in /proc/driver/nvidia/gpus/<pci>/information)
  among /proc/*/fd; other users' descriptors need root to read (the count of unreadable ones is
  kept).
This process and its children, and the monitoring tools in thresholds busy.ignored_commands,
are never "others".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import sysfs, tools
from r9700ctl.agent.gpus import GpuInfo

KFD_PROC = "sys/class/kfd/kfd/proc"
_PER_GPU = re.compile(r"_(\d+)$")
_RENDER = re.compile(r"^/dev/dri/renderD\d+$")
_NVIDIA_DEV = re.compile(r"^/dev/nvidia(\d+)$")


@dataclass
class Holder:
    """One other process on one or more GPUs (torch indices), and where it was seen."""

    pid: int
    command: str
    gpus: list[int]
    sources: list[str] = field(default_factory=list)

    def text(self) -> str:
        return f"pid {self.pid} ({self.command})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Scan:
    holders: list[Holder] = field(default_factory=list)
    not_counted: list[str] = field(default_factory=list)  # seen but not counted, with why
    unreadable_fds: int = 0  # processes whose open files this user may not read

    def by_gpu(self) -> dict[int, list[Holder]]:
        out: dict[int, list[Holder]] = {}
        for holder in self.holders:
            for index in holder.gpus:
                out.setdefault(index, []).append(holder)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "holders": [h.to_dict() for h in self.holders],
            "not_counted": self.not_counted,
            "unreadable_fds": self.unreadable_fds,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def command_of(root: Path, pid: int) -> str:
    """The command line of `pid` (80 characters at most), else its comm, else '?'."""
    cmdline = _read(root / "proc" / str(pid) / "cmdline")
    if cmdline:
        text = " ".join(part for part in cmdline.split("\0") if part)
        if text:
            return text if len(text) <= 80 else text[:79] + "…"
    comm = _read(root / "proc" / str(pid) / "comm")
    return comm.strip() if comm else "?"


def _program(command: str) -> str:
    return os.path.basename(command.split(" ", 1)[0]) if command else ""


def _parent(root: Path, pid: int) -> int | None:
    stat = _read(root / "proc" / str(pid) / "stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def is_own(root: Path, pid: int, own_pid: int) -> bool:
    """`pid` is this process or one of its descendants."""
    seen = set()
    while pid and pid not in seen:
        if pid == own_pid:
            return True
        seen.add(pid)
        parent = _parent(root, pid)
        if parent is None:
            return False
        pid = parent
    return False


def _pids(root: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in (root / "proc").iterdir() if p.name.isdigit())
    except OSError:
        return []


def _kfd(root: Path, gpus: list[GpuInfo], scan: Scan, found: dict[int, Holder]) -> None:
    by_gpu_id = {
        props["gpu_id"]: address for address, props in sysfs.kfd_nodes(root).items() if "gpu_id" in props
    }
    index_of = {g.pci_address: g.index for g in gpus if g.pci_address}
    amd = [g.index for g in gpus if g.vendor == sysfs.AMD]
    try:
        entries = sorted((root / KFD_PROC).iterdir(), key=lambda p: p.name)
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if not (root / "proc" / str(pid)).exists():
            scan.not_counted.append(
                f"pid {pid} has a KFD context but is not in /proc (ended, or another PID namespace)"
            )
            continue
        try:
            names = [p.name for p in entry.iterdir()]
        except OSError:
            names = []
        ids = {int(m.group(1)) for n in names if (m := _PER_GPU.search(n))}
        which = sorted({index_of[by_gpu_id[i]] for i in ids if by_gpu_id.get(i) in index_of}) or amd
        _add(found, root, pid, which, "kfd")


def _nvidia(gpus: list[GpuInfo], timeout_s: float, root: Path, found: dict[int, Holder]) -> None:
    nvidia = [g for g in gpus if g.vendor == sysfs.NVIDIA]
    if not nvidia:
        return
    out = tools.run_tool(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_bus_id", "--format=csv,noheader"], timeout_s
    )
    if not out.ok:
        return
    index_of = {_pci(g.pci_address): g.index for g in nvidia if g.pci_address}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        pid, name, bus = int(cells[0]), cells[1], _pci(cells[2])
        which = [index_of[bus]] if bus in index_of else [g.index for g in nvidia]
        _add(found, root, pid, which, "nvml compute processes", name)


def _pci(address: str) -> str:
    """'00000000:17:00.0' -> '0000:17:00.0'."""
    domain, _, rest = address.strip().lower().partition(":")
    return (
        f"{int(domain, 16):04x}:{rest}" if rest and all(c in "0123456789abcdef" for c in domain) else address
    )


def _nvidia_minors(root: Path, gpus: list[GpuInfo]) -> dict[int, int]:
    """/dev/nvidia<minor> -> torch index, from the driver's per-GPU information files."""
    out = {}
    for gpu in gpus:
        if gpu.vendor != sysfs.NVIDIA or not gpu.pci_address:
            continue
        text = _read(root / "proc/driver/nvidia/gpus" / gpu.pci_address / "information") or ""
        match = re.search(r"^Device Minor:\s*(\d+)", text, re.M)
        if match:
            out[int(match.group(1))] = gpu.index
    return out


def _open_files(root: Path, gpus: list[GpuInfo], scan: Scan, found: dict[int, Holder]) -> None:
    render = {g.render_node: g.index for g in gpus if g.render_node}
    amd = [g.index for g in gpus if g.vendor == sysfs.AMD]
    nvidia = [g.index for g in gpus if g.vendor == sysfs.NVIDIA]
    minors = _nvidia_minors(root, gpus)
    for pid in _pids(root):
        try:
            fds = list((root / "proc" / str(pid) / "fd").iterdir())
        except PermissionError:
            scan.unreadable_fds += 1
            continue
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target == "/dev/kfd" and amd:
                _add(found, root, pid, amd, "/dev/kfd")
            elif _RENDER.match(target) and target in render:
                _add(found, root, pid, [render[target]], target)
            elif (match := _NVIDIA_DEV.match(target)) and nvidia:
                minor = int(match.group(1))
                _add(found, root, pid, [minors[minor]] if minor in minors else nvidia, target)


def _add(
    found: dict[int, Holder], root: Path, pid: int, gpus: Iterable[int], source: str, name: str = ""
) -> None:
    holder = found.get(pid)
    if holder is None:
        command = command_of(root, pid)
        holder = found[pid] = Holder(pid, name if command == "?" and name else command, [])
    holder.gpus = sorted(set(holder.gpus) | set(gpus))
    if source not in holder.sources:
        holder.sources.append(source)


def scan(
    root: Path,
    gpus: list[GpuInfo],
    *,
    ignored_commands: Iterable[str],
    own_pid: int | None = None,
    tool_timeout_s: float,
) -> Scan:
    """Every other process on the selected GPUs (see the module docstring)."""
    result = Scan()
    found: dict[int, Holder] = {}
    _kfd(root, gpus, result, found)
    _nvidia(gpus, tool_timeout_s, root, found)
    _open_files(root, gpus, result, found)
    me = os.getpid() if own_pid is None else own_pid
    ignored = set(ignored_commands)
    for pid, holder in sorted(found.items()):
        if is_own(root, pid, me):
            continue
        if _program(holder.command) in ignored:
            result.not_counted.append(
                f"{holder.text()}: a monitoring tool (thresholds busy.ignored_commands)"
            )
            continue
        result.holders.append(holder)
    return result
