"""C4 host <-> device bandwidth per GPU: one GPU at a time, then all at once.

Floors derive from link theory: thresholds.yaml hostbw.*_fraction_of_link x the raw rate of the
link both ends of the card support (pcie.expected_link: the lower of the card's and the slot's
maximum; Gen5 x16 = 63.0 GB/s -> FAIL < 40, WARN < 45 as in docs/validation.md C4; an R9700 in a
Gen4 slot is judged against Gen4 x16's 31.5), judged on the median of the timed windows
(judge_measured: too few or too noisy windows are INCONCLUSIVE); then each GPU against the node
median; then the all-at-once figure against the GPU alone. A link that cannot be read gives no
floor: INCONCLUSIVE, even when three or more GPUs are alike (alike is not healthy); the peer rule
still WARNs or FAILs the one far below its siblings (_measure.combine). Without the slot's
capability (a VM) the card's maximum is only an upper bound: a figure below the floors that a
healthy slot of half or a quarter the rate explains is INCONCLUSIVE. A destination whose checksum
differs from its source FAILs whatever the speed (the verified copy is an extra untimed one:
kernels/hostbw.py says which).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, pcie, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import coded, judge_against_peers, not_applied
from r9700ctl.agent.kernels.specs import CopySpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, PASS, WARN, WRONG_DATA, CheckResult

THRESHOLDS = (
    "hostbw.warn_fraction_of_link",
    "hostbw.fail_fraction_of_link",
    "hostbw.usable_fraction_of_link",
    "hostbw.peer_warn_fraction",
    "hostbw.peer_fail_fraction",
    "hostbw.concurrent_warn_fraction",
    *pcie.THRESHOLDS,
    *_measure.JUDGING,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {"hostbw.size_mib": 256, "hostbw.windows": 3, "hostbw.copies_per_window": 20},
    "standard": {"hostbw.size_mib": 256, "hostbw.windows": 5, "hostbw.copies_per_window": 20},
}
SLOW_LINK = "HOSTBW_SLOW_LINK"
BELOW_FLOOR = "HOSTBW_BELOW_FLOOR"
BELOW_PEERS = "HOSTBW_BELOW_PEERS"
CORRUPTION = "HOSTBW_CORRUPTION"
CONCURRENT = "HOSTBW_CONCURRENT_LIMITED"
KERNEL = "hostbw.host_device_bandwidth"


def _slow_link(ctx: AgentContext, value: float, link: pcie.ExpectedLink) -> str:
    """Name the slower link a figure fits: usable share of half (or a quarter of) the expected rate."""
    usable = float(ctx.threshold("hostbw.usable_fraction_of_link"))
    rate = link.rate_gbs or 0.0
    part = next((part for part in (4, 2) if value <= usable * rate / part), None)
    return _fits(value, part, link) if part else ""


def _fits(value: float, part: int, link: pcie.ExpectedLink) -> str:
    return f"{value:.1f} GB/s is what a link of 1/{part} the rate of {link.text()} delivers"


def _healthy_on_a_slower_slot(ctx: AgentContext, value: float, link: pcie.ExpectedLink) -> int | None:
    """2 or 4 when the figure is what a healthy link of half (a quarter of) the rate gives: at or
    above that link's FAIL floor and within its usable share (a Gen5 x16 card: 20-28 GB/s fits a
    Gen4 x16 slot, 10-14 a Gen3 x16 one); else None."""
    usable = float(ctx.threshold("hostbw.usable_fraction_of_link"))
    fail = float(ctx.threshold("hostbw.fail_fraction_of_link"))
    rate = link.rate_gbs or 0.0
    return next((part for part in (2, 4) if fail * rate / part <= value <= usable * rate / part), None)


def _direction_result(
    ctx: AgentContext,
    index: int,
    direction: str,
    figure: dict[str, Any],
    peers: dict,
    link: pcie.ExpectedLink,
) -> CheckResult:
    rate = link.rate_gbs
    value = figure[f"{direction}_gbs"]
    windows = figure[f"{direction}_windows_gbs"]
    if rate:
        warn = float(ctx.threshold("hostbw.warn_fraction_of_link")) * rate
        fail = float(ctx.threshold("hostbw.fail_fraction_of_link")) * rate
        floor = _measure.measured(ctx, windows, warn, fail, unit="GB/s")
        part = _healthy_on_a_slower_slot(ctx, value, link)
        if floor.status in (WARN, FAIL) and not link.slot_known and part:
            # Without the slot's LnkCap the card's maximum is only an upper bound of what both
            # ends support: a figure a slower slot explains is not judged (pcie.link says the same).
            said = f"{_fits(value, part, link)}, and the slot's capability is not readable"
            floor = not_applied(
                floor.threshold, codes.hint("PCIE_SLOT_UNKNOWN", said), code="PCIE_SLOT_UNKNOWN"
            )
    else:
        floor = not_applied(
            "no link-derived floor",
            "the card's link speed and width are not readable in sysfs",
            code="PCIE_LINK_UNREADABLE",
        )
    slower = _slow_link(ctx, value, link) if rate else ""
    floor = coded(floor, SLOW_LINK if slower else BELOW_FLOOR)
    peer = coded(peers[f"gpu{index}"], BELOW_PEERS)
    status, threshold, why, code = _measure.combine(floor, peer)
    if rate:
        threshold += f" [{link.text()}: {rate:.1f} GB/s raw]"
    hints = []
    if not figure["verified"]:
        status, code = FAIL, CORRUPTION
        hints.append(codes.hint(CORRUPTION, "a copy delivered wrong data"))
    if floor.applied and floor.status in (WARN, FAIL):
        hints.append(codes.hint(floor.code, slower or f"below the floor for a {link.text()} link"))
    elif floor.status != PASS and why:
        hints.append(why)
    if peer.applied and peer.status != PASS:
        hints.append(codes.hint(BELOW_PEERS, peer.reason))
    if status == PASS and link.note:
        hints.append(link.note)
    return CheckResult(
        id=f"hostbw.{direction}",
        subject=f"gpu{index}",
        status=status,
        metric=f"{direction}_pinned_bandwidth",
        value=_measure.rounded(value),
        unit="GB/s",
        threshold=threshold,
        hint="; ".join(hints),
        evidence={
            "windows_gbs": [round(v, 3) for v in figure[f"{direction}_windows_gbs"]],
            "raw_link_gbs": _measure.rounded(rate),
            "link_assumed": link.text(),
            "link_basis": "both ends"
            if link.slot_known
            else "the card's maximum (slot capability unreadable)",
            "pageable_gbs": _measure.rounded(figure.get(f"pageable_{direction}_gbs")),
            "verify": figure["verify"][direction],
            WRONG_DATA: not figure["verified"],
            "host_memory": figure["host_memory"],
        },
        code=code,
    )


@register(id="hostbw", levels=from_level("quick"), order=40, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    size = int(_measure.param(ctx, "hostbw.size_mib", DEFAULTS)) * _measure.MiB
    windows = int(_measure.param(ctx, "hostbw.windows", DEFAULTS))
    copies = int(_measure.param(ctx, "hostbw.copies_per_window", DEFAULTS))
    # One spec for every copy of the phase: each GPU alone with a pageable buffer too, then all at once.
    copying = CopySpec(
        gpus=(),
        size_bytes=size,
        windows=windows,
        copies_per_window=copies,
        numa_nodes={g.index: g.numa_node for g in ctx.gpus},
        root=str(ctx.root),
    )
    # 2 directions x (warm-up + windows x copies) at >= 10 GB/s, plus pageable and start-up.
    expected = 2 * (3 + windows * copies) * size / 10e9 + 15
    results: list[CheckResult] = []
    alone: dict[int, dict[str, Any]] = {}
    common: dict[str, Any] = {}
    for gpu in ctx.gpus:
        spec = replace(copying, gpus=(gpu.index,), pageable=True)
        step = f"hostbw.gpu{gpu.index}"
        outcome = _measure.run_kernel(ctx, step, [gpu.index], KERNEL, spec, expected_s=expected)
        if not outcome.ok:
            results.append(ctx.outcome_result("hostbw.h2d", gpu.subject, outcome))
            continue
        alone[gpu.index] = outcome.value["gpus"][str(gpu.index)]
        common = {
            k: outcome.value[k] for k in ("size_bytes", "windows", "copies_per_window", "method", "versions")
        }
    for direction in ("h2d", "d2h"):
        peers = judge_against_peers(
            {f"gpu{i}": fig[f"{direction}_gbs"] for i, fig in alone.items()},
            float(ctx.threshold("hostbw.peer_warn_fraction")),
            float(ctx.threshold("hostbw.peer_fail_fraction")),
            min_peers=_measure.min_peers(ctx),
        )
        for i, fig in alone.items():
            result = _direction_result(ctx, i, direction, fig, peers, pcie.expected_for(ctx, ctx.gpu(i)))
            result.evidence.update(common)
            results.append(result)
    if len(ctx.gpus) > 1 and alone:
        results.extend(_concurrent(ctx, copying, alone, expected * len(ctx.gpus)))
    return results


def _concurrent(ctx: AgentContext, copying: CopySpec, alone: dict, expected: float) -> list[CheckResult]:
    indices = ctx.gpu_indices
    spec = replace(copying, gpus=tuple(indices), pageable=False)
    outcome = _measure.run_kernel(ctx, "hostbw.all", indices, KERNEL, spec, expected_s=expected)
    if not outcome.ok:
        return [ctx.outcome_result("hostbw.concurrent", "node", outcome)]
    limit = float(ctx.threshold("hostbw.concurrent_warn_fraction"))
    results = []
    for i, fig in outcome.value["gpus"].items():
        index = int(i)
        if index not in alone:
            continue
        ratios = {d: fig[f"{d}_gbs"] / alone[index][f"{d}_gbs"] for d in ("h2d", "d2h")}
        worst = min(ratios.values())
        status = PASS if worst >= limit else WARN
        code = CONCURRENT
        said = f"with all GPUs copying at once this GPU gets {worst:.0%} of its bandwidth alone"
        hint = codes.hint(code, said) if status == WARN else ""
        if not fig["verified"]:
            status, code = FAIL, CORRUPTION
            hint = codes.hint(code, "a copy delivered wrong data")
        results.append(
            CheckResult(
                id="hostbw.concurrent",
                subject=f"gpu{index}",
                status=status,
                metric="all_at_once_over_alone",
                value=round(worst, 3),
                unit="ratio",
                threshold=f">= {limit:g} x the GPU's bandwidth alone (WARN below)",
                hint=hint,
                evidence={
                    "h2d_gbs": round(fig["h2d_gbs"], 2),
                    "d2h_gbs": round(fig["d2h_gbs"], 2),
                    "h2d_alone_gbs": round(alone[index]["h2d_gbs"], 2),
                    "d2h_alone_gbs": round(alone[index]["d2h_gbs"], 2),
                    "node_h2d_gbs": round(sum(g["h2d_gbs"] for g in outcome.value["gpus"].values()), 2),
                    "node_d2h_gbs": round(sum(g["d2h_gbs"] for g in outcome.value["gpus"].values()), 2),
                    "verify": fig["verify"],
                    WRONG_DATA: not fig["verified"],
                },
                code=code,
            )
        )
    return results
