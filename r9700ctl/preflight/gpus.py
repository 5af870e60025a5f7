"""The node's GPUs: which AMD cards the PCI bus shows, the manifest's models, an iGPU beside the
cards, and the count the inventory expects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult, finding
from r9700ctl.manifest import AMD_PCI_VENDOR, Manifest
from r9700ctl.preflight.model import Context, Gpu, Settings
from r9700ctl.preflight.registry import register

# "ROCm doesn't currently support integrated graphics. Should your system have an AMD IGP installed,
# disable it in the BIOS prior to using ROCm. If the driver can enumerate the IGP, the ROCm runtime
# may crash the system, even if told to omit it via HIP_VISIBLE_DEVICES."
IGPU_SOURCE = "https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/install/amdgpu-install.html"


@register("gpus", order=30)
def gpus(ctx: Context) -> list[CheckResult]:
    """The GPUs found, into the context and `res`; then the checks on them."""
    ctx.gpus = _gpus(ctx.facts, ctx.manifest)
    res = ctx.res
    res.gpus = [asdict(g) for g in ctx.gpus]
    res.discrete_gpus = len(ctx.discrete)
    res.gfx_targets = sorted({g.gfx for g in ctx.discrete if g.known})
    res.igpu_present = any(g.known and not g.discrete for g in ctx.gpus) and bool(ctx.discrete)
    return _check_gpus(ctx.gpus, ctx.settings, ctx.facts)


def _gpus(facts: Mapping[str, Any], manifest: Manifest) -> list[Gpu]:
    gpus = []
    for dev in (facts.get("pci") or {}).get("devices") or []:
        vendor = str(dev.get("vendor", "")).lower().removeprefix("0x")
        if vendor != AMD_PCI_VENDOR:
            continue
        pci_id = f"{vendor}:{str(dev.get('device', '')).lower().removeprefix('0x')}"
        address, revision = str(dev.get("address", "")), str(dev.get("revision") or "")
        spec = manifest.gpu_spec(pci_id, revision)
        if spec is None:
            gpus.append(Gpu(address, pci_id, "unknown AMD GPU", "", True, False, revision))
        else:
            discrete = bool(spec.get("discrete", True))
            gpus.append(Gpu(address, pci_id, str(spec["name"]), str(spec["gfx"]), discrete, True, revision))
    return sorted(gpus, key=lambda g: g.address)


def _describe(gpus: list[Gpu]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        label = f"{g.name} ({g.gfx})" if g.known else f"{g.name} {g.pci_id}"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n}x {label}" for label, n in counts.items())


def _check_gpus(gpus: list[Gpu], settings: Settings, facts: Mapping[str, Any]) -> list[CheckResult]:
    source = (facts.get("pci") or {}).get("source", "sysfs")
    checks = []
    discrete = [g for g in gpus if g.discrete]
    if not discrete:
        status = WARN if settings.allow_unsupported else FAIL
        checks.append(
            finding(
                "gpu.detected",
                status,
                f"no discrete AMD GPU found (PCI vendor 0x1002, display class, from {source})",
                "check that the cards are seated, powered and enabled in the firmware (lspci -nn -d 1002:)",
                code="GPU_MISSING",
            )
        )
    else:
        checks.append(finding("gpu.detected", PASS, f"{_describe(discrete)} (from {source})"))
    unknown = [g for g in gpus if not g.known]
    if unknown:
        checks.append(
            finding(
                "gpu.known",
                WARN,
                f"AMD display device(s) not in the manifest: {', '.join(g.pci_id for g in unknown)}",
                "add the model to r9700ctl/data/manifest.yaml (gpus) with its gfx target and source",
                code="GPU_MODEL_UNKNOWN",
            )
        )
    igpus = [g for g in gpus if g.known and not g.discrete]
    if igpus and discrete:
        checks.append(
            finding(
                "gpu.igpu",
                WARN,
                f"integrated {igpus[0].name} at {igpus[0].address} beside discrete cards: AMD says ROCm does "
                "not support integrated graphics and may crash the system if the driver can enumerate it, "
                "even when told to omit it by environment variable; ROCR_VISIBLE_DEVICES is set to the "
                "discrete cards meanwhile",
                "disable the integrated GPU in the BIOS/UEFI setup (AMD's ROCm installation prerequisites)",
                {"source": IGPU_SOURCE},
                code="IGPU_BESIDE_DISCRETE",
            )
        )
    if settings.expected_gpus is None:
        checks.append(
            finding(
                "gpu.count",
                SKIP,
                f"r9700_expected_gpus not set; found {len(discrete)} discrete GPU(s)",
                code="GPU_COUNT_UNCHECKED",
            )
        )
    elif len(discrete) == settings.expected_gpus:
        checks.append(
            finding("gpu.count", PASS, f"{len(discrete)} discrete GPU(s), as r9700_expected_gpus says")
        )
    else:
        checks.append(
            finding(
                "gpu.count",
                FAIL,
                f"found {len(discrete)} discrete AMD GPU(s), "
                f"r9700_expected_gpus says {settings.expected_gpus}",
                "reseat or power the missing cards and check the firmware's PCIe settings, "
                "or correct r9700_expected_gpus",
                code="GPU_COUNT_MISMATCH",
            )
        )
    return checks


def _visible_devices(gpus: list[Gpu]) -> str:
    """Indices of the discrete cards among AMD GPUs in PCI order (how KFD numbers its agents)."""
    return ",".join(str(i) for i, g in enumerate(gpus) if g.discrete)
