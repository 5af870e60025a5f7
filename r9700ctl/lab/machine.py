"""The R9700 machine a lab node presents, one story for every reader: sysfs, /dev, the AMD tools.

A lab node has no AMD hardware. It presents one machine whose facts come from public recordings
of real R9700 nodes, and every reader sees the same machine: the agent and the roles read its
sysfs tree (PCI functions, links, BARs, IOMMU groups, DRM and KFD nodes) where the kernel puts
it, the stand-in rocminfo and amd-smi print its cards (recorded blocks, one per card, at this
machine's PCI addresses), and the inventory expects its GPU count.

Layout, as the kernel shows an R9700 (a GPU behind its own on-card PCIe switch), per card i:
root port 0000:BB:01.1 (BB = i x 0x20) -> card upstream port BB+1:00.0 -> card downstream port
BB+2:00.0 -> GPU BB+3:00.0 and its HDMI/DP audio function BB+3:00.1. Cards 0 and 2 of the
recording ROCm/ROCm#5706 sit at 0000:03:00.0 and 0000:43:00.0; rocminfo of ROCm/ROCm#5864 has
its one card at BDFID 8960 = 0000:23:00.0: the same scheme.

`FAULTS` plants one deviation each; `build(gpus, fault)` returns the machine and `write_sysfs`
and `tool_outputs` render it. Facts and their sources:
- GPU 1002:7551 rev c0, class 0x030000, subsystem 1458:242f, BARs 32G + 256M prefetchable
  64-bit, 512K non-prefetchable, I/O 256, ROM 128K: `lspci -vnn` of a Gigabyte R9700
  (clbr/radeontop#184, r9700ctl/data/recorded/r9700-1x-gigabyte/lspci.txt).
- On-card switch 1002:1478 upstream / 1002:1479 downstream ("Navi 10 XL Upstream/Downstream Port
  of PCI Express Switch", which Navi 4x cards carry too: RX 9070 XT in
  geerlingguy/raspberry-pi-pcie-devices#766); audio function 1002:ab40 (docs/hardware.md).
- Root ports 1022:14db "Raphael/Granite Ridge GPP Bridge" (`lspci -nn` of an X870E board,
  jetm/mediatek-mt7927-dkms#63); LnkCap Gen5 x16 at both ends of the card's link (an RX 9070 XT
  upstream port: "LnkCap: Port #0, Speed 32GT/s, Width x16", LACT#593).
- VRAM 30576 MiB as healthy R9700s report it (mem_info_vram_total, ROCm/ROCm#5832); gfx1201
  (KFD gfx_target_version 120001), 64 CUs x 2 SIMDs, chip 0x7551 (rocminfo, ROCm/ROCm#5864).
- amdgpu 6.16.6 (AMD's DKMS module, `amd-smi` header and `dkms status` of ROCm/ROCm#5706).
- The small-BAR fault is the classic 256 MiB window without Resizable BAR; the platform switch
  of the ACS fault is a Broadcom PEX890xx Gen5 switch, 1000:c030 (pci.ids), its downstream ports
  with Linux's ACS default (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd = 0x001d).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

GIB = 2**30
MIB = 2**20
GEN5 = "32.0 GT/s PCIe"
GEN4 = "16.0 GT/s PCIe"
GEN1 = "2.5 GT/s PCIe"

GPU_IDS = {"vendor": "0x1002", "device": "0x7551", "class": "0x030000", "revision": "0xc0"}
AUDIO_IDS = {"vendor": "0x1002", "device": "0xab40", "class": "0x040300", "revision": "0x00"}
SUBSYSTEM = {"subsystem_vendor": "0x1458", "subsystem_device": "0x242f"}
CARD_USP_IDS = {"vendor": "0x1002", "device": "0x1478", "class": "0x060400", "revision": "0x24"}
CARD_DSP_IDS = {"vendor": "0x1002", "device": "0x1479", "class": "0x060400", "revision": "0x24"}
ROOT_PORT_IDS = {"vendor": "0x1022", "device": "0x14db", "class": "0x060400", "revision": "0x00"}
SWITCH_IDS = {"vendor": "0x1000", "device": "0xc030", "class": "0x060400", "revision": "0xb0"}
VRAM_BYTES = 30576 * MIB
BAR0_BYTES = 32 * GIB
SMALL_BAR0_BYTES = 256 * MIB
GFX_TARGET_VERSION = 120001
AMDGPU_VERSION = "6.16.6"
VBIOS = "00158742"  # amd-smi "VBIOS version: 00158742" (ROCm/ROCm#5706)
# Linux's default ACS control on downstream and root ports while an IOMMU is on.
ACS_LINUX_DEFAULT = 0x001D
# /dev nodes are made with majors Linux reserves for local/experimental use (Documentation/
# admin-guide/devices.txt: 120-127): nothing on the host answers them, so opening one fails
# (ENXIO) instead of reaching a real device of the lab host.
DEV_MAJOR = 120
RESOURCE_LINES_ENDPOINT = 13  # 6 BARs, ROM, 6 SR-IOV BARs (PCI_BRIDGE_RESOURCES)
RESOURCE_LINES_BRIDGE = 17  # DEVICE_COUNT_RESOURCE
# Resource flags as /sys/.../resource prints them (include/linux/ioport.h plus alignment bits).
FLAGS_PREFETCH_64 = 0x14220C
FLAGS_MEM_32 = 0x40200
FLAGS_IO = 0x40101
FLAGS_ROM = 0x46200


@dataclass(frozen=True)
class Fault:
    """A planted deviation: what it changes, the one check result that must flag it, and how at
    `--level config` ("noted": PASS with the finding in its hint, as an idle link is judged)."""

    name: str
    what: str
    check: str
    status: str


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("card-missing", "the last card is gone from the PCI bus (and from KFD, DRM, amd-smi)",
              "inventory.count", "FAIL"),
        Fault("link-gen4-x8", "card 0's link trained at Gen4 x8 though card and slot do Gen5 x16",
              "pcie.link", "noted"),
        Fault("small-bar", "every card shows a 256 MiB BAR (Resizable BAR off in the firmware)",
              "platform.bar", "FAIL"),
        Fault("iommu-translated", "the IOMMU translates DMA (group type DMA-FQ: no iommu=pt)",
              "platform.iommu", "WARN"),
        Fault("acs-redirect", "cards 0 and 1 share a PCIe switch whose ports redirect peer traffic (ACS)",
              "platform.acs", "WARN"),
        Fault("gfx942-override", "HSA_OVERRIDE_GFX_VERSION=9.4.2 (gfx942) in /etc/environment",
              "driver.hsa_override", "FAIL"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Port:
    """A PCI bridge the machine has besides the cards' own: a root port or a platform switch port."""

    address: str
    parent: str | None  # None: directly below the host bridge
    ids: dict[str, str]
    link_max: tuple[str, int] = (GEN5, 16)
    acs_control: int | None = ACS_LINUX_DEFAULT
    numa: int = 0


@dataclass(frozen=True)
class Card:
    index: int
    parent: str  # the port the card's upstream port hangs under
    usp: str
    dsp: str
    gpu: str
    audio: str
    numa: int = 0
    link_cur: tuple[str, int] = (GEN5, 16)
    link_max: tuple[str, int] = (GEN5, 16)
    bar0: int = BAR0_BYTES

    @property
    def render_minor(self) -> int:
        return 128 + self.index

    @property
    def gpu_id(self) -> int:
        """KFD's gpu_id: any stable non-zero number per card."""
        return 0x1000 + 0x111 * (self.index + 1)

    @property
    def bus(self) -> int:
        return int(self.gpu[5:7], 16)


@dataclass(frozen=True)
class Machine:
    cards: tuple[Card, ...]
    ports: tuple[Port, ...]
    iommu_type: str = "identity"
    environment: tuple[str, ...] = ()
    fault: str | None = None
    gpus_expected: int = 0  # what the node's owner expects (the inventory's r9700_expected_gpus)

    @property
    def gpu_addresses(self) -> list[str]:
        return [c.gpu for c in self.cards]


def _bdf(bus: int, device: int = 0, function: int = 0) -> str:
    return f"0000:{bus:02x}:{device:02x}.{function}"


def healthy(gpus: int) -> Machine:
    """`gpus` R9700s, each on its own Gen5 x16 root port, large BAR, IOMMU in passthrough."""
    step = 0x20 if gpus <= 8 else 0x10
    cards, ports = [], []
    for i in range(gpus):
        base = i * step
        root = Port(_bdf(base, 1, 1), None, ROOT_PORT_IDS)
        ports.append(root)
        cards.append(
            Card(i, root.address, _bdf(base + 1), _bdf(base + 2), _bdf(base + 3), _bdf(base + 3, 0, 1))
        )
    return Machine(tuple(cards), tuple(ports), gpus_expected=gpus)


def build(gpus: int, fault: str | None = None) -> Machine:
    """The machine of a node with `gpus` cards, with `fault` (a FAULTS name) planted."""
    machine = healthy(gpus)
    if fault is None:
        return machine
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    cards = list(machine.cards)
    if fault == "card-missing":
        return replace(machine, cards=tuple(cards[:-1]), fault=fault)
    if fault == "link-gen4-x8":
        cards[0] = replace(cards[0], link_cur=(GEN4, 8))
        return replace(machine, cards=tuple(cards), fault=fault)
    if fault == "small-bar":
        return replace(machine, cards=tuple(replace(c, bar0=SMALL_BAR0_BYTES) for c in cards), fault=fault)
    if fault == "iommu-translated":
        return replace(machine, iommu_type="DMA-FQ", fault=fault)
    if fault == "gfx942-override":
        return replace(machine, environment=("HSA_OVERRIDE_GFX_VERSION=9.4.2",), fault=fault)
    # acs-redirect: cards 0 and 1 behind one platform switch under the first root port.
    if len(cards) < 2:
        raise ValueError("the acs-redirect fault needs a node with at least 2 GPUs")
    root = machine.ports[0]
    usp, dsp0, dsp1 = _bdf(0x01), _bdf(0x02, 0), _bdf(0x02, 1)
    switch = [
        Port(usp, root.address, SWITCH_IDS, acs_control=None),
        Port(dsp0, usp, SWITCH_IDS),
        Port(dsp1, usp, SWITCH_IDS),
    ]
    moved = [
        replace(card, parent=parent, usp=_bdf(base), dsp=_bdf(base + 1), gpu=_bdf(base + 2),
                audio=_bdf(base + 2, 0, 1), numa=root.numa)
        for parent, card, base in ((dsp0, cards[0], 0x03), (dsp1, cards[1], 0x06))
    ]  # fmt: skip
    ports = [p for p in machine.ports if p.address != cards[1].parent]
    return replace(machine, cards=(*moved, *cards[2:]), ports=(*ports, *switch), fault=fault)


# --- sysfs -------------------------------------------------------------------------------------


@dataclass
class _Tree:
    """Writes a sysfs-shaped tree under `root` (the directory that is mounted as /sys)."""

    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def write(self, relative: str | Path, text: str | bytes, mode: int = 0o444) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            path.write_text(text)
        else:
            path.write_bytes(text)
        path.chmod(mode)
        return path

    def link(self, relative: str | Path, target: Path) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(target, path.parent))

    def function(
        self,
        address: str,
        parent: str | None,
        ids: dict[str, str],
        *,
        numa: int,
        link_cur: tuple[str, int] | None,
        link_max: tuple[str, int] | None,
        resources: list[tuple[int, int, int]],
        config: bytes,
        driver: str | None,
    ) -> Path:
        base = self.root / "devices" / f"pci{address[:7]}" if parent is None else self.paths[parent]
        path = base / address
        path.mkdir(parents=True)
        self.paths[address] = path
        subsystem = SUBSYSTEM if ids in (GPU_IDS, AUDIO_IDS) else {"subsystem_vendor": ids["vendor"],
                                                                    "subsystem_device": "0x0000"}  # fmt: skip
        for name, value in {**ids, **subsystem}.items():
            self.write(path / name, f"{value}\n")
        self.write(path / "numa_node", f"{numa}\n")
        self.write(path / "enable", "1\n", 0o644)
        if link_cur:
            self.write(path / "current_link_speed", f"{link_cur[0]}\n")
            self.write(path / "current_link_width", f"{link_cur[1]}\n")
        if link_max:
            self.write(path / "max_link_speed", f"{link_max[0]}\n")
            self.write(path / "max_link_width", f"{link_max[1]}\n")
        lines = RESOURCE_LINES_BRIDGE if ids["class"] == "0x060400" else RESOURCE_LINES_ENDPOINT
        table = [(0, 0, 0)] * lines
        for index, (start, size, flags) in enumerate(resources):
            table[index] = (start, start + size - 1, flags) if size else (0, 0, 0)
        self.write(path / "resource", "".join(f"0x{a:016x} 0x{b:016x} 0x{c:016x}\n" for a, b, c in table))
        # Only root reads past the first 64 bytes of a real config space; here the file is root-only.
        self.write(path / "config", config, 0o600)
        self.link(Path("bus/pci/devices") / address, path)
        if driver:
            (self.root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
            self.link(path.relative_to(self.root) / "driver", self.root / "bus/pci/drivers" / driver)
        return path


def config_space(acs_control: int | None) -> bytes:
    """4 KiB of config space (root reads it all): AER at 0x100, then ACS at 0x148 when given."""
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | ((0x148 if acs_control is not None else 0) << 20)).to_bytes(
        4, "little"
    )
    if acs_control is not None:
        config[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")
        config[0x14C:0x14E] = (0x005F).to_bytes(2, "little")  # capability: SV RR CR UF EC DT
        config[0x14E:0x150] = acs_control.to_bytes(2, "little")
    return bytes(config)


def write_sysfs(machine: Machine, sys_dir: Path) -> None:
    """The machine's part of /sys under `sys_dir`: devices/pci*, bus/pci, class/{drm,kfd,iommu},
    module/amdgpu, kernel/iommu_groups. The node mounts these over its own /sys (node.py)."""
    tree = _Tree(sys_dir)
    trained = {card.parent: card.link_cur for card in machine.cards}  # both ends of a link agree
    (sys_dir / "bus/pci/devices").mkdir(parents=True, exist_ok=True)
    for name in ("drivers_autoprobe", "drivers_probe", "rescan", "resource_alignment"):
        tree.write(Path("bus/pci") / name, "", 0o200)
    for port in machine.ports:
        tree.function(
            port.address,
            port.parent,
            port.ids,
            numa=port.numa,
            link_cur=trained.get(port.address, port.link_max),
            link_max=port.link_max,
            resources=[],
            config=config_space(port.acs_control),
            driver="pcieport",
        )
    group = 10
    for card in machine.cards:
        bar_base = 0x7000000000 + card.index * 0x1000000000
        tree.function(
            card.usp, card.parent, CARD_USP_IDS, numa=card.numa, link_cur=card.link_cur,
            link_max=card.link_max, resources=[(0xFCE00000 - card.index * 0x100000, 16 * 1024, FLAGS_MEM_32)],
            config=config_space(None), driver="pcieport",
        )  # fmt: skip
        tree.function(
            card.dsp, card.usp, CARD_DSP_IDS, numa=card.numa, link_cur=(GEN5, 16), link_max=(GEN5, 16),
            resources=[], config=config_space(None), driver="pcieport",
        )  # fmt: skip
        mmio = 0xFCD00000 - card.index * 0x100000
        gpu = tree.function(
            card.gpu, card.dsp, GPU_IDS, numa=card.numa, link_cur=(GEN5, 16), link_max=(GEN5, 16),
            resources=[
                (bar_base, card.bar0, FLAGS_PREFETCH_64), (0, 0, 0),
                (bar_base + 0x800000000, 256 * MIB if card.bar0 >= GIB else 2 * MIB, FLAGS_PREFETCH_64),
                (0, 0, 0), (0xE000 - card.index * 0x1000, 256, FLAGS_IO), (mmio, 512 * 1024, FLAGS_MEM_32),
                (mmio + 0x80000, 128 * 1024, FLAGS_ROM),
            ],
            config=bytes(256), driver="amdgpu",
        )  # fmt: skip
        tree.function(
            card.audio, card.dsp, AUDIO_IDS, numa=card.numa, link_cur=(GEN5, 16), link_max=(GEN5, 16),
            resources=[(mmio + 0xA0000, 16 * 1024, FLAGS_MEM_32)], config=bytes(256), driver="snd_hda_intel",
        )  # fmt: skip
        tree.write(gpu / "mem_info_vram_total", f"{VRAM_BYTES}\n")
        tree.write(gpu / "vbios_version", f"{VBIOS}\n")
        tree.write(gpu / "boot_vga", "0\n")
        for name in (f"card{card.index}", f"renderD{card.render_minor}"):
            minor = card.index if name.startswith("card") else card.render_minor
            drm = gpu / "drm" / name
            tree.write(drm / "dev", f"{DEV_MAJOR}:{minor}\n")
            tree.link(Path("class/drm") / name, drm)
        for function in (card.gpu, card.audio):
            group_dir = sys_dir / "kernel/iommu_groups" / str(group)
            tree.write(group_dir / "type", f"{machine.iommu_type}\n", 0o644)
            tree.link(tree.paths[function].relative_to(sys_dir) / "iommu_group", group_dir)
            tree.link(Path("kernel/iommu_groups") / str(group) / "devices" / function, tree.paths[function])
            group += 1
    tree.write("class/iommu/ivhd0/amd-iommu/cap", "0x00000000001f0000\n")
    tree.write("module/amdgpu/version", f"{AMDGPU_VERSION}\n")
    tree.write("module/amdgpu/initstate", "live\n")
    _write_kfd(tree, machine)


def _write_kfd(tree: _Tree, machine: Machine) -> None:
    """/sys/class/kfd/kfd/topology: node 0 the CPU, then one node per card (what rocminfo lists)."""
    base = Path("class/kfd/kfd")
    tree.write(base / "dev", f"{DEV_MAJOR}:255\n")
    nodes = base / "topology/nodes"
    tree.write(nodes / "0/properties", "cpu_cores_count 48\nsimd_count 0\ngfx_target_version 0\n"
               "location_id 0\ndomain 0\ndrm_render_minor 0\n")  # fmt: skip
    tree.write(nodes / "0/gpu_id", "0\n")
    for card in machine.cards:
        location = card.bus << 8  # devfn 0
        directory = nodes / str(card.index + 1)
        tree.write(
            directory / "properties",
            f"cpu_cores_count 0\nsimd_count 128\ngfx_target_version {GFX_TARGET_VERSION}\n"
            f"vendor_id 4098\ndevice_id 30033\nlocation_id {location}\ndomain 0\n"
            f"drm_render_minor {card.render_minor}\nnum_xcc 1\n",
        )
        tree.write(directory / "gpu_id", f"{card.gpu_id}\n")
        tree.write(directory / "name", "gfx1201\n")
    tree.write(base / "topology/generation_id", "1\n")
    tree.write(base / "topology/system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0\n")


def dev_nodes(machine: Machine) -> list[tuple[str, int, int]]:
    """(path under /dev, major, minor) the node's init makes: /dev/kfd and each card's DRM nodes."""
    nodes = [("kfd", DEV_MAJOR, 255)]
    for card in machine.cards:
        nodes += [(f"dri/card{card.index}", DEV_MAJOR, card.index), (f"dri/renderD{card.render_minor}",
                  DEV_MAJOR, card.render_minor)]  # fmt: skip
    return nodes


# --- the AMD tools' outputs --------------------------------------------------------------------

ROCMINFO_RECORDING = "r9700-1x/rocminfo.txt"
AMD_SMI_RECORDING = "r9700-2x/amd-smi.txt"
_AGENT_HEADER = re.compile(r"^\*{7}\s*\n^Agent \d+\s*\n^\*{7}\s*\n", re.MULTILINE)


def _recording(recorded: Path, name: str) -> tuple[str, str]:
    """(source line, output) of a recorded file."""
    text = (recorded / name).read_text()
    first, _, rest = text.partition("\n")
    return first.removeprefix("# source: ").strip(), rest


def rocminfo(machine: Machine, recorded: Path) -> tuple[str, str]:
    """The recorded one-card `rocminfo --support`, its GPU agent once per card of this machine."""
    source, text = _recording(recorded, ROCMINFO_RECORDING)
    starts = [m.start() for m in _AGENT_HEADER.finditer(text)]
    done = text.index("*** Done ***")
    head, cpu, gpu = text[: starts[0]], text[starts[0] : starts[1]], text[starts[1] : done]
    blocks = []
    for position, card in enumerate(machine.cards):
        block = re.sub(r"^Agent \d+", f"Agent {position + 2}", gpu, count=1, flags=re.MULTILINE)
        uuid = re.search(r"\n  Uuid:\s+GPU-([0-9a-f]{16})", block)
        block = _set_field(block, "Node", str(card.index + 1))
        block = _set_field(block, "BDFID", str(card.bus << 8))
        if uuid:
            block = _set_field(block, "Uuid", f"GPU-{uuid.group(1)[:-2]}{card.index:02x}")
        blocks.append(block)
    return source, head + cpu + "".join(blocks) + text[done:]


def _set_field(block: str, label: str, value: str) -> str:
    """The first `  Label:   value` line of a rocminfo block with another value, padding kept."""
    match = re.search(rf"\n  {label}:(\s+)(\S+)", block)
    if match is None:
        return block
    start, end = match.span(2)
    old = match.group(2)
    return (
        block[:start] + value + block[end:]
        if len(value) >= len(old)
        else (block[:start] + value.ljust(len(old)) + block[end:])
    )


def amd_smi(machine: Machine, recorded: Path) -> tuple[str, str]:
    """The recorded plain `amd-smi` table: its header, then the recorded card row per card."""
    source, text = _recording(recorded, AMD_SMI_RECORDING)
    lines = text.splitlines()
    first_row = next(i for i, line in enumerate(lines) if re.match(r"^\| 0000:", line))
    header = lines[:first_row]
    row = lines[first_row : first_row + 2]
    separator = lines[first_row + 2]
    rows: list[str] = []
    for position, card in enumerate(machine.cards):
        top = row[0].replace(row[0][2:14], card.gpu, 1)
        bottom = re.sub(r"^\|   0       0", f"|   {position:<7d} {position}", row[1])
        rows += [top, bottom, separator]
    if rows:
        rows[-1] = "+" + separator[1:-1].replace("|", "+") + "+"
    return source, "\n".join(header + rows) + "\n"


def tool_outputs(machine: Machine, recorded: Path) -> dict[str, bytes]:
    """File name (recordings.TOOL_OUTPUTS) -> what the stand-in prints on this node, plus SOURCES."""
    outputs: dict[str, bytes] = {}
    sources = []
    for name, render in (("rocminfo.txt", rocminfo), ("amd-smi.txt", amd_smi)):
        source, text = render(machine, recorded)
        outputs[name] = text.encode()
        sources.append(f"{name}: {source}; its GPU block repeated for each of this machine's cards")
    outputs["SOURCES"] = ("\n".join(sources) + "\n").encode()
    return outputs


def summary(machine: Machine) -> dict[str, object]:
    """What the lab records about the node's machine (node.json of the lab, docs)."""
    return {
        "gpus": len(machine.cards),
        "gpu_addresses": machine.gpu_addresses,
        "fault": machine.fault,
        "check": FAULTS[machine.fault].check if machine.fault else None,
    }


def summary_json(machine: Machine) -> str:
    return json.dumps(summary(machine), indent=2) + "\n"
