"""PCIe errors under load: the AER counters of every GPU and of every port up to its root port,
read before and after each GPU step of the run (AgentContext._journaled), judged per GPU by
r9700ctl/agent/aer_counters.py: any new uncorrectable error FAILs, new corrected errors WARN, more than
aer.correctable_fail_per_min per minute of a step FAIL; each names the step, the device, its role
on the path (GPU, the card's own switch, the slot's root port) and the physical slot.

It runs last (after P2P), so it sees every step of the run; at config level nothing loads a GPU.
"""

from __future__ import annotations

from functools import partial

from r9700ctl.agent import aer_counters as aer
from r9700ctl.agent.checks import register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import PASS, SEVERITY, SKIP, CheckResult

THRESHOLDS = ("aer.correctable_fail_per_min",)


@register(id="aer", levels=from_level("quick"), order=200, runs_last=True, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    fail_per_min = float(ctx.threshold("aer.correctable_fail_per_min"))
    steps = ctx.aer_steps
    results = []
    for gpu in ctx.gpus:
        subject, address = f"gpu{gpu.index}", gpu.pci_address
        threshold = (
            "no new nonfatal/fatal error; new correctable errors WARN, more than "
            f"{fail_per_min:g}/min of a step FAIL ({ctx.threshold_text('aer.correctable_fail_per_min')})"
        )
        verdict_for = partial(
            CheckResult, id="aer", subject=subject, metric="new_errors", threshold=threshold
        )
        if not address or not steps or all(address in s["unreadable"] for s in steps):
            why = (
                "no GPU step ran"
                if not steps
                else "no AER counters on its path (AER off, or a kernel before 4.19)"
            )
            code = "NOT_APPLICABLE" if not steps else "AER_UNAVAILABLE"
            results.append(verdict_for(status=SKIP, hint=why, code=code))
            continue
        roles, slot = aer.roles(ctx.root, address), aer.slot_name(ctx.root, address)
        worst, total, per_step = None, 0, []
        for step in steps:
            mine = [i for i in step["increases"] if i.gpu == address]
            verdict = aer.judge(
                address, mine, step["seconds"], roles, slot, fail_per_min, f" during {step['step']}"
            )
            total += sum(i.delta for i in mine)
            if mine:
                per_step.append({"step": step["step"], "seconds": step["seconds"], "summary": verdict.summary,
                                 "increases": [i.to_dict() for i in mine]})  # fmt: skip
            if worst is None or SEVERITY[verdict.status] > SEVERITY[worst.status]:
                worst = verdict
        assert worst is not None
        evidence = {"path": aer.describe_path(ctx.root, address), "slot": slot, "steps": len(steps),
                    "with_errors": per_step}  # fmt: skip
        hint = "" if worst.status == PASS else f"{worst.summary}; {worst.hint}"
        results.append(
            verdict_for(
                status=worst.status, value=total, unit="errors", hint=hint, evidence=evidence, code=worst.code
            )
        )
    return results
