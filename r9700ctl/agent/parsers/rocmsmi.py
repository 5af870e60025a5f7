"""rocm-smi outputs: `--showallinfo --json` and the `--showtopo` text.

The JSON is {"card0": {...}, "card1": {...}, "system": {...}} with human-readable field
names whose spelling changed between releases ("Average Graphics Package Power (W)" or
"Current Socket Graphics Package Power (W)"), string values ("45.0", "(800Mhz)",
"2 (16.0GT/s x16)") and "N/A". rocm-smi is deprecated in favour of amd-smi but still
ships, and older nodes only have it.

`--showtopo` prints four sections: weight, hops and link type matrices between GPUs,
then the NUMA node of each GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.parsers._common import (
    AmdGpuRecord,
    cannot_read,
    failure,
    from_file,
    json_report,
    never_raises,
    normalise_bdf,
    number,
    text_value,
    to_mib,
)


@dataclass
class RocmSmiCard(AmdGpuRecord):
    """One cardN entry (its N is `index`) beyond the facts the SMI records share (AmdGpuRecord);
    None where rocm-smi printed nothing or N/A. `fields` keeps every value as printed."""

    device_rev: str | None = None
    sku: str | None = None
    unique_id: str | None = None
    clocks_mhz: dict[str, float] = field(default_factory=dict)
    gpu_use_pct: float | None = None
    performance_level: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class RocmSmiReport:
    source: str
    cards: list[RocmSmiCard] = field(default_factory=list)
    driver_version: str | None = None
    skipped_lines: list[str] = field(default_factory=list)
    error: str | None = None


_failed = failure(RocmSmiReport)


_CARD = re.compile(r"^card(\d+)$", re.IGNORECASE)
_CLOCK = re.compile(r"^(\w+) clock speed:?$", re.IGNORECASE)
_PCIE_LEVEL = re.compile(r"([\d.]+)\s*GT/s\s*x(\d+)", re.IGNORECASE)
_FIRMWARE = re.compile(r"^(.+?) firmware version$", re.IGNORECASE)


@never_raises(_failed)
def parse_json(text: str, source: str = "rocm-smi.json") -> RocmSmiReport:
    """`rocm-smi --showallinfo --json` (any subset of --show* options works the same)."""
    document, report = json_report(text, source, RocmSmiReport)
    if document is None:
        return report
    if not isinstance(document, dict):
        report.error = cannot_read(
            source, f"expected an object of cardN entries, got {type(document).__name__}"
        )
        return report
    for key, value in document.items():
        card_key = _CARD.match(str(key))
        if card_key and isinstance(value, dict):
            report.cards.append(_card(int(card_key.group(1)), value))
        elif str(key).lower() == "system" and isinstance(value, dict):
            for name, item in value.items():
                if "driver version" in str(name).lower():
                    report.driver_version = text_value(item)
    report.cards.sort(key=lambda c: c.index)
    if not report.cards:
        report.error = report.error or cannot_read(source, "no cardN entries in it")
    return report


def _float(value: Any) -> float | None:
    num = number(value)
    return float(num) if num is not None else None


def _get(fields: dict[str, str], *names: str) -> str | None:
    """The first of `names` present (case-insensitive), as text, None for N/A."""
    lowered = {k.lower(): v for k, v in fields.items()}
    for name in names:
        if name.lower() in lowered:
            value = text_value(lowered[name.lower()])
            if value is not None:
                return value
    return None


def _card(index: int, raw: dict[str, Any]) -> RocmSmiCard:
    fields = {str(k): str(v) for k, v in raw.items() if not isinstance(v, (dict, list))}
    card = RocmSmiCard(index=index, fields=fields)
    card.name = _get(fields, "Card Series", "Device Name", "Card series")
    card.device_id = (_get(fields, "Device ID", "Card Model") or "").lower() or None
    card.device_rev = (_get(fields, "Device Rev") or "").lower() or None
    card.subsystem_id = (_get(fields, "Subsystem ID") or "").lower() or None
    card.sku = _get(fields, "Card SKU")
    gfx = _get(fields, "GFX Version")
    card.gfx_target = gfx.split(":", 1)[0].lower() if gfx else None
    card.bdf = normalise_bdf(_get(fields, "PCI Bus"))
    card.unique_id = _get(fields, "Unique ID")
    card.serial = _get(fields, "Serial Number")
    card.vbios_version = _get(fields, "VBIOS version")
    card.temperature_edge_c = _float(_get(fields, "Temperature (Sensor edge) (C)"))
    card.temperature_hotspot_c = _float(
        _get(fields, "Temperature (Sensor junction) (C)", "Temperature (Sensor hotspot) (C)")
    )
    card.temperature_mem_c = _float(_get(fields, "Temperature (Sensor memory) (C)"))
    card.power_w = _float(
        _get(
            fields,
            "Current Socket Graphics Package Power (W)",
            "Average Graphics Package Power (W)",
            "Socket Graphics Package Power (W)",
        )
    )
    card.power_cap_w = _float(_get(fields, "Max Graphics Package Power (W)"))
    card.gpu_use_pct = _float(_get(fields, "GPU use (%)"))
    card.pcie_replay_count = _int(_get(fields, "PCIe Replay Count"))
    card.numa_node = _int(_get(fields, "(Topology) Numa Node"))
    card.numa_affinity = _int(_get(fields, "(Topology) Numa Affinity"))
    card.performance_level = _get(fields, "Performance Level")
    vram_total = _get(fields, "VRAM Total Memory (B)")
    vram_used = _get(fields, "VRAM Total Used Memory (B)")
    card.vram_total_mib = to_mib(number(vram_total), "B") if vram_total else None
    card.vram_used_mib = to_mib(number(vram_used), "B") if vram_used else None
    for key, value in fields.items():
        clock = _CLOCK.match(key.strip())
        if clock:
            mhz = _float(value.replace("Mhz", " MHz").replace("MHz", " MHz"))
            if mhz is not None:
                card.clocks_mhz[clock.group(1).lower()] = mhz
            continue
        if key.strip().lower().startswith("pcie clock level"):
            level = _PCIE_LEVEL.search(value)
            if level:
                card.pcie_speed_gts, card.pcie_width = float(level.group(1)), int(level.group(2))
            continue
        firmware = _FIRMWARE.match(key.strip())
        if firmware and text_value(value) is not None:
            card.firmware[firmware.group(1)] = value.strip()
    return card


def _int(value: Any) -> int | None:
    num = number(value)
    return int(num) if num is not None else None


# --- --showtopo -----------------------------------------------------------------------


@dataclass
class RocmSmiTopology:
    """The --showtopo matrices, keyed [from GPU][to GPU]; numa_nodes by GPU index."""

    source: str
    gpus: list[int] = field(default_factory=list)
    weight: dict[int, dict[int, int | None]] = field(default_factory=dict)
    hops: dict[int, dict[int, int | None]] = field(default_factory=dict)
    link_type: dict[int, dict[int, str | None]] = field(default_factory=dict)
    numa_nodes: dict[int, int] = field(default_factory=dict)
    numa_affinity: dict[int, int] = field(default_factory=dict)
    error: str | None = None

    def pairs(self) -> list[tuple[int, int, str | None, int | None, int | None]]:
        """(from, to, link type, weight, hops) for every ordered pair of distinct GPUs."""
        return [
            (
                a,
                b,
                self.link_type.get(a, {}).get(b),
                self.weight.get(a, {}).get(b),
                self.hops.get(a, {}).get(b),
            )
            for a in self.gpus
            for b in self.gpus
            if a != b
        ]


def _topo_failed(source: str, reason: str) -> RocmSmiTopology:
    return RocmSmiTopology(source=source, error=cannot_read(source, reason))


_SECTION = re.compile(r"^=+\s*(.+?)\s*=+$")
_HEADER_ROW = re.compile(r"^\s+(GPU\d+\s*)+$")
_MATRIX_ROW = re.compile(r"^GPU(\d+)\s+(.*)$")
_NUMA = re.compile(r"^GPU\[?\s*(\d+)\]?\s*:\s*\(Topology\) Numa (Node|Affinity):\s*(-?\d+)", re.IGNORECASE)


@never_raises(_topo_failed)
def parse_topo(text: str, source: str = "rocm-smi-topo.txt") -> RocmSmiTopology:
    topo = RocmSmiTopology(source=source)
    section: str | None = None
    columns: list[int] = []
    for raw_line in text.splitlines():
        line = raw_line.rstrip()
        heading = _SECTION.match(line.strip())
        if heading:
            title = heading.group(1).lower()
            section = next((s for s in ("weight", "hops", "link type", "numa") if title.startswith(s)), None)
            columns = []
            continue
        if section is None or not line.strip():
            continue
        if section == "numa":
            numa = _NUMA.match(line.strip())
            if numa:
                target = topo.numa_nodes if numa.group(2).lower() == "node" else topo.numa_affinity
                target[int(numa.group(1))] = int(numa.group(3))
            continue
        if _HEADER_ROW.match(line):
            columns = [int(c) for c in re.findall(r"GPU(\d+)", line)]
            continue
        row = _MATRIX_ROW.match(line.strip())
        if not row or not columns:
            continue
        src = int(row.group(1))
        cells = row.group(2).split()
        if src not in topo.gpus:
            topo.gpus.append(src)
        for dst, cell in zip(columns, cells, strict=False):
            if section == "link type":
                topo.link_type.setdefault(src, {})[dst] = None if cell == "0" and src == dst else cell
            else:
                value = number(cell)
                target_matrix = topo.weight if section == "weight" else topo.hops
                target_matrix.setdefault(src, {})[dst] = int(value) if value is not None else None
    if not topo.gpus:
        topo.error = cannot_read(source, "no GPU matrix from rocm-smi --showtopo in it")
    return topo


def parse_json_file(path: str | Path) -> RocmSmiReport:
    return from_file(parse_json, _failed, path)


def parse_topo_file(path: str | Path) -> RocmSmiTopology:
    return from_file(parse_topo, _topo_failed, path)
