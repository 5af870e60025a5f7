"""Power caps and PSU budgets (r9700_power's interface), judged before anything changes."""

from __future__ import annotations

from r9700ctl.agent import power_budget as power
from r9700ctl.agent.result import FAIL, SKIP, WARN, CheckResult, finding
from r9700ctl.manifest import Manifest
from r9700ctl.preflight.model import Context, Gpu, Settings
from r9700ctl.preflight.registry import register


@register("power", order=80)
def power_budget(ctx: Context) -> list[CheckResult]:
    return _check_power(ctx.settings, ctx.discrete, ctx.manifest)


def _check_power(settings: Settings, gpus: list[Gpu], manifest: Manifest) -> list[CheckResult]:
    """Caps name GPUs of this node; each PSU's GPUs at their caps plus its host share fit its rating.

    A GPU without a cap draws up to its board power (the default cap: 300 W for an R9700,
    the manifest's board_power_w); the r9700_power role later checks each cap against the card's
    own range from amd-smi.
    """
    addresses = [g.address for g in gpus]
    caps, problems = power.plan_caps(settings.power_cap_w, settings.power_cap_w_by_gpu, addresses)
    checks = [
        finding(
            "power.caps",
            FAIL,
            p,
            "correct r9700_power_cap_w_by_gpu in the inventory",
            code="POWER_CAP_INVALID",
        )
        for p in problems
    ]
    if not settings.psus:
        checks.append(
            finding("power.psu", SKIP, "r9700_psus not set: no PSU budget to check", code="PSU_MAP_MISSING")
        )
        return checks
    draw: dict[str, float | None] = {}
    for gpu in gpus:
        # This very product's board power (an R9600D shares the R9700's PCI id): None when unknown.
        spec = manifest.gpu_spec(gpu.pci_id, gpu.revision) or {}
        rated = spec.get("board_power_w")
        draw[gpu.address] = caps.get(gpu.address, float(rated) if isinstance(rated, (int, float)) else None)
    present = set(addresses)
    fed = {a for psu in settings.psus for a in psu.gpus}
    for psu in settings.psus:
        missing = [a for a in psu.gpus if a not in present]
        if missing:
            checks.append(
                finding(
                    f"power.psu.{psu.name}",
                    FAIL,
                    f"r9700_psus.{psu.name} feeds {', '.join(missing)}, not a GPU of this node "
                    f"(GPUs: {', '.join(addresses) or 'none'})",
                    "list the PCI addresses `lspci -d 1002: -D` shows for this node",
                    code="PSU_GPU_UNKNOWN",
                )
            )
            continue
        line = power.budget_line(psu, draw, settings.psu_margin)
        checks.append(
            finding(
                f"power.psu.{psu.name}",
                line.status,
                line.detail,
                line.fix,
                {"budget": line.to_dict()},
                code=line.code,
            )
        )
    unfed = [a for a in addresses if a not in fed]
    if unfed:
        checks.append(
            finding(
                "power.psu.unassigned",
                WARN,
                f"{', '.join(unfed)} is fed by no PSU in r9700_psus: its draw is in no budget",
                "add it to the gpus of the PSU whose cables feed it",
                code="PSU_GPU_UNASSIGNED",
            )
        )
    return checks
