"""C1 inventory: are all the GPUs there, the same model and firmware, with their full memory?

GPU count from sysfs (display-class PCI functions of AMD/NVIDIA, integrated GPUs excluded)
against --expected-gpus, and against what torch sees. The PCI addresses of the last complete
inventory are kept beside the journal, so a missing card is named by its address.
"""

from __future__ import annotations

import contextlib
import json
from functools import partial
from pathlib import Path
from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.atomic import write_atomic
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN, CheckResult

INVENTORY_FILE = "last-inventory.json"
MIB = 2**20
THRESHOLDS = ("inventory.vram_healthy_mib", "inventory.vram_min_fraction_of_healthy")


def _last_inventory(state_dir: Path | None) -> list[str]:
    if state_dir is None:
        return []
    try:
        data = json.loads((state_dir / INVENTORY_FILE).read_text(encoding="utf-8"))
        return [str(a) for a in data.get("pci_addresses", [])]
    except (OSError, ValueError, AttributeError):
        return []


def _save_inventory(state_dir: Path | None, addresses: list[str]) -> None:
    if state_dir is None:
        return
    with contextlib.suppress(OSError):  # the inventory memory is a convenience; never fail a run over it
        write_atomic(state_dir / INVENTORY_FILE, json.dumps({"pci_addresses": addresses}) + "\n")


def _count_result(ctx: AgentContext, addresses: list[str]) -> CheckResult:
    count = len(addresses)
    expected = ctx.expected_gpus
    previous = _last_inventory(ctx.state_dir)
    missing_now = sorted(set(previous) - set(addresses))
    evidence: dict[str, Any] = {"pci_addresses": addresses, "last_inventory": previous}
    if ctx.discovery.ignored:
        evidence["integrated_not_counted"] = [g.pci_address for g in ctx.discovery.ignored]
    threshold = ">= 1 (no --expected-gpus)" if expected is None else f"== {expected}"
    verdict = partial(
        CheckResult, id="inventory.count", subject="node", metric="gpu_count", value=count, unit="GPUs"
    )
    verdict = partial(verdict, threshold=threshold, evidence=evidence)
    if expected is None and count == 0:
        said = "no AMD or NVIDIA GPU on the PCI bus"
        return verdict(status=FAIL, hint=codes.hint("GPU_MISSING", said), code="GPU_MISSING")
    if expected is None and missing_now:
        said = f"GPU(s) at {', '.join(missing_now)} were present in the last run and are gone"
        return verdict(status=FAIL, hint=codes.hint("GPU_MISSING", said), code="GPU_MISSING")
    if expected is not None and count < expected:
        named = f" (missing since the last run: {', '.join(missing_now)})" if missing_now else ""
        said = f"{expected - count} of {expected} GPU(s) missing{named}"
        return verdict(status=FAIL, hint=codes.hint("GPU_MISSING", said), code="GPU_MISSING")
    _save_inventory(ctx.state_dir, addresses)
    if expected is not None and count > expected:
        said = f"{count} GPUs found, {expected} expected"
        code = "GPU_COUNT_ABOVE_EXPECTED"
        return verdict(status=WARN, hint=codes.hint(code, said), code=code)
    return verdict(status=PASS)


def _torch_result(ctx: AgentContext, sysfs_count: int) -> CheckResult:
    probe = ctx.discovery.torch
    visible = {k: v for k, v in ctx.environment.get("variables", {}).items() if k.endswith("VISIBLE_DEVICES")}
    evidence: dict[str, Any] = {"torch": probe.get("torch"), "visible_devices_variables": visible}
    threshold = f"== {sysfs_count} (GPUs on the PCI bus)"
    verdict = partial(
        CheckResult, id="inventory.torch", subject="node", metric="torch_devices", threshold=threshold
    )
    if not probe:
        return verdict(status=SKIP, hint="torch was not probed", evidence=evidence, code="TORCH_NOT_USABLE")
    if not probe.get("importable", True) or probe.get("status") in ("timeout", "error"):
        reason = probe.get("error") or "torch is not importable"
        status = FAIL if probe.get("status") == "timeout" else SKIP
        code = "TORCH_PROBE_HUNG" if status == FAIL else "TORCH_NOT_USABLE"
        said = "importing torch / creating a GPU context hung" if status == FAIL else reason
        return verdict(
            status=status, hint=codes.hint(code, said), evidence={**evidence, "error": reason}, code=code
        )
    seen = int(probe.get("device_count") or 0)
    evidence["devices"] = probe.get("devices", [])
    counted = partial(verdict, value=seen, unit="GPUs", evidence=evidence, code="TORCH_SEES_FEWER_GPUS")
    if seen == sysfs_count:
        return counted(status=PASS)
    if visible and seen < sysfs_count:
        said = f"torch sees {seen} of {sysfs_count} GPUs because {', '.join(visible)} is set"
        return counted(status=WARN, hint=f"{said}; unset it to validate every card")
    hint = (
        f"torch sees {seen} of {sysfs_count} GPUs: the driver did not initialise some cards or this user "
        "lacks access (driver.access); check `dmesg | grep -i amdgpu` and `rocminfo`"
    )
    if probe.get("error"):
        hint += f" (torch: {probe['error']})"
    return counted(status=FAIL if seen < sysfs_count else WARN, hint=hint)


def _uniform_result(ctx: AgentContext) -> CheckResult:
    gpus = ctx.discovery.on_bus or ctx.discovery.gpus
    models = sorted({g.model for g in gpus})
    targets = sorted({g.gfx_target or g.compute_capability or "?" for g in gpus})
    vbioses = sorted({g.vbios for g in gpus if g.vbios})
    evidence = {
        "models": models,
        "targets": targets,
        "vbios": {g.pci_address or g.subject: g.vbios for g in gpus},
    }
    threshold = "one model, one target, one VBIOS across the node"
    verdict = partial(
        CheckResult, id="inventory.uniform", subject="node", threshold=threshold, evidence=evidence
    )
    if not gpus:
        return verdict(status=SKIP, hint="no GPU found", code="NO_GPU")
    if len(models) > 1 or len(targets) > 1:
        code = "GPU_MODELS_MIXED"
        return verdict(
            status=WARN,
            metric="models",
            value=", ".join(models),
            hint=codes.hint(code, "mixed GPU models"),
            code=code,
        )
    if len(vbioses) > 1:
        code = "VBIOS_MISMATCH"
        said = "VBIOS differs between cards"
        return verdict(
            status=WARN, metric="vbios", value=", ".join(vbioses), hint=codes.hint(code, said), code=code
        )
    return verdict(status=PASS, metric="models", value=models[0])


def _vram_results(ctx: AgentContext) -> list[CheckResult]:
    """Reported VRAM against what healthy cards of the model report (thresholds vram_healthy_mib)."""
    results = []
    healthy = ctx.threshold("inventory.vram_healthy_mib")
    fraction = float(ctx.threshold("inventory.vram_min_fraction_of_healthy"))
    source = ctx.threshold_text("inventory.vram_healthy_mib")
    for gpu in ctx.discovery.gpus:
        mib = round(gpu.vram_bytes / MIB, 1) if gpu.vram_bytes else None
        evidence = {"pci": gpu.pci_address, "bytes": gpu.vram_bytes, "healthy_mib": healthy, "source": source}
        verdict = partial(
            CheckResult,
            id="inventory.vram",
            subject=gpu.subject,
            metric="vram",
            unit="MiB",
            evidence=evidence,
        )
        if mib is None:
            said = "no source reported the memory size (sysfs mem_info_vram_total, torch)"
            threshold = "reported VRAM of a healthy card of the model"
            results.append(verdict(status=INCONCLUSIVE, threshold=threshold, hint=said, code="VRAM_UNKNOWN"))
            continue
        if gpu.model != ctx.model or healthy is None:
            why = (
                f"{gpu.model} is judged with the {ctx.model} thresholds (mixed or unknown models)"
                if gpu.model != ctx.model
                else "no VRAM size of a healthy card of this model"
            )
            unjudged = ctx.unjudged("inventory.vram_healthy_mib", why)
            results.append(
                verdict(
                    status=unjudged.status,
                    value=mib,
                    threshold=unjudged.threshold,
                    hint=unjudged.reason,
                    code=unjudged.code,
                )
            )
            continue
        floor = fraction * float(healthy)
        status = PASS if mib >= floor else WARN
        said = f"reports {mib:.0f} MiB where healthy cards of this model report {float(healthy):.0f}"
        hint = "" if status == PASS else codes.hint("VRAM_BELOW_HEALTHY", said)
        threshold = f">= {fraction:g} x {float(healthy):g} MiB, what healthy cards report ({source})"
        results.append(
            verdict(status=status, value=mib, threshold=threshold, hint=hint, code="VRAM_BELOW_HEALTHY")
        )
    return results


@register(id="inventory", levels=from_level("config"), needs_gpu=False, order=10, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    # Cards on the bus, whether or not torch can see them; torch-only devices (no sysfs) too.
    on_bus = ctx.discovery.on_bus or ctx.discovery.gpus
    addresses = [g.pci_address or f"torch-device-{g.index}" for g in on_bus]
    results = [_count_result(ctx, addresses)]
    if addresses:
        results.append(_torch_result(ctx, len(addresses)))
        results.append(_uniform_result(ctx))
        results.extend(_vram_results(ctx))
    return results
