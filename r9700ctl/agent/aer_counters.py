"""PCIe AER counters of each GPU and of every port up to its root port, before and after a load.

A card that falls off the bus, a riser that corrupts TLPs at Gen5, a slot that retrains: all of
them count in the kernel's AER statistics long before a job crashes. Readers take the root path
(tests build fake trees in tmp_path); snapshots are plain data, and `increases` and `judge`
are pure, so the agent, the bundle doctor and the tests share one rule:

- any new nonfatal or fatal error on the GPU's path: FAIL (uncorrectable; the link dropped data);
- new correctable errors: WARN naming the device, its role on the path and the slot; more than
  thresholds aer.correctable_fail_per_min per minute of load: FAIL ("many"; 32/min, DCGM's AER
  threshold of 480 per 15 minutes).

Where the counts appear says where to look: at the card (GPU or its own switch ports), at the
slot port (the root or switch port the card plugs into: riser, slot, cable), or at a switch
above it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import codes, sysfs
from r9700ctl.agent.parsers import aer as aer_parser
from r9700ctl.agent.parsers.aer import KINDS, DeviceAer
from r9700ctl.agent.result import FAIL, PASS, WARN

UNCORRECTABLE = ("nonfatal", "fatal")

UNCORRECTABLE_CODE = "PCIE_AER_UNCORRECTABLE"
CORRECTABLE_CODE = "PCIE_AER_CORRECTED"


def read_device(root: Path, address: str) -> DeviceAer | None:
    """The counters of one PCI function; None when it has no aer_dev_* files (no AER, old kernel)."""
    base = sysfs.device_dir(root, address)
    device = DeviceAer(address, sysfs.bridge_chain(root, address))
    for name, kind in aer_parser.FILES.items():
        text = sysfs.read_text(base / name)
        if text is not None:
            device.counts[kind] = aer_parser.parse_counts(text)
    return device if device.counts else None


def gpu_path(root: Path, gpu_address: str) -> list[str]:
    """The GPU's path, root port first, the GPU last."""
    return [*sysfs.bridge_chain(root, gpu_address), gpu_address]


def role(root: Path, gpu_address: str, device: str) -> str:
    """What `device` is on the GPU's path, in the words a hint needs."""
    if device == gpu_address:
        return "GPU"
    upstream = sysfs.card_upstream_port(root, gpu_address)
    path = gpu_path(root, gpu_address)
    if device in path[path.index(upstream) :]:
        return "card's own switch port"
    chain = sysfs.bridge_chain(root, upstream)
    if chain and device == chain[-1]:
        if device == path[0]:
            return "root port (the card's slot)"
        return "slot port (switch port above the card)"
    return "root port" if device == path[0] else "PCIe switch port"


def slot_name(root: Path, address: str) -> str | None:
    """The physical slot (/sys/bus/pci/slots/<name>/address "dddd:bb:dd") holding `address`'s card."""
    upstream = sysfs.card_upstream_port(root, address)
    wanted = upstream.rsplit(".", 1)[0]
    try:
        slots = sorted((root / "sys/bus/pci/slots").iterdir())
    except OSError:
        return None
    for slot in slots:
        if sysfs.read_text(slot / "address") == wanted:
            return slot.name
    return None


@dataclass
class Snapshot:
    """The counters on each GPU's path at one moment: {gpu address: {device address: DeviceAer}}."""

    paths: dict[str, dict[str, DeviceAer]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # GPUs with no AER file anywhere on their path

    def to_dict(self) -> dict[str, Any]:
        return {
            gpu: {dev: {"path": d.path, "counts": d.counts} for dev, d in devices.items()}
            for gpu, devices in self.paths.items()
        }


def snapshot(root: Path, gpu_addresses: list[str]) -> Snapshot:
    shot = Snapshot()
    for gpu in gpu_addresses:
        devices = {a: d for a in gpu_path(root, gpu) if (d := read_device(root, a)) is not None}
        shot.paths[gpu] = devices
        if not devices:
            shot.unreadable.append(gpu)
    return shot


@dataclass
class Increase:
    """New errors on one device of one GPU's path between two snapshots."""

    gpu: str
    device: str
    kind: str
    delta: int
    errors: dict[str, int]  # per error name, the increase

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def increases(before: Snapshot, after: Snapshot) -> list[Increase]:
    """Every counter that grew; a counter that shrank (driver reload) counts from zero."""
    found = []
    for gpu, devices in after.paths.items():
        for address, now in devices.items():
            then = before.paths.get(gpu, {}).get(address)
            for kind in KINDS:
                total_now = now.total(kind)
                if total_now is None:
                    continue
                total_then = then.total(kind) if then is not None else None
                base = total_then if total_then is not None and total_then <= total_now else 0
                delta = total_now - base
                if delta <= 0:
                    continue
                old = (then.counts.get(kind) or {}) if then is not None and base else {}
                errors = {n: v - old.get(n, 0) for n, v in now.errors(kind).items() if v - old.get(n, 0) > 0}
                found.append(Increase(gpu, address, kind, delta, errors))
    return found


@dataclass
class Verdict:
    status: str
    summary: str
    hint: str = ""
    threshold: str = ""
    code: str = ""  # data/codes.yaml; the hint is what was found and the code's next step


def judge(
    gpu: str,
    found: list[Increase],
    seconds: float | None,
    roles: dict[str, str] | None = None,
    slot: str | None = None,
    fail_per_min: float | None = None,
    during: str = "",
) -> Verdict:
    """One GPU's new errors over a step of `seconds` (None: since boot, as in a support bundle).

    `roles` names each device of the path ("root port (the card's slot)", "GPU", ...) and `slot`
    the physical slot, so the summary says where to look.
    """
    threshold = "no new nonfatal/fatal error; new correctable errors WARN"
    if fail_per_min is not None:
        threshold += f", more than {fail_per_min:g}/min FAIL"
    roles = roles or {}
    mine = [i for i in found if i.gpu == gpu]
    if not mine:
        return Verdict(PASS, f"no new AER errors on {gpu} or the ports above it{during}", threshold=threshold)
    where = f" (slot {slot})" if slot else ""
    parts = []
    for inc in sorted(mine, key=lambda i: (KINDS.index(i.kind), i.device)):
        names = ", ".join(f"{n} {v}" for n, v in sorted(inc.errors.items())) or "no breakdown"
        parts.append(f"{inc.delta} {inc.kind} at {roles.get(inc.device, 'port')} {inc.device} ({names})")
    summary = f"{gpu}{where}: " + "; ".join(parts) + during
    uncorrectable = [i for i in mine if i.kind in UNCORRECTABLE]
    correctable = sum(i.delta for i in mine if i.kind == "correctable")
    rate = correctable / (seconds / 60.0) if seconds else None
    if uncorrectable:
        hint = codes.hint(UNCORRECTABLE_CODE, "uncorrectable PCIe errors")
        return Verdict(FAIL, summary, hint, threshold, UNCORRECTABLE_CODE)
    if rate is not None and fail_per_min is not None and rate > fail_per_min:
        hint = codes.hint(CORRECTABLE_CODE, f"PCIe errors at {rate:.0f}/min under load")
        return Verdict(FAIL, f"{summary} = {rate:.0f}/min", hint, threshold, CORRECTABLE_CODE)
    hint = codes.hint(CORRECTABLE_CODE, "corrected PCIe errors")
    return Verdict(WARN, summary, hint, threshold, CORRECTABLE_CODE)


def roles(root: Path, gpu: str) -> dict[str, str]:
    """Each device of the GPU's path with its role, for judge()."""
    return {a: role(root, gpu, a) for a in gpu_path(root, gpu)}


def describe_path(root: Path, gpu: str) -> list[dict[str, str]]:
    """The GPU's path with roles, for evidence."""
    return [{"address": a, "role": r} for a, r in roles(root, gpu).items()]


def resolved(root: Path, address: str) -> str:
    """The /sys/devices path of a device (evidence)."""
    try:
        return os.path.realpath(sysfs.device_dir(root, address))
    except OSError:
        return ""
