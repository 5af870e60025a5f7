"""C2 PCIe link training: is each card's link at the speed and width both of its ends can do?

The rule is r9700ctl/agent/rules/link.py (the bundle diagnosis judges lspci's link registers with
the same one); here it reads each card's link in sysfs at idle. Measurement checks call
`link_result` with under_load=True after re-reading the link while the GPU is busy, and derive
their floors from `expected_for` (host<->device, P2P).
"""

from __future__ import annotations

from r9700ctl.agent import codes, sysfs
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import INCONCLUSIVE, PASS, CheckResult
from r9700ctl.agent.rules.link import ExpectedLink, expected_link, judge_link, raw_link_gbs

__all__ = [
    "THRESHOLDS",
    "ExpectedLink",
    "expected_for",
    "expected_link",
    "judge_link",
    "link_result",
    "raw_link_gbs",
]

THRESHOLDS = ("pcie.expect_speed_gts", "pcie.expect_width", "pcie.idle_downtrain_status")


def expected_for(ctx: AgentContext, gpu: GpuInfo) -> ExpectedLink:
    """The link `gpu`'s link-derived floors (host<->device, P2P) are computed from."""
    return expected_link(gpu.link, ctx.threshold("pcie.expect_speed_gts"), ctx.threshold("pcie.expect_width"))


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
        threshold=verdict.threshold,
        hint=verdict.reason if verdict.status == PASS else codes.hint(verdict.code, verdict.reason),
        evidence={
            **link.to_dict(),
            "gen": gen,
            "under_load": under_load,
            "expected": want.text(),
            "slot_capability_known": want.slot_known,
        },
        code=verdict.code,
    )


@register(id="pcie", levels=from_level("config"), needs_gpu=False, order=13, thresholds=THRESHOLDS)
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
                    code="PCIE_LINK_UNREADABLE",
                )
            )
            continue
        link = sysfs.read_link(ctx.root, gpu.pci_address)
        results.append(link_result(ctx, gpu.index, link, under_load=False))
    return results
