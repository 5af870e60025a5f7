"""C2 PCIe link training: is each card's link at the speed and width it and its slot can do?

Read at the card's upstream port (Radeon cards have an on-card switch: the GPU function's own
link is internal), compared with the lower of the card's and the slot port's maximum, and with
the model's expected link (thresholds.yaml pcie.expect_*; R9700: Gen5 x16).
- the slot or card maximum below the expected link: WARN "platform-limited";
- current below maximum: idle links downtrain (PCIe power management), so at config level this is
  `pcie.idle_downtrain_status` (PASS with a note by default); under load it is a FAIL.
`judge_link(...)` is the one rule; measurement checks call it with under_load=True after
re-reading the link (sysfs.read_link) while a copy is running.
"""

from __future__ import annotations

from r9700ctl.agent import sysfs
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import Verdict
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult

DOWNTRAIN_HINT = (
    "link trained at {cur}, below the {maxi} it can do: reseat the card, check the riser and cables, "
    "the slot's bifurcation and the BIOS 'PCIe speed' setting (slot port {slot})"
)
PLATFORM_HINT = (
    "the platform caps this card at {maxi}, below the expected {expected}: the slot ({slot}) or the card "
    "reports a lower maximum (Gen4 board, x8 slot, riser or bifurcation); host and P2P bandwidth "
    "scale with it"
)


def _link_text(speed: float | None, width: int | None) -> str:
    return sysfs.Link(cur_speed_gts=speed, cur_width=width).text()


def judge_link(
    link: sysfs.Link,
    expect_speed_gts: float | None,
    expect_width: int | None,
    *,
    under_load: bool,
    idle_status: str = PASS,
) -> Verdict:
    """The verdict on one link; `reason` is the hint when not PASS (or a note)."""
    cap_speed, cap_width = link.effective_max_speed_gts, link.effective_max_width
    if link.cur_speed_gts is None or link.cur_width is None or cap_speed is None or cap_width is None:
        return Verdict(SKIP, "current == maximum", "link speed/width not readable in sysfs")
    want_speed = expect_speed_gts or cap_speed
    want_width = expect_width or cap_width
    threshold = f">= {_link_text(want_speed, want_width)}"
    cur, maxi = _link_text(link.cur_speed_gts, link.cur_width), _link_text(cap_speed, cap_width)
    slot = link.slot_port or "?"
    below_max = link.cur_speed_gts < cap_speed or link.cur_width < cap_width
    if below_max and under_load:
        return Verdict(FAIL, threshold, DOWNTRAIN_HINT.format(cur=cur, maxi=maxi, slot=slot))
    if cap_speed < want_speed or cap_width < want_width:
        return Verdict(
            WARN,
            threshold,
            PLATFORM_HINT.format(maxi=maxi, expected=_link_text(want_speed, want_width), slot=slot),
        )
    if below_max:
        note = (
            f"idle: link at {cur} of {maxi}; idle GPUs downtrain, the quick level re-reads it under load"
            if idle_status == PASS
            else DOWNTRAIN_HINT.format(cur=cur, maxi=maxi, slot=slot) + " (read at idle)"
        )
        return Verdict(idle_status, threshold, note)
    return Verdict(PASS, threshold, "")


def link_result(
    ctx: AgentContext, gpu_index: int, link: sysfs.Link, *, under_load: bool, check_id: str = "pcie.link"
) -> CheckResult:
    """A CheckResult for one GPU's link (used here at idle, and by measurement checks under load)."""
    verdict = judge_link(
        link,
        ctx.threshold("pcie.expect_speed_gts"),
        ctx.threshold("pcie.expect_width"),
        under_load=under_load,
        idle_status=str(ctx.threshold("pcie.idle_downtrain_status", PASS)),
    )
    gen = sysfs.pcie_gen(link.cur_speed_gts)
    return CheckResult(
        id=check_id,
        subject=f"gpu{gpu_index}",
        status=verdict.status,
        metric="link_under_load" if under_load else "link",
        value=link.text() if link.cur_speed_gts else None,
        unit="",
        threshold=verdict.threshold,
        hint=verdict.reason,
        evidence={**link.to_dict(), "gen": gen, "under_load": under_load},
    )


@register(
    id="pcie", family="pcie", levels={"config", "quick", "standard", "burnin"}, needs_gpu=False, order=13
)
def run(ctx: AgentContext) -> list[CheckResult]:
    results = []
    for gpu in ctx.gpus:
        if not gpu.pci_address:
            results.append(
                CheckResult(
                    "pcie.link", gpu.subject, SKIP, threshold="current == maximum", hint="PCI address unknown"
                )
            )
            continue
        link = sysfs.read_link(ctx.root, gpu.pci_address)
        results.append(link_result(ctx, gpu.index, link, under_load=False))
    return results
