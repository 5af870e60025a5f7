"""Cause hints that need more than one check, as pure rules (docs/validation.md, "Cause hints").

Each rule looks at the whole result list and, where its signature matches, appends a "likely
cause" to the hint of the result that shows the symptom (and records it in
evidence["causes"]), naming the other result and its reason code (whose record says what to do).
Statuses and codes are never changed here: the checks judge, the rules explain.
The previous-run (host hang during P2P) rule lives in runner.previous_run_results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult

BAD = (WARN, FAIL)


def _add(result: CheckResult, cause: str) -> None:
    causes = result.evidence.setdefault("causes", [])
    if cause in causes:
        return
    causes.append(cause)
    result.hint = f"{result.hint}; likely cause: {cause}" if result.hint else f"likely cause: {cause}"


def _family(results: Iterable[CheckResult], prefix: str) -> list[CheckResult]:
    return [r for r in results if r.id.startswith(prefix)]


def _pair_gpus(subject: str) -> list[str]:
    """'gpu2->gpu3' or 'gpu2-gpu3' -> ['gpu2', 'gpu3']."""
    return [part for part in subject.replace("->", "-").split("-") if part.startswith("gpu")]


def link_explains_low_host_bandwidth(results: list[CheckResult]) -> None:
    """C2 link below Gen5 x16 on GPU g, and C4 host bandwidth of g low -> the link is why."""
    bad_links = {r.subject: r for r in results if ".link" in r.id and r.status in BAD}
    for result in _family(results, "hostbw."):
        link = bad_links.get(result.subject)
        if link is not None and result.status in BAD and ".link" not in result.id:
            _add(
                result,
                f"link trained at {link.value} ({link.id}): reseat, riser, bifurcation or BIOS link speed",
            )


def codes_of(result: CheckResult) -> list[str]:
    """Every reason a result names: a check that judged a figure by several rules lists the code of
    each that did not pass in evidence["codes"] (the worst is its `code`)."""
    return list(result.evidence.get("codes") or ([result.code] if result.code else []))


def _p2p_ineffective(result: CheckResult) -> bool:
    """The p2p check's own verdict (thresholds p2p.not_effective_ratio), not a second copy of it."""
    return result.status in BAD and "P2P_NOT_EFFECTIVE" in codes_of(result)


def platform_explains_ineffective_p2p(results: list[CheckResult]) -> None:
    """C5 P2P no better than a host bounce, with C3 ACS redirect / translated IOMMU / small BAR."""
    acs = next((r for r in results if r.id == "platform.acs" and r.status in BAD), None)
    iommu = next((r for r in results if r.id == "platform.iommu" and r.value == "translated"), None)
    small_bar = {r.subject for r in results if r.id == "platform.bar" and r.status == FAIL}
    for result in _family(results, "p2p."):
        if not _p2p_ineffective(result):
            continue
        if acs is not None:
            bridges = ", ".join(sorted(acs.evidence.get("redirecting", {}))) or "a bridge"
            _add(result, f"ACS redirect on {bridges} (platform.acs: ACS_REDIRECT)")
        if iommu is not None:
            _add(result, "IOMMU not in passthrough (platform.iommu: IOMMU_TRANSLATED)")
        behind_small_bar = [g for g in _pair_gpus(result.subject) if g in small_bar]
        if behind_small_bar:
            gpus = ", ".join(behind_small_bar)
            _add(result, f"BAR smaller than VRAM on {gpus} (platform.bar: BAR_SMALLER_THAN_VRAM)")


def rccl_explains_low_collective(results: list[CheckResult]) -> None:
    """C5 P2P fine but C6 all-reduce low -> RCCL did not take the P2P path."""
    p2p = _family(results, "p2p.bandwidth")
    if not p2p or any(r.status in BAD for r in p2p):
        return
    for result in _family(results, "collective."):
        if result.status in BAD and result.metric != "timeout":
            _add(
                result,
                "RCCL not using P2P although pairs copy well: check NCCL_P2P_DISABLE and "
                "NCCL_P2P_LEVEL, RCCL's start-up warnings (NCCL_DEBUG=WARN), and whether the ring "
                "crosses sockets",
            )


def firmware_explains_outlier(results: list[CheckResult], vbios: dict[str, str | None]) -> None:
    """C1 VBIOS mismatch, and the outlier GPU is the one with the odd VBIOS -> firmware."""
    known = {s: v for s, v in vbios.items() if v}
    if len(set(known.values())) < 2:
        return
    majority = Counter(known.values()).most_common(1)[0][0]
    odd = {s: v for s, v in known.items() if v != majority}
    for result in results:
        if result.status in BAD and result.subject in odd and not result.id.startswith("inventory."):
            _add(
                result,
                f"firmware mismatch: {result.subject} runs VBIOS {odd[result.subject]}, "
                f"the others {majority}",
            )


def cross_socket_is_expected(results: list[CheckResult], numa: dict[str, int | None]) -> None:
    """Only pairs that cross sockets are low -> expected (socket interconnect), said as such."""
    pairs = [r for r in _family(results, "p2p.bandwidth") if len(_pair_gpus(r.subject)) == 2]
    if not pairs or len({n for n in numa.values() if n is not None}) < 2:
        return

    def crosses(result: CheckResult) -> bool:
        a, b = _pair_gpus(result.subject)
        return numa.get(a) is not None and numa.get(b) is not None and numa[a] != numa[b]

    low = [r for r in pairs if r.status in BAD]
    if low and all(crosses(r) for r in low) and all(r.status == PASS for r in pairs if not crosses(r)):
        for result in low:
            _add(result, "this pair crosses sockets (NUMA nodes differ): the socket interconnect bounds it")


RULES: tuple[Callable[[list[CheckResult]], None], ...] = (
    link_explains_low_host_bandwidth,
    platform_explains_ineffective_p2p,
    rccl_explains_low_collective,
)


def apply(
    results: list[CheckResult],
    vbios: dict[str, str | None] | None = None,
    numa: dict[str, int | None] | None = None,
) -> list[CheckResult]:
    """Run every rule over the results (in place) and return them."""
    for rule in RULES:
        rule(results)
    firmware_explains_outlier(results, vbios or {})
    cross_socket_is_expected(results, numa or {})
    return results
