"""The node's GPUs from whichever files the bundle has, merged by PCI address and named by the manifest.

Each file knows part of the story: amd-smi static has the address, device id, gfx target and VRAM;
plain amd-smi truncates names ("...Radeon AI PRO R9700"); rocminfo has the gfx target and chip id;
lspci has every card on the bus, even one ROCm cannot see (without -nn, by name only: "Navi 48
[Radeon AI PRO R9700]"); dmesg's amdgpu start-up lines give a card's PCI id and GFX IP by address.
Later sources only fill what earlier ones left empty; the manifest's entry for the PCI id names the
model and says whether it is discrete.

A GPU's gfx target is its chip's, not what rocminfo printed: HSA_OVERRIDE_GFX_VERSION rewrites the
names rocminfo prints (an R9700 listed as gfx1100, a Strix Halo iGPU as gfx1201: ROCm/ROCm#5696),
never the chip id. Where the manifest knows the id, its target wins and the printed one is kept as
`reported_gfx`; where it does not and env.txt sets the override, a name equal to the override's is
not taken for the chip's target.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from r9700ctl.agent.parsers._common import GpuRecord
from r9700ctl.bundle.files import BundleFiles, Diagnosis, evidence_in, find_line, read_env
from r9700ctl.bundle.model import AMD, NVIDIA, BundleGpu, Evidence

# Files that list GPUs, richest first.
GPU_SOURCES = (
    "amd-smi-static.json",
    "amd-smi-list.json",
    "amd-smi.txt",
    "amd-smi-metric.json",
    "rocm-smi.json",
    "rocminfo.txt",
    "lspci.txt",
    "nvidia-smi.xml",
)
# Files in which ROCm itself lists the GPUs it can use (lspci lists what is on the bus).
ROCM_SOURCES = ("rocminfo.txt", "amd-smi-static.json", "amd-smi-list.json", "amd-smi.txt", "rocm-smi.json")
# amdgpu's name for every APU's graphics, whatever its generation.
GENERIC_IGPU_NAME = "amd radeon graphics"


def discover_gpus(diagnosis: Diagnosis) -> list[BundleGpu]:
    bundle, found = diagnosis.bundle, []
    for name in GPU_SOURCES:
        for record in _records(bundle, name):
            _merge(found, record)
    _from_kernel_log(bundle, found)
    for gpu in found:
        _name_from_manifest(diagnosis.manifest, gpu)
        if gpu.discrete is None:
            gpu.discrete = not (gpu.name or "").lower().startswith(GENERIC_IGPU_NAME)
    _undo_override(diagnosis, found)
    if not any(bundle.has(n) for n in GPU_SOURCES):
        diagnosis.cannot_judge("which GPUs the node has", "rocminfo.txt", "amd-smi-static.json", "lspci.txt")
    return found


def _name_from_manifest(manifest: Any, gpu: BundleGpu) -> None:
    model = manifest.device(gpu.pci_id) if gpu.pci_id else None
    if model is None and gpu.name and gpu.vendor in (AMD, None):
        model = _model_by_name(manifest, gpu.name) or _model_by_lspci_name(manifest, gpu)
    if model is None:
        return
    gpu.pci_id = gpu.pci_id or model.pci_id
    gpu.vendor = gpu.vendor or model.pci_id.split(":")[0]
    products = [str(s.get("name", "")) for s in (model.raw.get("skus") or {}).values()]
    # A tool's own marketing name of one product of a shared id (rocminfo: "AMD Radeon RX 9070 XT")
    # says more than the model's list of products; revisions tell them apart in lspci.
    if not (gpu.name and gpu.name.lower() in {p.lower() for p in products}):
        gpu.name = model.name
    if gpu.gfx and gpu.gfx != model.gfx:
        gpu.reported_gfx = gpu.gfx  # the chip id says otherwise: an override rewrote it
    gpu.gfx = model.gfx
    gpu.discrete = model.discrete


def _model_by_lspci_name(manifest: Any, gpu: BundleGpu) -> Any:
    """The device a name lspci printed without -nn means. A bare chip name that several devices
    share ("Navi 48": RX 9070 family and R9700) names none of them, but gives their common gfx
    target and kind; the PCI id stays unknown rather than guessed."""
    if gpu.seen_in[:1] != ["lspci.txt"] or not gpu.name:
        return None
    candidates = manifest.devices_named(gpu.name)
    if len(candidates) == 1:
        return candidates[0]
    if candidates and len({m.gfx for m in candidates}) == 1:
        gpu.gfx = gpu.gfx or candidates[0].gfx
        kinds = {m.discrete for m in candidates}
        gpu.discrete = kinds.pop() if len(kinds) == 1 else gpu.discrete
    return None


def _from_kernel_log(bundle: BundleFiles, found: list[BundleGpu]) -> None:
    """dmesg.txt's start-up lines by PCI address: the PCI id (lspci without -nn has none) and the
    GFX IP block, which an HSA override cannot rewrite. dmesg lists no GPU of its own here."""
    if not bundle.has("dmesg.txt"):
        return
    from r9700ctl.agent.parsers import dmesg

    report = bundle.parsed("dmesg.txt", dmesg.parse)
    for gpu in found:
        device = (getattr(report, "devices", None) or {}).get(gpu.bdf or "")
        if device is None or not gpu.bdf or gpu.vendor not in (AMD, None):
            continue
        gpu.pci_id = gpu.pci_id or device.pci_id
        gpu.gfx_ip = device.gfx_ip


def _undo_override(diagnosis: Diagnosis, found: list[BundleGpu]) -> None:
    """A GPU whose chip the manifest does not know, listed by rocminfo under the target that env.txt's
    HSA_OVERRIDE_GFX_VERSION names: that name is the override's, not the chip's (ROCm/ROCm#5696: a
    Strix Halo iGPU listed as gfx1201), so its target is unknown rather than the discrete card's."""
    value = read_env(diagnosis.bundle).get("HSA_OVERRIDE_GFX_VERSION")
    named = diagnosis.manifest.gfx_for_hsa_version(value[0]) if value else None
    for gpu in found:
        known = gpu.pci_id and diagnosis.manifest.device(gpu.pci_id)
        if named and gpu.gfx == named and gpu.gfx_from == "rocminfo.txt" and not known:
            gpu.reported_gfx, gpu.gfx = gpu.gfx, None


def _model_by_name(manifest: Any, name: str) -> Any:
    """The manifest model a printed name means; plain amd-smi cuts names to "...Radeon AI PRO R9700"."""
    wanted = name.strip().lower()
    truncated = wanted.startswith("...")
    wanted = wanted.lstrip(".").strip()
    for model in manifest.gpus.values():
        known = model.name.lower()
        if known == wanted or (truncated and known.endswith(wanted)):
            return model
    return None


def _merge(found: list[BundleGpu], record: BundleGpu) -> None:
    match = None
    if record.bdf:
        match = next((g for g in found if g.bdf == record.bdf), None)
    else:
        # No address (amd-smi metric, rocminfo without BDFID): tools list GPUs in the same order, so
        # take the first GPU (of the same model, when the record names one) this file has not named yet.
        source = record.seen_in[0]
        match = next(
            (
                g
                for g in found
                if source not in g.seen_in
                and g.vendor == record.vendor
                and (record.pci_id is None or g.pci_id in (None, record.pci_id))
            ),
            None,
        )
    if match is None:
        found.append(record)
        return
    for attr in ("vendor", "pci_id", "name", "gfx", "gfx_from", "vram_mib", "discrete", "evidence"):
        if getattr(match, attr) is None:
            setattr(match, attr, getattr(record, attr))
    match.bdf = match.bdf or record.bdf
    match.seen_in += [s for s in record.seen_in if s not in match.seen_in]


def _records(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    if not bundle.has(name):
        return []
    try:
        return _READERS[name](bundle, name)
    except Exception as exc:  # a parser result of a shape nobody expected must not stop the diagnosis
        bundle.mark_unreadable(name, f"unexpected content ({type(exc).__name__}: {exc})")
        return []


def _hex4(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower().removeprefix("0x")
    return text.zfill(4) if re.fullmatch(r"[0-9a-f]{1,4}", text) else None


def _pci_id(vendor: Any, device: Any) -> str | None:
    device_hex = _hex4(device)
    return f"{_hex4(vendor) or AMD}:{device_hex}" if device_hex else None


def _from_smi(
    bundle: BundleFiles,
    name: str,
    gpu: GpuRecord,
    anchor: str,
    *,
    vendor: str,
    pci_id: str | None = None,
    discrete: bool | None = None,
) -> BundleGpu:
    """A GPU of an SMI tool's record (amd-smi, rocm-smi, nvidia-smi: the facts they share under one
    name), with the line `anchor` finds as its evidence."""
    gfx = getattr(gpu, "gfx_target", None)
    return BundleGpu(
        bdf=gpu.bdf,
        vendor=vendor,
        pci_id=pci_id,
        name=gpu.name,
        gfx=gfx,
        gfx_from=name if gfx else None,
        vram_mib=gpu.vram_total_mib,
        discrete=discrete,
        seen_in=[name],
        evidence=evidence_in(bundle, name, re.escape(anchor)) if anchor else Evidence(name, None),
    )


def _from_amdsmi(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    from r9700ctl.agent.parsers import amdsmi

    report = bundle.parsed(name, amdsmi.parse)
    return [
        _from_smi(
            bundle,
            name,
            gpu,
            gpu.bdf[5:] if gpu.bdf else (gpu.name or ""),
            vendor=_hex4(gpu.vendor_id) or AMD,
            pci_id=_pci_id(gpu.vendor_id, gpu.device_id),
        )
        for gpu in getattr(report, "gpus", None) or []
    ]


def _from_rocmsmi(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    from r9700ctl.agent.parsers import rocmsmi

    report = bundle.parsed(name, rocmsmi.parse_json)
    cards = getattr(report, "cards", None) or []
    return [
        _from_smi(bundle, name, c, f'"card{c.index}"', vendor=AMD, pci_id=_pci_id(AMD, c.device_id))
        for c in cards
    ]


def _from_rocminfo(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    from r9700ctl.agent.parsers import rocminfo

    info = bundle.parsed(name, rocminfo.parse)
    lines = bundle.lines(name)
    records = []
    for agent in getattr(info, "gpus", None) or []:
        header = find_line(lines, rf"^\s*Agent\s+{agent.number}\s*$")
        start = header[0] if header else 1
        where = find_line(lines, rf"^\s*Name:\s*{re.escape(agent.name)}\s*$", start=start) or header
        records.append(
            BundleGpu(
                bdf=agent.bdf if agent.bdfid else None,
                vendor=AMD,
                pci_id=_pci_id(AMD, agent.device_id),
                name=agent.marketing_name,
                gfx=agent.gfx_target,
                gfx_from=name if agent.gfx_target else None,
                vram_mib=agent.coarse_grained_pool_kib / 1024 if agent.coarse_grained_pool_kib else None,
                discrete=False if agent.apu_memory else None,
                seen_in=[name],
                evidence=Evidence(name, where[0], where[1]) if where else Evidence(name, None),
            )
        )
    return records


def _from_lspci(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    from r9700ctl.agent.parsers import lspci

    report = bundle.parsed(name, lspci.parse)
    lines = bundle.lines(name)
    records = []
    for function in getattr(report, "functions", None) or []:
        if not function.is_display or function.vendor_id not in (AMD, NVIDIA):
            continue
        title = lines[function.first_line - 1].strip() if 0 < function.first_line <= len(lines) else ""
        records.append(
            BundleGpu(
                bdf=function.bdf,
                vendor=function.vendor_id,
                pci_id=function.pci_id,
                # lspci without -nn names the device instead ("Navi 48 [Radeon AI PRO R9700]")
                name=function.device_name if function.pci_id is None else None,
                seen_in=[name],
                evidence=Evidence(name, function.first_line or None, title),
            )
        )
    return records


def _from_nvidia_smi(bundle: BundleFiles, name: str) -> list[BundleGpu]:
    from r9700ctl.agent.parsers import nvidia_smi

    report = bundle.parsed(name, nvidia_smi.parse)
    return [
        _from_smi(bundle, name, gpu, gpu.bus_id or gpu.name or "<gpu ", vendor=NVIDIA, discrete=True)
        for gpu in getattr(report, "gpus", None) or []
    ]


_READERS: dict[str, Callable[[BundleFiles, str], list[BundleGpu]]] = {
    "amd-smi-static.json": _from_amdsmi,
    "amd-smi-list.json": _from_amdsmi,
    "amd-smi.txt": _from_amdsmi,
    "amd-smi-metric.json": _from_amdsmi,
    "rocm-smi.json": _from_rocmsmi,
    "rocminfo.txt": _from_rocminfo,
    "lspci.txt": _from_lspci,
    "nvidia-smi.xml": _from_nvidia_smi,
}
