"""Readers of /sys for GPUs and their PCIe path. Every reader takes the file-system root.

Tests build fake trees in tmp_path with the same layout (including the symlinks of
/sys/bus/pci/devices into /sys/devices/pciDDDD:BB/..., which give the bridge chain). Readers
never raise for a missing or unreadable attribute: they return None and let checks say SKIP.

Radeon cards sit behind an on-card PCIe switch (upstream + downstream port of AMD's own
vendor id); the GPU function's own link is the internal one. `read_link` therefore walks up
through bridges of the GPU's vendor and reads the card's upstream port: the link to the slot.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

AMD = "1002"
NVIDIA = "10de"
GPU_VENDORS = (AMD, NVIDIA)
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

# PCI class codes (class << 8 | subclass): display controllers and PCI-to-PCI bridges.
DISPLAY_CLASSES = {0x0300, 0x0302, 0x0380}
BRIDGE_CLASS = 0x0604

# The ids of a display device as node records and preflight's facts carry them.
DISPLAY_FIELDS = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision")
# Who makes the display devices a GPU server may carry (pci.ids: https://pci-ids.ucw.cz/read/PC/);
# BMC graphics count too.
VENDOR_NAMES = {
    "0x1002": "AMD",
    "0x10de": "NVIDIA",
    "0x8086": "Intel",
    "0x1a03": "ASPEED",
    "0x102b": "Matrox",
}

# Resource flags of /sys/bus/pci/devices/*/resource (include/linux/ioport.h).
IORESOURCE_MEM = 0x00000200
IORESOURCE_PREFETCH = 0x00002000
IORESOURCE_MEM_64 = 0x00100000

# PCIe extended capability of Access Control Services, and its control bits (PCIe base spec 7.7.8).
ACS_EXT_CAP_ID = 0x000D
ACS_BITS = {
    "SrcValid": 0x01,
    "TransBlk": 0x02,
    "ReqRedir": 0x04,
    "CmpltRedir": 0x08,
    "UpstreamFwd": 0x10,
    "EgressCtrl": 0x20,
    "DirectTrans": 0x40,
}


def pci_root(root: Path) -> Path:
    return root / "sys/bus/pci/devices"


def read_text(path: Path) -> str | None:
    """Stripped contents of a sysfs attribute, None if absent or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path, base: int = 0) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0], base)
    except (ValueError, IndexError):
        return None


def parse_speed_gts(text: str | None) -> float | None:
    """'32.0 GT/s PCIe' -> 32.0; 'Unknown' or garbage -> None."""
    if not text:
        return None
    match = re.match(r"\s*([0-9.]+)\s*GT/s", text)
    return float(match.group(1)) if match else None


def parse_width(text: str | None) -> int | None:
    if not text:
        return None
    match = re.match(r"\s*x?(\d+)", text)
    width = int(match.group(1)) if match else 0
    return width or None


GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_gen(speed_gts: float | None) -> int | None:
    return GEN_BY_SPEED.get(speed_gts) if speed_gts is not None else None


@dataclass
class Link:
    """A PCIe link state; `at` is the PCI address it was read at (the card's upstream port),
    `endpoint_*` the GPU function's own link, `slot_*` the port above the card (root or switch port)."""

    cur_speed_gts: float | None = None
    cur_width: int | None = None
    max_speed_gts: float | None = None
    max_width: int | None = None
    at: str = ""
    endpoint_cur_speed_gts: float | None = None
    endpoint_cur_width: int | None = None
    slot_port: str = ""
    slot_max_speed_gts: float | None = None
    slot_max_width: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, current: bool = True) -> str:
        speed = self.cur_speed_gts if current else self.max_speed_gts
        width = self.cur_width if current else self.max_width
        gen = pcie_gen(speed)
        gen_text = f"Gen{gen}" if gen else (f"{speed:g} GT/s" if speed else "?")
        return f"{gen_text} x{width if width else '?'}"


@dataclass
class PciDevice:
    address: str
    vendor: str = ""
    device: str = ""
    class_code: int = 0
    numa_node: int | None = None
    driver: str = ""
    chain: list[str] = field(default_factory=list)  # bridges from the root port down to the parent

    @property
    def pci_id(self) -> str:
        return f"{self.vendor}:{self.device}"


def _hex_id(text: str | None) -> str:
    return text.lower().removeprefix("0x")[-4:] if text else ""


def device_dir(root: Path, address: str) -> Path:
    return pci_root(root) / address


def bridge_chain(root: Path, address: str) -> list[str]:
    """PCI addresses of the bridges above `address`, top (root port) first.

    Read from the resolved /sys/devices path, whose directory names are the hierarchy.
    """
    link = device_dir(root, address)
    try:
        target = Path(os.path.realpath(link))
    except OSError:
        return []
    names = [part for part in target.parts if _BDF.match(part)]
    if not names or names[-1] != address:
        return []
    return names[:-1]


def read_device(root: Path, address: str) -> PciDevice:
    base = device_dir(root, address)
    numa = read_int(base / "numa_node", 10)
    try:
        driver = os.path.basename(os.readlink(base / "driver"))
    except OSError:
        driver = ""
    class_value = read_int(base / "class", 16) or 0
    return PciDevice(
        address=address,
        vendor=_hex_id(read_text(base / "vendor")),
        device=_hex_id(read_text(base / "device")),
        class_code=class_value >> 8,
        numa_node=numa if numa is not None and numa >= 0 else None,
        driver=driver,
        chain=bridge_chain(root, address),
    )


def list_addresses(root: Path) -> list[str]:
    try:
        return sorted(p.name for p in pci_root(root).iterdir() if _BDF.match(p.name))
    except OSError:
        return []


def display_devices(root: Path) -> list[dict[str, Any]]:
    """Every display-class (0x03xxxx: VGA, 3D, display controller) PCI function, whoever made it,
    by address: ids as sysfs writes them (lower-case 0x... text), its driver, whether it is the
    boot VGA device, and its maker's name. Preflight's facts and the node record both read this."""
    devices = []
    for address in list_addresses(root):
        base = device_dir(root, address)
        ids = {name: (read_text(base / name) or "").lower() for name in DISPLAY_FIELDS}
        if not ids["class"].startswith("0x03"):
            continue
        try:
            driver = os.path.basename(os.readlink(base / "driver"))
        except OSError:
            driver = ""
        devices.append(
            {
                "address": address,
                **ids,
                "driver": driver,
                "boot_vga": read_text(base / "boot_vga") == "1",
                "vendor_name": VENDOR_NAMES.get(ids["vendor"], "unknown"),
            }
        )
    return devices


def gpu_devices(root: Path) -> list[PciDevice]:
    """Display-class PCI functions of AMD or NVIDIA, by address."""
    found = []
    for address in list_addresses(root):
        dev = read_device(root, address)
        if dev.vendor in GPU_VENDORS and dev.class_code in DISPLAY_CLASSES:
            found.append(dev)
    return found


def _raw_link(root: Path, address: str) -> tuple[float | None, int | None, float | None, int | None]:
    base = device_dir(root, address)
    return (
        parse_speed_gts(read_text(base / "current_link_speed")),
        parse_width(read_text(base / "current_link_width")),
        parse_speed_gts(read_text(base / "max_link_speed")),
        parse_width(read_text(base / "max_link_width")),
    )


def card_upstream_port(root: Path, address: str) -> str:
    """The highest bridge above `address` that belongs to the card itself (same vendor), else `address`."""
    vendor = _hex_id(read_text(device_dir(root, address) / "vendor"))
    top = address
    for bridge in reversed(bridge_chain(root, address)):
        bridge_vendor = _hex_id(read_text(device_dir(root, bridge) / "vendor"))
        bridge_class = (read_int(device_dir(root, bridge) / "class", 16) or 0) >> 8
        if bridge_vendor != vendor or bridge_class != BRIDGE_CLASS:
            break
        top = bridge
    return top


def read_link(root: Path, pci_address: str) -> Link:
    """The card's link to its slot, now (call it again under load: idle links downtrain)."""
    at = card_upstream_port(root, pci_address)
    cur_speed, cur_width, max_speed, max_width = _raw_link(root, at)
    ep_speed, ep_width, _, _ = _raw_link(root, pci_address)
    chain = bridge_chain(root, at)
    slot_port = chain[-1] if chain else ""
    slot_speed = slot_width = None
    if slot_port:
        _, _, slot_speed, slot_width = _raw_link(root, slot_port)
    return Link(
        cur_speed, cur_width, max_speed, max_width, at, ep_speed, ep_width, slot_port, slot_speed, slot_width
    )


@dataclass
class Bar:
    index: int
    size: int
    prefetchable: bool
    is_64bit: bool


def read_bars(root: Path, address: str) -> list[Bar]:
    """Memory BARs from the `resource` file (start end flags per line; BARs are lines 0-5)."""
    text = read_text(device_dir(root, address) / "resource")
    bars = []
    for index, line in enumerate((text or "").splitlines()[:6]):
        try:
            start, end, flags = (int(x, 16) for x in line.split()[:3])
        except ValueError:
            continue
        if not flags & IORESOURCE_MEM or end <= start:
            continue
        bars.append(
            Bar(index, end - start + 1, bool(flags & IORESOURCE_PREFETCH), bool(flags & IORESOURCE_MEM_64))
        )
    return bars


def largest_prefetchable_bar(root: Path, address: str) -> int | None:
    sizes = [b.size for b in read_bars(root, address) if b.prefetchable]
    return max(sizes) if sizes else None


@dataclass(frozen=True)
class AcsRead:
    """A port's ACS capability and control words as read from its config space; `error` says why
    they could not be read (a non-root read of `config` returns only its first 64 bytes)."""

    capability: int | None = None  # None: no ACS capability (or not read)
    control: int | None = None
    error: str = ""


def acs_from_config(config: bytes) -> AcsRead:
    """The ACS words of a config-space dump; the extended space (past 0x100) needs root."""
    if len(config) <= 0x100:
        return AcsRead(error=f"extended configuration space unreadable ({len(config)} bytes; needs root)")
    words = acs_words(config)
    return AcsRead() if words is None else AcsRead(capability=words[0], control=words[1])


def read_acs(root: Path, address: str) -> AcsRead:
    """The ACS words of a bridge, read from its `config`."""
    try:
        config = (device_dir(root, address) / "config").read_bytes()
    except OSError as exc:
        return AcsRead(error=f"config space unreadable ({exc.strerror})")
    return acs_from_config(config)


def acs_control(root: Path, address: str) -> dict[str, bool] | None:
    """ACS control flags of a bridge from its config space; None when unreadable (non-root) or absent.

    "Unreadable" and "no ACS" are told apart: unreadable -> None, no ACS capability -> {}.
    """
    read = read_acs(root, address)
    if read.error:
        return None
    if read.control is None:
        return {}
    return {name: bool(read.control & bit) for name, bit in ACS_BITS.items()}


def acs_words(config: bytes) -> tuple[int, int] | None:
    """(capability, control) of the ACS extended capability in a config-space dump, None without
    one: the chain of extended capabilities from 0x100 (PCIe base spec 7.6.3), each header's next
    pointer in its top 12 bits."""
    offset, seen = 0x100, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_EXT_CAP_ID:
            capability = int.from_bytes(config[offset + 4 : offset + 6], "little")
            return capability, int.from_bytes(config[offset + 6 : offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return None


# amdgpu attributes of the GPU function.


def vram_total_bytes(root: Path, address: str) -> int | None:
    return read_int(device_dir(root, address) / "mem_info_vram_total", 10)


def vbios_version(root: Path, address: str) -> str | None:
    return read_text(device_dir(root, address) / "vbios_version")


def render_node(root: Path, address: str) -> str | None:
    """'/dev/dri/renderD128' for the GPU, from its drm directory."""
    try:
        names = sorted(p.name for p in (device_dir(root, address) / "drm").iterdir())
    except OSError:
        return None
    render = [n for n in names if n.startswith("renderD")]
    return f"/dev/dri/{render[0]}" if render else None


def current_dpm_mhz(root: Path, address: str, name: str) -> int | None:
    """The active level of pp_dpm_sclk / pp_dpm_mclk ("1: 2350Mhz *")."""
    for line in (read_text(device_dir(root, address) / name) or "").splitlines():
        if line.rstrip().endswith("*"):
            match = re.search(r"(\d+)\s*[Mm][Hh]z", line)
            if match:
                return int(match.group(1))
    return None


def hwmon(root: Path, address: str) -> dict[str, Any]:
    """Power now and cap (W) and temperatures (C) from the GPU's hwmon directory."""
    out: dict[str, Any] = {}
    try:
        dirs = sorted((device_dir(root, address) / "hwmon").iterdir())
    except OSError:
        return out
    for directory in dirs:
        # Board power now, in microwatts: power1_average on older amdgpu, power1_input where
        # the driver reports an instantaneous value instead (as kernels/sampler.py reads it).
        power = read_int(directory / "power1_average", 10)
        power = read_int(directory / "power1_input", 10) if power is None else power
        if power is not None:
            out["power_w"] = power / 1e6
        cap = read_int(directory / "power1_cap", 10)
        if cap is not None:
            out["power_cap_w"] = cap / 1e6
        cap_default = read_int(directory / "power1_cap_default", 10)
        if cap_default is not None:
            out["power_cap_default_w"] = cap_default / 1e6
        temps = {}
        for index in range(1, 10):
            value = read_int(directory / f"temp{index}_input", 10)
            if value is None:
                continue
            label = read_text(directory / f"temp{index}_label") or f"temp{index}"
            temps[label] = value / 1000.0
        if temps:
            out["temps_c"] = temps
    return out


# KFD topology: the ROCm runtime's view of GPUs (gfx target, render node) by PCI location.


def kfd_nodes(root: Path) -> dict[str, dict[str, int]]:
    """KFD GPU nodes by PCI address: gfx_target_version, drm_render_minor, simd_count, ..."""
    nodes: dict[str, dict[str, int]] = {}
    base = root / "sys/class/kfd/kfd/topology/nodes"
    try:
        entries = sorted(base.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0)
    except OSError:
        return nodes
    for entry in entries:
        props: dict[str, int] = {}
        for line in (read_text(entry / "properties") or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                props[parts[0]] = int(parts[1])
        if not props.get("gfx_target_version") or "location_id" not in props:
            continue  # CPU nodes have gfx_target_version 0
        location = props["location_id"]
        bus, devfn = location >> 8, location & 0xFF
        address = f"{props.get('domain', 0):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"
        props["node_id"] = int(entry.name) if entry.name.isdigit() else -1
        gpu_id = read_int(entry / "gpu_id", 10)
        if gpu_id is not None:
            props["gpu_id"] = gpu_id  # names the GPU in /sys/class/kfd/kfd/proc/<pid>/*_<gpu_id>
        nodes[address] = props
    return nodes


def iommu_group(root: Path, address: str) -> str | None:
    """The number of the device's IOMMU group; None without one (no IOMMU, or the IOMMU off)."""
    try:
        return Path(os.readlink(device_dir(root, address) / "iommu_group")).name
    except OSError:
        return None


def iommu_group_type(root: Path, address: str) -> str | None:
    """The IOMMU domain type of the device's group: "identity" = passthrough, "DMA"/"DMA-FQ" = translated."""
    return read_text(device_dir(root, address) / "iommu_group" / "type")


def iommu_units(root: Path) -> list[str]:
    """Hardware IOMMUs the kernel registered (empty: IOMMU off or absent)."""
    try:
        return sorted(p.name for p in (root / "sys/class/iommu").iterdir())
    except OSError:
        return []
