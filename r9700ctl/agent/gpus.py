"""Discovery: which GPUs this node has, and what each one is, from every source at hand.

Sources, merged per PCI address (each GpuInfo lists the ones that contributed in `sources`):
- sysfs: display-class PCI functions of AMD/NVIDIA, link state, BARs, NUMA node, amdgpu's
  mem_info_vram_total / vbios_version / hwmon / pp_dpm_*, and the KFD topology (gfx target);
- amd-smi static --json on AMD, nvidia-smi -q -x on NVIDIA (through r9700ctl.agent.parsers);
- torch, probed in a child process (`probe_torch`): the device index the kernels use, the
  name, memory and architecture, and the PCI address that ties an index to a card.
Integrated GPUs (manifest `discrete: false`) are listed apart and never counted.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import sysfs
from r9700ctl.agent.datafiles import gfx_name, gpu_models
from r9700ctl.agent.tools import run_tool


@dataclass
class GpuInfo:
    """One GPU as the agent knows it; None/"" where no source said."""

    index: int
    pci_address: str = ""
    vendor: str = ""
    device_id: str = ""
    name: str = ""
    model: str = ""
    gfx_target: str | None = None
    compute_capability: str | None = None
    vram_bytes: int | None = None
    numa_node: int | None = None
    link: sysfs.Link = field(default_factory=sysfs.Link)
    bar0_bytes: int | None = None
    driver: str = ""
    driver_version: str | None = None
    vbios: str | None = None
    # The card's serial (amd-smi's asic_serial, nvidia-smi's serial): the controller's history
    # follows a card by it when it moves to another slot. None where no tool reported one.
    serial: str | None = None
    power_w: float | None = None  # board power when discovery ran (hwmon), for monitoring
    power_cap_w: float | None = None
    power_cap_default_w: float | None = None
    clocks_mhz: dict[str, float] = field(default_factory=dict)
    temps_c: dict[str, float] = field(default_factory=dict)
    render_node: str | None = None
    iommu_group_type: str | None = None
    discrete: bool = True
    sources: list[str] = field(default_factory=list)

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"

    @property
    def pci_id(self) -> str:
        return f"{self.vendor}:{self.device_id}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Discovery:
    """Everything discovery found: GPUs by torch index, the integrated ones set apart, notes.

    `on_bus` is every discrete GPU on the PCI bus (the inventory count); `gpus` those the run can
    use, by torch index (all of `on_bus` when torch is not there to say otherwise).
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    on_bus: list[GpuInfo] = field(default_factory=list)
    ignored: list[GpuInfo] = field(default_factory=list)
    torch: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)

    @property
    def torch_devices(self) -> int:
        return int(self.torch.get("device_count") or 0)


def probe_torch() -> dict[str, Any]:
    """Runs in a child: torch's view of the GPUs (import torch here only). JSON-serialisable."""
    try:
        import torch
    except Exception as exc:
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = {
        "importable": True,
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "available": False,
        "device_count": 0,
        "devices": [],
    }
    try:
        out["available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count()) if out["available"] else 0
        out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else []
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    try:
        version = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:
        out["nccl"] = None
    for index in range(out["device_count"]):
        props = torch.cuda.get_device_properties(index)
        device: dict[str, Any] = {
            "index": index,
            "name": props.name,
            "total_memory": int(props.total_memory),
            "major": int(props.major),
            "minor": int(props.minor),
            "multi_processor_count": int(props.multi_processor_count),
            "gcn_arch": getattr(props, "gcnArchName", None),
        }
        if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            device["pci"] = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        out["devices"].append(device)
    return out


def _parser(name: str) -> Any:
    """A parser module of r9700ctl.agent.parsers, or None while it does not exist."""
    try:
        return importlib.import_module(f"r9700ctl.agent.parsers.{name}")
    except ImportError:
        return None


def _from_sysfs(root: Path, dev: sysfs.PciDevice, kfd: dict[str, dict[str, int]], models: dict) -> GpuInfo:
    model = models.get(dev.pci_id, {})
    gpu = GpuInfo(
        index=-1,
        pci_address=dev.address,
        vendor=dev.vendor,
        device_id=dev.device,
        name=str(model.get("name", "")),
        model=str(model.get("name", "")),
        gfx_target=model.get("gfx"),
        numa_node=dev.numa_node,
        link=sysfs.read_link(root, dev.address),
        bar0_bytes=sysfs.largest_prefetchable_bar(root, dev.address),
        driver=dev.driver,
        vbios=sysfs.vbios_version(root, dev.address),
        vram_bytes=sysfs.vram_total_bytes(root, dev.address),
        render_node=sysfs.render_node(root, dev.address),
        iommu_group_type=sysfs.iommu_group_type(root, dev.address),
        discrete=bool(model.get("discrete", True)),
        sources=["sysfs"],
    )
    props = kfd.get(dev.address)
    if props:
        gpu.gfx_target = gfx_name(props["gfx_target_version"])
        gpu.sources.append("kfd")
        minor = props.get("drm_render_minor")
        if minor and not gpu.render_node:
            gpu.render_node = f"/dev/dri/renderD{minor}"
    mon = sysfs.hwmon(root, dev.address)
    gpu.power_w = mon.get("power_w")
    gpu.power_cap_w = mon.get("power_cap_w")
    gpu.power_cap_default_w = mon.get("power_cap_default_w")
    gpu.temps_c = mon.get("temps_c", {})
    for name, key in (("pp_dpm_sclk", "sclk"), ("pp_dpm_mclk", "mclk")):
        mhz = sysfs.current_dpm_mhz(root, dev.address, name)
        if mhz is not None:
            gpu.clocks_mhz[key] = float(mhz)
    module = "amdgpu" if dev.vendor == sysfs.AMD else "nvidia"
    gpu.driver_version = sysfs.read_text(root / "sys/module" / module / "version")
    return gpu


def _merge_amd_smi(gpus: dict[str, GpuInfo], discovery: Discovery, timeout_s: float) -> None:
    parser = _parser("amdsmi")
    out = run_tool(["amd-smi", "static", "--json"], timeout_s)
    if not out.ok or parser is None:
        discovery.tools["amd-smi"] = out.why_not() or "parser missing"
        return
    report = parser.parse(out.stdout, "amd-smi static --json")
    if report.error:
        discovery.tools["amd-smi"] = report.error
        return
    discovery.tools["amd-smi"] = "ok"
    for entry in report.gpus:
        gpu = gpus.get((entry.bdf or "").lower())
        if gpu is None:
            continue
        gpu.sources.append("amd-smi")
        gpu.name = gpu.name or (entry.name or "")
        gpu.gfx_target = gpu.gfx_target or entry.gfx_target
        gpu.vbios = gpu.vbios or entry.vbios_version
        gpu.serial = gpu.serial or entry.serial
        gpu.driver_version = gpu.driver_version or entry.driver_version
        if gpu.power_cap_w is None:
            gpu.power_cap_w = entry.power_cap_w
        if gpu.numa_node is None:
            gpu.numa_node = entry.numa_node
        if gpu.vram_bytes is None and entry.vram_total_mib:
            gpu.vram_bytes = int(entry.vram_total_mib * 2**20)


def _merge_nvidia_smi(gpus: dict[str, GpuInfo], discovery: Discovery, timeout_s: float) -> None:
    parser = _parser("nvidia_smi")
    out = run_tool(["nvidia-smi", "-q", "-x"], timeout_s)
    if not out.ok or parser is None or not hasattr(parser, "parse"):
        discovery.tools["nvidia-smi"] = out.why_not() or "parser missing"
        return
    report = parser.parse(out.stdout, "nvidia-smi -q -x")
    if getattr(report, "error", None):
        discovery.tools["nvidia-smi"] = report.error
        return
    discovery.tools["nvidia-smi"] = "ok"
    driver_version = getattr(report, "driver_version", None)
    for entry in getattr(report, "gpus", []):
        gpu = gpus.get(_short_bdf(getattr(entry, "bdf", None) or getattr(entry, "bus_id", None) or ""))
        if gpu is None:
            continue
        gpu.sources.append("nvidia-smi")
        gpu.name = gpu.name or (getattr(entry, "name", None) or "")
        gpu.vbios = gpu.vbios or getattr(entry, "vbios_version", None)
        gpu.serial = gpu.serial or getattr(entry, "serial", None)
        gpu.driver_version = gpu.driver_version or driver_version
        for field_name in ("power_cap_w", "power_cap_default_w"):  # the parsers' names are GpuInfo's
            value = getattr(entry, field_name, None)
            if value is not None and getattr(gpu, field_name) is None:
                setattr(gpu, field_name, value)


def _short_bdf(bdf: str) -> str:
    """'00000000:17:00.0' (nvidia-smi) -> '0000:17:00.0' (sysfs)."""
    bdf = bdf.strip().lower()
    if bdf.count(":") == 2:
        domain, rest = bdf.split(":", 1)
        return f"{int(domain, 16):04x}:{rest}" if domain else rest
    return f"0000:{bdf}" if bdf else ""


def _assign_indices(
    found: list[GpuInfo], probe: dict[str, Any], discovery: Discovery, ignored: list[GpuInfo]
) -> list[GpuInfo]:
    """Give each GPU the torch device index; keep only what torch sees when torch is usable."""
    devices = probe.get("devices") or []
    ignored_addresses = {g.pci_address for g in ignored}
    if not devices:
        for position, gpu in enumerate(found):
            gpu.index = position
        if found and probe.get("importable"):
            discovery.notes.append("torch sees no GPU; indices follow PCI address order")
        return found
    by_address = {gpu.pci_address: gpu for gpu in found}
    ordered: list[GpuInfo] = []
    mapped = all(d.get("pci") in by_address or d.get("pci") in ignored_addresses for d in devices)
    if not found:
        discovery.notes.append(
            "no GPU in the PCI tree under /sys (container or sandbox): GPUs as torch sees them"
        )
    elif not mapped:
        discovery.notes.append("torch gave no PCI addresses; torch indices assumed in PCI address order")
    for device in devices:
        if mapped and device.get("pci") in ignored_addresses:
            discovery.notes.append(f"torch device {device['index']} is the integrated GPU {device['pci']}")
            continue
        gpu = by_address.get(device.get("pci", "")) if mapped else None
        if gpu is None and not mapped and device["index"] < len(found):
            gpu = found[device["index"]]
        if gpu is None:  # torch sees a GPU sysfs does not show (e.g. a container without /sys)
            gpu = GpuInfo(index=device["index"], pci_address=device.get("pci", ""))
        gpu.index = int(device["index"])
        gpu.sources.append("torch")
        gpu.name = gpu.name or device.get("name", "")
        # torch fills gcnArchName on CUDA builds too (with the device name): trust it on ROCm only.
        if probe.get("hip") and device.get("gcn_arch"):
            gpu.gfx_target = gpu.gfx_target or str(device["gcn_arch"]).split(":")[0]
        elif probe.get("cuda"):
            gpu.compute_capability = f"{device.get('major')}.{device.get('minor')}"
        if gpu.vram_bytes is None:
            gpu.vram_bytes = device.get("total_memory")
        ordered.append(gpu)
    hidden = [g.pci_address for g in found if g not in ordered]
    if hidden:
        discovery.notes.append(f"torch does not see {', '.join(hidden)} (CUDA/HIP_VISIBLE_DEVICES or driver)")
    return ordered


def discover(
    root: Path,
    torch_probe: dict[str, Any] | None = None,
    *,
    use_tools: bool = True,
    tool_timeout_s: float = 20.0,
) -> Discovery:
    """Find the node's GPUs: sysfs first, then torch's indices, then the vendor tool."""
    discovery = Discovery(torch=dict(torch_probe or {}))
    models = gpu_models()
    kfd = sysfs.kfd_nodes(root)
    by_address: dict[str, GpuInfo] = {}
    for dev in sysfs.gpu_devices(root):
        gpu = _from_sysfs(root, dev, kfd, models)
        by_address[dev.address] = gpu
    discrete = [g for g in by_address.values() if g.discrete]
    discovery.ignored = [g for g in by_address.values() if not g.discrete]
    for gpu in discovery.ignored:
        discovery.notes.append(
            f"{gpu.pci_address} ({gpu.name or gpu.pci_id}) is an integrated GPU: not counted"
        )
    discovery.on_bus = list(discrete)
    discovery.gpus = _assign_indices(discrete, discovery.torch, discovery, discovery.ignored)
    build_vendor = (
        sysfs.NVIDIA if discovery.torch.get("cuda") else sysfs.AMD if discovery.torch.get("hip") else ""
    )
    for gpu in discovery.gpus:
        if not gpu.vendor:  # seen by torch only (a container or sandbox without the PCI tree)
            gpu.vendor = build_vendor
    everything = {
        g.pci_address: g for g in discovery.on_bus + discovery.ignored + discovery.gpus if g.pci_address
    }
    vendors = {g.vendor for g in everything.values()}
    if use_tools and sysfs.AMD in vendors:
        _merge_amd_smi(everything, discovery, tool_timeout_s)
    if use_tools and sysfs.NVIDIA in vendors:
        _merge_nvidia_smi(everything, discovery, tool_timeout_s)
    for gpu in discovery.gpus + discovery.on_bus:
        if not gpu.model:
            gpu.model = gpu.name or (f"PCI {gpu.pci_id}" if gpu.vendor else "unknown")
        if not gpu.name:
            gpu.name = gpu.model
    return discovery
