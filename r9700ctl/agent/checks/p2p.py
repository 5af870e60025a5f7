"""C5 peer-to-peer: every ordered pair's copy bandwidth, against a copy bounced through the host.

Runs last (runs_last=True): P2P on several R9700s can hang the whole host
(ROCm/rocm-systems#11348), so everything else is measured first, and each pair runs in its own
journaled step with a timeout: a hang becomes an ERROR naming the pair, and a host reset is
reported by the next run from the journal.

Per ordered pair (the worst rule decides):
- data verified on every path (FAIL P2P_CORRUPTION otherwise);
- unidirectional GB/s against the link floor (p2p.warn_fraction_of_link x the raw rate of the
  slower of the two cards' links, each what both its ends support: 20 GB/s on Gen5 x16,
  docs/validation.md C5), on the median of the timed windows, and against the median of all pairs
  (WARN < 0.85, FAIL < 0.7);
- P2P_NOT_EFFECTIVE (WARN) when P2P <= 1.1 x the host-bounce copy of the same size;
- asymmetry i->j / j->i < 0.8 (WARN);
- can_access_peer False: WARN (the runtime stages copies through host memory).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, pcie, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import Verdict, coded, judge_against_peers, not_applied
from r9700ctl.agent.kernels.specs import PairSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN, WRONG_DATA, CheckResult

THRESHOLDS = (
    "p2p.warn_fraction_of_link",
    "p2p.peer_warn_fraction",
    "p2p.peer_fail_fraction",
    "p2p.not_effective_ratio",
    "p2p.asymmetry_warn",
    *pcie.THRESHOLDS,
    *_measure.JUDGING,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {"p2p.size_mib": 256, "p2p.windows": 3, "p2p.copies_per_window": 5},
    "standard": {"p2p.size_mib": 256, "p2p.windows": 5, "p2p.copies_per_window": 10},
}
CORRUPTION = "P2P_CORRUPTION"
BELOW_FLOOR = "P2P_BELOW_FLOOR"
BELOW_PEERS = "P2P_BELOW_PEERS"
NOT_EFFECTIVE = "P2P_NOT_EFFECTIVE"
ASYMMETRIC = "P2P_ASYMMETRIC"
NO_PEER_ACCESS = "P2P_NO_PEER_ACCESS"


@register(id="p2p", levels=from_level("quick"), order=100, runs_last=True, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    skip = _measure.skip_single_gpu(ctx, "p2p.bandwidth")
    if skip:
        return skip
    size = int(_measure.param(ctx, "p2p.size_mib", DEFAULTS)) * _measure.MiB
    windows = int(_measure.param(ctx, "p2p.windows", DEFAULTS))
    copies = int(_measure.param(ctx, "p2p.copies_per_window", DEFAULTS))
    # 2 directions x (uni + bidir + bounce) x windows x copies at >= 5 GB/s, plus start-up.
    expected = 6 * (2 + windows * copies) * size / 5e9 + 20
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    results: list[CheckResult] = []
    for a, b in combinations(ctx.gpu_indices, 2):
        spec = PairSpec(a=a, b=b, size_bytes=size, windows=windows, copies_per_window=copies)
        outcome = _measure.run_kernel(
            ctx, f"p2p.pair{a}-{b}", [a, b], "p2p.pair_bandwidth", spec, expected_s=expected
        )
        if not outcome.ok:
            results.append(ctx.outcome_result("p2p.bandwidth", f"gpu{a}<->gpu{b}", outcome))
            continue
        value = outcome.value
        for key, direction in value["directions"].items():
            src, dst = (int(x) for x in key.split("->"))
            pairs[(src, dst)] = {
                **direction,
                "can_access_peer": value["can_access_peer"][key],
                "common": value,
            }
    peers = judge_against_peers(
        {f"gpu{s}->gpu{d}": fig["unidirectional_gbs"] for (s, d), fig in pairs.items()},
        float(ctx.threshold("p2p.peer_warn_fraction")),
        float(ctx.threshold("p2p.peer_fail_fraction")),
        min_peers=_measure.min_peers(ctx),
    )
    for (src, dst), fig in sorted(pairs.items()):
        results.append(_pair_result(ctx, src, dst, fig, pairs.get((dst, src)), peers[f"gpu{src}->gpu{dst}"]))
    return results


def _pair_result(
    ctx: AgentContext, src: int, dst: int, fig: dict, reverse: dict | None, peer: Verdict
) -> CheckResult:
    subject = f"gpu{src}->gpu{dst}"
    value = fig["unidirectional_gbs"]
    links = [pcie.expected_for(ctx, ctx.gpu(i)) for i in (src, dst)]
    known = [link for link in links if link.rate_gbs]
    slower = min(known, key=lambda link: link.rate_gbs or 0.0) if known else None
    rate = slower.rate_gbs if slower else None
    if rate:
        fraction = float(ctx.threshold("p2p.warn_fraction_of_link"))
        floor = _measure.measured(ctx, fig["unidirectional_windows_gbs"], fraction * rate, None, unit="GB/s")
        slot_unknown = any(not link.slot_known for link in known)
        if floor.status == WARN and slot_unknown and value >= fraction * rate / 2:
            # As for host<->device: without the slot's capability (a VM) a slot of half the rate
            # would explain the figure, so it is not judged against the card's own maximum.
            said = (
                f"{value:.1f} GB/s is below the floor for {slower.text()} but above it for a link of half "
                "that rate, and the slot's capability is not readable"
            )
            floor = not_applied(
                floor.threshold, codes.hint("PCIE_SLOT_UNKNOWN", said), code="PCIE_SLOT_UNKNOWN"
            )
    else:
        floor = not_applied(
            "no link-derived floor",
            "the cards' link speed and width are not readable",
            code="PCIE_LINK_UNREADABLE",
        )
    floor, peer = coded(floor, BELOW_FLOOR), coded(peer, BELOW_PEERS)
    verdicts = [floor, peer]
    hints = []
    if floor.applied and floor.status != PASS:
        hints.append(f"{floor.reason} ({slower.text() if slower else 'unknown'} link)")
    if peer.applied and peer.status != PASS:
        hints.append(codes.hint(BELOW_PEERS, peer.reason))
    ratio_limit = float(ctx.threshold("p2p.not_effective_ratio"))
    bounce = fig.get("host_bounce_gbs")
    if bounce:
        effective = value > ratio_limit * bounce
        threshold_text = f"> {ratio_limit:g} x host bounce"
        verdicts.append(Verdict(PASS if effective else WARN, threshold_text, code=NOT_EFFECTIVE))
        if not effective:
            said = (
                f"direct copies ({value:.1f} GB/s) are no faster than bouncing through host memory "
                f"({bounce:.1f} GB/s)"
            )
            hints.append(codes.hint(NOT_EFFECTIVE, said))
    asymmetry = None
    if reverse:
        asymmetry = value / reverse["unidirectional_gbs"]
        limit = float(ctx.threshold("p2p.asymmetry_warn"))
        ok = asymmetry >= limit
        verdicts.append(Verdict(PASS if ok else WARN, f"i->j / j->i >= {limit:g}", code=ASYMMETRIC))
        if not ok:
            hints.append(
                codes.hint(ASYMMETRIC, f"{subject} reaches {asymmetry:.0%} of the opposite direction")
            )
    if not fig["can_access_peer"]:
        verdicts.append(Verdict(WARN, "can_access_peer", code=NO_PEER_ACCESS))
        hints.append(codes.hint(NO_PEER_ACCESS, f"the runtime reports no peer access {subject}"))
    status, threshold, why, code = _measure.combine(*verdicts)
    found = sorted({v.code for v in verdicts if v.applied and v.status not in (PASS, SKIP) and v.code})
    if not floor.applied and status in (INCONCLUSIVE, SKIP) and why:
        hints.append(why)
    if not fig["verified"]:
        status, code = FAIL, CORRUPTION
        found.insert(0, CORRUPTION)
        hints.insert(0, codes.hint(CORRUPTION, "a peer copy delivered wrong data"))
    common = fig["common"]
    return CheckResult(
        id="p2p.bandwidth",
        subject=subject,
        status=status,
        metric="p2p_unidirectional_bandwidth",
        value=_measure.rounded(value),
        unit="GB/s",
        threshold=threshold,
        hint="; ".join(hints),
        evidence={
            "unidirectional_windows_gbs": [round(v, 2) for v in fig["unidirectional_windows_gbs"]],
            "bidirectional_gbs_per_direction": _measure.rounded(fig.get("bidirectional_gbs")),
            "bidirectional_aggregate_gbs": _measure.rounded(common.get("bidirectional_aggregate_gbs")),
            "host_bounce_gbs": _measure.rounded(bounce),
            "p2p_over_bounce": round(value / bounce, 3) if bounce else None,
            "asymmetry": _measure.rounded(asymmetry, 3),
            "can_access_peer": fig["can_access_peer"],
            "raw_link_gbs": _measure.rounded(rate),
            "verify": {k: v for k, v in fig.items() if k.startswith("verify_")},
            WRONG_DATA: not fig["verified"],
            "size_bytes": common["size_bytes"],
            "windows": common["windows"],
            "copies_per_window": common["copies_per_window"],
            "method": common["method"],
            "versions": common["versions"],
            "codes": found,
        },
        code=code,
    )
