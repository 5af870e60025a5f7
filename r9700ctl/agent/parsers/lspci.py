"""`lspci -vvv -nn` (also -v, -vv, -PP paths, -D domains, and plain `lspci` without -nn):
one record per PCI function.

What the doctor needs from it: which functions are GPUs and bridges, vendor:device ids,
the BARs (a 64-bit prefetchable BAR at least as large as VRAM is what PCIe P2P needs),
the link each end trained to (LnkCap against LnkSta, "(downgraded)"), ACS on bridges
(ReqRedir/CmpltRedir send peer traffic up to the root complex), the driver bound, the
NUMA node. Without root lspci prints "Capabilities: <access denied>": BARs are still
there, links and ACS are not. Without -nn (what most owners post) there are no [1002:7551]
ids: the vendor is read from its pci.ids name, the device id from "Device 7551" (a pci.ids
that does not know the chip), and `device_name` keeps the name ("Navi 48 [Radeon AI PRO
R9700]") for the doctor to match against the manifest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import cannot_read, failure, from_file, never_raises, normalise_bdf

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# Class codes (two bytes of the "[0300]" on the title line).
DISPLAY_CLASSES = ("0300", "0302", "0380", "1200")
BRIDGE_CLASS = "0604"
# Vendor names lspci prints from pci.ids without -nn (https://github.com/pciutils/pciids,
# pci.ids): 1002 is "Advanced Micro Devices, Inc. [AMD/ATI]" (older: "... [AMD] nee ATI"),
# 1022, the CPU side, "Advanced Micro Devices, Inc. [AMD]". Longest first: the AMD names share
# a prefix.
VENDOR_NAMES = (
    ("Advanced Micro Devices, Inc. [AMD/ATI]", "1002"),
    ("Advanced Micro Devices [AMD] nee ATI", "1002"),
    ("ATI Technologies Inc", "1002"),
    ("Advanced Micro Devices, Inc. [AMD]", "1022"),
    ("NVIDIA Corporation", "10de"),
    ("Intel Corporation", "8086"),
    ("ASPEED Technology, Inc.", "1a03"),
    ("Matrox Electronics Systems Ltd.", "102b"),
)


@dataclass
class Bar:
    """One memory or I/O window of a function ("Region N" or "Expansion ROM")."""

    region: int | None
    kind: str  # "memory", "io" or "rom"
    address: str | None
    size_bytes: int | None
    bits: int | None = None
    prefetchable: bool = False
    disabled: bool = False


@dataclass
class LinkState:
    speed_gts: float | None = None
    width: int | None = None
    speed_downgraded: bool = False
    width_downgraded: bool = False


@dataclass
class PciFunction:
    bdf: str
    path: list[str] = field(default_factory=list)  # ancestors from `lspci -PP`, nearest last
    class_name: str = ""
    class_code: str | None = None
    description: str = ""
    device_name: str = ""  # the device part of the description, without the vendor's name
    vendor_id: str | None = None
    device_id: str | None = None
    revision: str | None = None
    subsystem: str | None = None
    bars: list[Bar] = field(default_factory=list)
    link_cap: LinkState | None = None
    link_status: LinkState | None = None
    acs_cap: dict[str, bool] = field(default_factory=dict)
    acs_ctl: dict[str, bool] = field(default_factory=dict)
    driver: str | None = None
    modules: list[str] = field(default_factory=list)
    numa_node: int | None = None
    iommu_group: int | None = None
    secondary_bus: str | None = None
    subordinate_bus: str | None = None
    capabilities_denied: bool = False
    first_line: int = 0  # 1-based line of the title in the file, for evidence
    last_line: int = 0

    @property
    def pci_id(self) -> str | None:
        return f"{self.vendor_id}:{self.device_id}" if self.vendor_id and self.device_id else None

    @property
    def is_bridge(self) -> bool:
        return self.class_code == BRIDGE_CLASS or self.class_name.lower() == "pci bridge"

    @property
    def is_display(self) -> bool:
        if self.class_code:
            return self.class_code in DISPLAY_CLASSES
        name = self.class_name.lower()
        return "vga" in name or "display" in name or "3d controller" in name or "accelerator" in name

    @property
    def largest_prefetchable_bar_bytes(self) -> int | None:
        sizes = [b.size_bytes for b in self.bars if b.kind == "memory" and b.prefetchable and b.size_bytes]
        return max(sizes) if sizes else None

    @property
    def acs_redirects(self) -> list[str]:
        """ACS controls that send peer-to-peer requests or completions to the root complex."""
        return [flag for flag in ("ReqRedir", "CmpltRedir") if self.acs_ctl.get(flag)]


@dataclass
class LspciReport:
    source: str
    functions: list[PciFunction] = field(default_factory=list)
    error: str | None = None

    def by_bdf(self, bdf: str) -> PciFunction | None:
        wanted = normalise_bdf(bdf)
        return next((f for f in self.functions if f.bdf == wanted), None)

    def gpus(self, vendor_id: str | None = None) -> list[PciFunction]:
        return [f for f in self.functions if f.is_display and (vendor_id is None or f.vendor_id == vendor_id)]

    def upstream_of(self, bdf: str) -> list[PciFunction]:
        """Bridges above `bdf`, nearest first: from the -PP path, else from bus numbers."""
        target = self.by_bdf(bdf)
        if target is None:
            return []
        if target.path:
            found = [self.by_bdf(p) for p in reversed(target.path)]
            return [f for f in found if f is not None]
        chain: list[PciFunction] = []
        bus = target.bdf.split(":")[1]
        for _ in range(32):  # a PCI hierarchy is never deeper than this
            parent = next((f for f in self.functions if f.is_bridge and f.secondary_bus == bus), None)
            if parent is None or parent in chain:
                break
            chain.append(parent)
            bus = parent.bdf.split(":")[1]
        return chain


_failed = failure(LspciReport)


_ADDRESS = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_TITLE = re.compile(rf"^((?:{_ADDRESS}/)*)({_ADDRESS})\s+(.+?)(?:\s+\[([0-9a-fA-F]{{4}})\])?:\s+(.*)$")
_IDS = re.compile(r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_REV = re.compile(r"\(rev ([0-9a-fA-F]{2})\)")
_REGION = re.compile(
    r"^(?:Region (\d+): )?(Memory|I/O ports) at (\S+)(?: \(([^)]*)\))?(.*?)(?:\[size=([0-9.]+[KMGT]?)\])?\s*$"
)
_ROM = re.compile(r"^Expansion ROM at (\S+)(.*?)(?:\[size=([0-9.]+[KMGT]?)\])?\s*$")
_SPEED = re.compile(r"Speed ([\d.]+)GT/s(?: \((\w+)\))?")
_WIDTH = re.compile(r"Width x(\d+)(?: \((\w+)\))?")
_FLAG = re.compile(r"(\w+)([+-])")
_BUS = re.compile(r"secondary=([0-9a-fA-F]{2}), subordinate=([0-9a-fA-F]{2})")


def _size_bytes(text: str | None) -> int | None:
    if not text:
        return None
    unit = text[-1] if text[-1] in "KMGT" else ""
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit]
    try:
        return int(float(text.rstrip("KMGT")) * scale)
    except ValueError:
        return None


@never_raises(_failed)
def parse(text: str, source: str = "lspci.txt") -> LspciReport:
    report = LspciReport(source=source)
    current: PciFunction | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if not raw[0].isspace():
            title = _TITLE.match(raw.strip())
            current = _function_from_title(title, number) if title else None
            if current is not None:
                report.functions.append(current)
            continue
        if current is None:
            continue
        current.last_line = number
        _read_detail(current, raw.strip())
    if not report.functions:
        report.error = cannot_read(source, "no PCI function lines ('00:01.0 Class [code]: ...') in it")
    return report


def _function_from_title(title: re.Match[str], number: int) -> PciFunction | None:
    bdf = normalise_bdf(title.group(2))
    if bdf is None:
        return None
    path = [p for p in (normalise_bdf(x) for x in title.group(1).split("/") if x) if p]
    rest = title.group(5)
    function = PciFunction(bdf=bdf, path=path, class_name=title.group(3).strip(), first_line=number)
    function.class_code = title.group(4).lower() if title.group(4) else None
    function.last_line = number
    ids = list(_IDS.finditer(rest))
    if ids:
        function.vendor_id, function.device_id = ids[-1].group(1).lower(), ids[-1].group(2).lower()
    rev = _REV.search(rest)
    function.revision = rev.group(1).lower() if rev else None
    function.description = re.sub(r"\s*\((rev|prog-if) [^)]*\)+", "", rest).strip()
    _names_without_ids(function)
    return function


def _names_without_ids(function: PciFunction) -> None:
    """Vendor id, device id and device name read from the names lspci prints without -nn."""
    text = _IDS.sub("", function.description).strip()
    for name, vendor in VENDOR_NAMES:
        if text.startswith(name):
            function.vendor_id = function.vendor_id or vendor
            text = text[len(name) :].strip()
            break
    function.device_name = " ".join(text.split())
    unnamed = re.fullmatch(r"Device ([0-9a-fA-F]{4})", function.device_name)
    if unnamed and function.vendor_id and not function.device_id:
        function.device_id = unnamed.group(1).lower()


def _read_detail(function: PciFunction, line: str) -> None:
    if line.startswith(("Region ", "Memory at ", "I/O ports at ")):
        region = _REGION.match(line)
        if region:
            flags = (region.group(4) or "").lower()
            bits = 64 if "64-bit" in flags else 32 if "32-bit" in flags else None
            function.bars.append(
                Bar(
                    region=int(region.group(1)) if region.group(1) else None,
                    kind="memory" if region.group(2) == "Memory" else "io",
                    address=region.group(3),
                    size_bytes=_size_bytes(region.group(6)),
                    bits=bits,
                    prefetchable="prefetchable" in flags and "non-prefetchable" not in flags,
                    disabled="[disabled]" in (region.group(5) or ""),
                )
            )
    elif line.startswith("Expansion ROM at "):
        rom = _ROM.match(line)
        if rom:
            function.bars.append(
                Bar(
                    None,
                    "rom",
                    rom.group(1),
                    _size_bytes(rom.group(3)),
                    disabled="[disabled]" in rom.group(2),
                )
            )
    elif line.startswith(("LnkCap:", "LnkSta:")):
        state = LinkState()
        speed, width = _SPEED.search(line), _WIDTH.search(line)
        if speed:
            state.speed_gts = float(speed.group(1))
            state.speed_downgraded = speed.group(2) == "downgraded"
        if width:
            state.width = int(width.group(1))
            state.width_downgraded = width.group(2) == "downgraded"
        if line.startswith("LnkCap:"):
            function.link_cap = state
        else:
            function.link_status = state
    elif line.startswith(("ACSCap:", "ACSCtl:")):
        flags = {
            name: sign == "+" for name, sign in _FLAG.findall(line.split(":", 1)[1]) if name in ACS_FLAGS
        }
        if line.startswith("ACSCap:"):
            function.acs_cap = flags
        else:
            function.acs_ctl = flags
    elif line.startswith("Kernel driver in use:"):
        function.driver = line.split(":", 1)[1].strip() or None
    elif line.startswith("Kernel modules:"):
        function.modules = [m.strip() for m in line.split(":", 1)[1].split(",") if m.strip()]
    elif line.startswith("NUMA node:"):
        function.numa_node = _int(line.split(":", 1)[1])
    elif line.startswith("IOMMU group:"):
        function.iommu_group = _int(line.split(":", 1)[1])
    elif line.startswith("Subsystem:"):
        function.subsystem = line.split(":", 1)[1].strip()
    elif line.startswith("Bus:"):
        bus = _BUS.search(line)
        if bus:
            function.secondary_bus, function.subordinate_bus = bus.group(1).lower(), bus.group(2).lower()
    elif line.startswith("Capabilities: <access denied>"):
        function.capabilities_denied = True


def _int(text: str) -> int | None:
    match = re.search(r"-?\d+", text)
    return int(match.group(0)) if match else None


def parse_file(path: str | Path) -> LspciReport:
    return from_file(parse, _failed, path)
