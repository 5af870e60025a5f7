"""C2 PCIe link training: is each card's link at the speed and width both of its ends can do?

Read at the card's upstream port (Radeon cards have an on-card switch: the GPU function's own
link is internal). The link a card is judged against is what BOTH ends support: the lower of
the card's maximum (its upstream port's max_link_speed/width) and the slot's (the LnkCap of the
port above the card). So an R9700 (Gen5 x16) in a Gen4 server is judged against Gen4 x16, with
the note "the platform limits this card to Gen4 x16" (25-28 GB/s host<->device is healthy
there), and host<->device and P2P floors derive from that same link (`expected_link`).
- trained below what both ends support, under load: FAIL (a reseat, riser or BIOS issue);
- the same at idle: `pcie.idle_downtrain_status` (idle links downtrain: PASS with a note);
- the card's own maximum below its model's link (thresholds pcie.expect_*): WARN;
- the slot's capability unreadable (no port above the card, as in VMs): trained at the card's
  maximum PASSes (both ends evidently support it); trained below it under load is INCONCLUSIVE
  (a slower slot cannot be told from a downtrained link);
- the link itself unreadable: INCONCLUSIVE.
`judge_link(...)` is the one rule; measurement checks call `link_result` with under_load=True
after re-reading the link while the GPU is busy.
"""

from __future__ import annotations

from dataclasses import dataclass

from r9700ctl.agent import sysfs
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.agent.judge import Verdict
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN, CheckResult

THRESHOLDS = ("pcie.expect_speed_gts", "pcie.expect_width", "pcie.idle_downtrain_status")
DOWNTRAIN_HINT = (
    "link trained at {cur}, below the {want} both the card and its slot support: reseat the card, check "
    "the riser and cables, the slot's bifurcation and the BIOS 'PCIe speed' setting (slot port {slot})"
)
UNKNOWN_SLOT_HINT = (
    "link trained at {cur}, below the card's {card}; the slot's capability is not readable (no port above "
    "the card in sysfs, as in a VM), so a slower slot cannot be told from a downtrained link"
)
CARD_BELOW_MODEL_HINT = (
    "the card reports a maximum of {card}, below its model's {model}: a different SKU, a retimer or riser "
    "limiting the link, or a firmware strap; host and P2P bandwidth scale with it"
)
PLATFORM_NOTE = (
    "the platform limits this card to {want} (slot port {slot} supports {slot_link}; the card {card})"
)


def _text(speed: float | None, width: int | None) -> str:
    return sysfs.Link(cur_speed_gts=speed, cur_width=width).text()


def raw_link_gbs(speed_gts: float | None, width: int | None) -> float | None:
    """Raw PCIe bandwidth per direction in GB/s: GT/s x lanes x encoding / 8 (Gen5 x16: 63.0).

    128b/130b encoding from Gen3 on, 8b/10b for Gen1-2 (2.5 and 5 GT/s).
    """
    if not speed_gts or not width:
        return None
    encoding = 128 / 130 if speed_gts >= 8 else 8 / 10
    return speed_gts * width * encoding / 8


@dataclass(frozen=True)
class ExpectedLink:
    """The link a card should train at: what both ends support. `note` says when the platform,
    not the card, sets it; `slot_known` is False when the slot's capability was not readable."""

    speed_gts: float | None
    width: int | None
    slot_known: bool
    note: str = ""

    @property
    def known(self) -> bool:
        return bool(self.speed_gts and self.width)

    @property
    def rate_gbs(self) -> float | None:
        return raw_link_gbs(self.speed_gts, self.width)

    def text(self) -> str:
        return _text(self.speed_gts, self.width) if self.known else "unknown link"


def expected_link(link: sysfs.Link, model_speed: float | None, model_width: int | None) -> ExpectedLink:
    """min(card's maximum, slot's maximum); the card's maximum alone when the slot is unreadable."""
    card_speed, card_width = link.max_speed_gts, link.max_width
    if not card_speed or not card_width:
        return ExpectedLink(None, None, slot_known=False)
    slot_speed, slot_width = link.slot_max_speed_gts, link.slot_max_width
    if not slot_speed or not slot_width:
        return ExpectedLink(card_speed, card_width, slot_known=False)
    speed, width = min(card_speed, slot_speed), min(card_width, slot_width)
    note = ""
    ceiling_speed, ceiling_width = model_speed or card_speed, model_width or card_width
    if (slot_speed < min(card_speed, ceiling_speed)) or (slot_width < min(card_width, ceiling_width)):
        note = PLATFORM_NOTE.format(
            want=_text(speed, width),
            slot=link.slot_port or "?",
            slot_link=_text(slot_speed, slot_width),
            card=_text(card_speed, card_width),
        )
    return ExpectedLink(speed, width, slot_known=True, note=note)


def expected_for(ctx: AgentContext, gpu: GpuInfo) -> ExpectedLink:
    """The link `gpu`'s link-derived floors (host<->device, P2P) are computed from."""
    return expected_link(gpu.link, ctx.threshold("pcie.expect_speed_gts"), ctx.threshold("pcie.expect_width"))


def judge_link(
    link: sysfs.Link,
    expect_speed_gts: float | None,
    expect_width: int | None,
    *,
    under_load: bool,
    idle_status: str,
) -> Verdict:
    """The verdict on one link; `reason` is the hint when not PASS (or a note)."""
    want = expected_link(link, expect_speed_gts, expect_width)
    if link.cur_speed_gts is None or link.cur_width is None or not want.known:
        return Verdict(
            INCONCLUSIVE, "current == what both ends support", "link speed/width not readable in sysfs"
        )
    threshold = f">= {want.text()} (what both the card and its slot support)"
    cur = _text(link.cur_speed_gts, link.cur_width)
    below = link.cur_speed_gts < want.speed_gts or link.cur_width < want.width  # type: ignore[operator]
    card = _text(link.max_speed_gts, link.max_width)
    if below and under_load:
        if not want.slot_known:
            return Verdict(INCONCLUSIVE, threshold, UNKNOWN_SLOT_HINT.format(cur=cur, card=card))
        return Verdict(FAIL, threshold, DOWNTRAIN_HINT.format(cur=cur, want=want.text(), slot=link.slot_port))
    model_speed = expect_speed_gts or link.max_speed_gts
    model_width = expect_width or link.max_width
    if link.max_speed_gts < model_speed or link.max_width < model_width:  # type: ignore[operator]
        return Verdict(
            WARN, threshold, CARD_BELOW_MODEL_HINT.format(card=card, model=_text(model_speed, model_width))
        )
    if below:
        note = (
            f"idle: link at {cur} of {want.text()}; idle GPUs downtrain, quick re-reads it under load"
            if idle_status == PASS
            else DOWNTRAIN_HINT.format(cur=cur, want=want.text(), slot=link.slot_port or "?")
            + " (read at idle)"
        )
        return Verdict(idle_status, threshold, note)
    return Verdict(PASS, threshold, want.note)


def link_result(
    ctx: AgentContext, gpu_index: int, link: sysfs.Link, *, under_load: bool, check_id: str = "pcie.link"
) -> CheckResult:
    """A CheckResult for one GPU's link (used here at idle, and by measurement checks under load)."""
    verdict = judge_link(
        link,
        ctx.threshold("pcie.expect_speed_gts"),
        ctx.threshold("pcie.expect_width"),
        under_load=under_load,
        idle_status=str(ctx.threshold("pcie.idle_downtrain_status")),
    )
    want = expected_link(link, ctx.threshold("pcie.expect_speed_gts"), ctx.threshold("pcie.expect_width"))
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
        evidence={
            **link.to_dict(),
            "gen": gen,
            "under_load": under_load,
            "expected": want.text(),
            "slot_capability_known": want.slot_known,
        },
    )


@register(
    id="pcie",
    family="pcie",
    levels=from_level("config"),
    needs_gpu=False,
    order=13,
    thresholds=THRESHOLDS,
)
def run(ctx: AgentContext) -> list[CheckResult]:
    results = []
    for gpu in ctx.gpus:
        if not gpu.pci_address:
            results.append(
                CheckResult(
                    id="pcie.link",
                    subject=gpu.subject,
                    status=INCONCLUSIVE,
                    threshold="current == what both ends support",
                    hint="PCI address unknown: the link cannot be read",
                )
            )
            continue
        link = sysfs.read_link(ctx.root, gpu.pci_address)
        results.append(link_result(ctx, gpu.index, link, under_load=False))
    return results
