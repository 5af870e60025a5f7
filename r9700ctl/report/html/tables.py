"""A node's environment and GPUs as readable tables: names and values, never Python reprs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.units import size_text

# Environment keys shown first, with the label people know them by.
LABELS = {
    "hostname": "host name",
    "kernel": "kernel",
    "cmdline": "kernel command line",
    "cpu": "CPU",
    "cpus": "CPU threads",
    "memory_bytes": "memory",
    "rocm": "ROCm",
    "python": "Python",
    "torch": "PyTorch",
    "hip": "HIP",
    "cuda": "CUDA",
    "nccl": "NCCL / RCCL",
    "torch_arch_list": "PyTorch GPU targets",
}
SECTIONS = {
    "os": "Operating system",
    "bios": "BIOS and board",
    "drivers": "Drivers",
    "variables": "Variables",
}


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)


def text(value: Any) -> str:
    """One cell: lists joined, mappings as key=value pairs, booleans as yes/no, None as a dash."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={text(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(text(v) for v in value) or "—"
    return str(value)


def size(value: Any) -> str:
    return (
        size_text(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else text(value)
    )


def environment_tables(environment: Mapping[str, Any]) -> list[Table]:
    """The captured environment: a summary table, then one table per section (OS, drivers ...)."""
    if not environment:
        return []
    summary = Table("Software and host", ["", ""])
    for key, label in LABELS.items():
        if key in environment:
            value = environment[key]
            summary.rows.append([label, size(value) if key == "memory_bytes" else text(value)])
    tables = [summary]
    for key, value in environment.items():
        if key in LABELS:
            continue
        if isinstance(value, Mapping):
            title = SECTIONS.get(key, key.replace("_", " ").capitalize())
            rows = [[str(k), text(v)] for k, v in value.items()]
            tables.append(Table(title, ["", ""], rows or [["—", "none set"]]))
        else:
            summary.rows.append([key.replace("_", " "), text(value)])
    return tables


def gpu_table(gpus: list[Mapping[str, Any]]) -> Table | None:
    if not gpus:
        return None
    table = Table(
        "GPUs",
        ["GPU", "model", "PCI address", "serial", "link now / max", "VRAM", "VBIOS", "driver", "power cap"],
    )
    for gpu in gpus:
        link = gpu.get("link") if isinstance(gpu.get("link"), Mapping) else {}
        now = _link(link.get("cur_speed_gts"), link.get("cur_width"))
        top = _link(link.get("max_speed_gts"), link.get("max_width"))
        cap = gpu.get("power_cap_w")
        table.rows.append(
            [
                f"gpu{gpu.get('index')}",
                text(gpu.get("model") or gpu.get("name")),
                text(gpu.get("pci_address")),
                text(gpu.get("serial")),
                f"{now} / {top}",
                size(gpu.get("vram_bytes")),
                text(gpu.get("vbios")),
                f"{text(gpu.get('driver'))} {text(gpu.get('driver_version'))}",
                f"{cap:g} W" if isinstance(cap, (int, float)) else "—",
            ]
        )
    return table


def _link(speed: Any, width: Any) -> str:
    from r9700ctl.agent.sysfs import pcie_gen

    gen = pcie_gen(float(speed)) if isinstance(speed, (int, float)) else None
    if gen is None and width is None:
        return "—"
    return f"Gen{gen or '?'} x{width or '?'}"
