"""Did a card's PCIe link train at what both its ends support (docs/validation.md C2)?

Read at the card's upstream port (Radeon cards have an on-card switch: the GPU function's own
link is internal). The link a card is judged against is what BOTH ends support: the lower of
the card's maximum (its upstream port's max_link_speed/width) and the slot's (the LnkCap of the
port above the card). So an R9700 (Gen5 x16) in a Gen4 server is judged against Gen4 x16, with
the note "the platform limits this card to Gen4 x16" (25-28 GB/s host<->device is healthy
there), and host<->device and P2P floors derive from that same link (`expected_link`).
- trained below what both ends support, under load: FAIL (a reseat, riser or BIOS issue);
- the same at idle: `idle_status` (thresholds pcie.idle_downtrain_status; idle links downtrain:
  PASS with a note);
- the card's own maximum below its model's link (thresholds pcie.expect_*): WARN;
- the slot's capability unreadable (no port above the card, as in VMs): trained at the card's
  maximum PASSes (both ends evidently support it); trained below it under load is INCONCLUSIVE
  (a slower slot cannot be told from a downtrained link);
- the link itself unreadable: INCONCLUSIVE.
Link registers: Linux Documentation/ABI/testing/sysfs-bus-pci (current/max_link_speed, width);
lspci's LnkSta/LnkCap are the same registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from r9700ctl.agent.judge import Verdict
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN
from r9700ctl.agent.sysfs import Link

DOWNTRAINED = "PCIE_LINK_DOWNTRAINED"
SLOT_UNKNOWN = "PCIE_SLOT_UNKNOWN"
CARD_BELOW_MODEL = "PCIE_CARD_BELOW_MODEL"
UNREADABLE = "PCIE_LINK_UNREADABLE"
# Notes on a PASS (a bundle shows them as notes): an idle link below its maximum, a slot that
# limits the card.
IDLE = "PCIE_LINK_IDLE"
PLATFORM_LIMITS = "PCIE_PLATFORM_LIMITS_LINK"

PLATFORM_NOTE = (
    "the platform limits this card to {want} (slot port {slot} supports {slot_link}; the card {card})"
)


def link_text(speed: float | None, width: int | None) -> str:
    return Link(cur_speed_gts=speed, cur_width=width).text()


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
        return link_text(self.speed_gts, self.width) if self.known else "unknown link"


def expected_link(link: Link, model_speed: float | None, model_width: int | None) -> ExpectedLink:
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
            want=link_text(speed, width),
            slot=link.slot_port or "?",
            slot_link=link_text(slot_speed, slot_width),
            card=link_text(card_speed, card_width),
        )
    return ExpectedLink(speed, width, slot_known=True, note=note)


def judge_link(
    link: Link,
    expect_speed_gts: float | None,
    expect_width: int | None,
    *,
    under_load: bool,
    idle_status: str,
) -> Verdict:
    """The verdict on one link; `reason` says what was found (the hint's first half, or a note on a
    PASS, whose `code` then names the note)."""
    want = expected_link(link, expect_speed_gts, expect_width)
    if link.cur_speed_gts is None or link.cur_width is None or not want.known:
        return Verdict(
            INCONCLUSIVE,
            "current == what both ends support",
            "link speed/width not readable",
            code=UNREADABLE,
        )
    threshold = f">= {want.text()} (what both the card and its slot support)"
    cur = link_text(link.cur_speed_gts, link.cur_width)
    below = link.cur_speed_gts < want.speed_gts or link.cur_width < want.width  # type: ignore[operator]
    card = link_text(link.max_speed_gts, link.max_width)
    if below and under_load:
        if not want.slot_known:
            reason = (
                f"link trained at {cur}, below the card's {card}; the slot's capability is not readable (no "
                "port above the card, as in a VM)"
            )
            return Verdict(INCONCLUSIVE, threshold, reason, code=SLOT_UNKNOWN)
        reason = (
            f"link trained at {cur}, below the {want.text()} both the card and its slot support "
            f"(slot port {link.slot_port})"
        )
        return Verdict(FAIL, threshold, reason, code=DOWNTRAINED)
    model_speed = expect_speed_gts or link.max_speed_gts
    model_width = expect_width or link.max_width
    if link.max_speed_gts < model_speed or link.max_width < model_width:  # type: ignore[operator]
        model = link_text(model_speed, model_width)
        reason = f"the card reports a maximum of {card}, below its model's {model}"
        return Verdict(WARN, threshold, reason, code=CARD_BELOW_MODEL)
    if below:
        if idle_status == PASS:
            note = f"idle: link at {cur} of {want.text()}; idle GPUs downtrain, quick re-reads it under load"
            return Verdict(PASS, threshold, note, code=IDLE)
        reason = (
            f"link trained at {cur}, below the {want.text()} both the card and its slot support "
            f"(slot port {link.slot_port or '?'}; read at idle)"
        )
        return Verdict(idle_status, threshold, reason, code=DOWNTRAINED)
    return Verdict(PASS, threshold, want.note, code=PLATFORM_LIMITS if want.note else "")
