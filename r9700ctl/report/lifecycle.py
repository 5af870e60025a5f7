"""Plain text of upgrade, rollback and uninstall: the plan per node and the closing summary."""

from __future__ import annotations

from r9700ctl.lifecycle.rollout import FAILED, LOST, UNCHANGED, UNTOUCHED, UPGRADED
from r9700ctl.lifecycle.service import LifecycleOutcome


def plan_lines(outcome: LifecycleOutcome) -> list[str]:
    options = outcome.options
    gate = f"validate --level {options.gate_level}"
    head = f"plan ({options.mode}, batches of {outcome.batch_size}, each node gated by {gate}):"
    if options.mode == "kernel-upgrade" and options.check:
        return [head, *(f"  {plan.kernel_line()}" for plan in outcome.plans)]
    if options.mode == "kernel-upgrade":
        what = (
            "the newest kernel of its line, its headers, the amdgpu DKMS build (dkms status before a reboot)"
        )
        return [head, *(f"  {plan.host}: {what}" for plan in outcome.plans)]
    return [head, *(f"  {plan.line()}" for plan in outcome.plans)]


def summary_lines(outcome: LifecycleOutcome) -> list[str]:
    """Which nodes are upgraded, which failed and why, which were not touched."""
    lines = []
    rollout = outcome.rollout
    if rollout is None:
        if outcome.note:
            lines.append(outcome.note)
        return lines
    verb = {"rollback": "rolled back", "kernel-upgrade": "kernel upgraded"}.get(
        outcome.options.mode, "upgraded"
    )
    groups = [
        (verb, UPGRADED),
        ("already there", UNCHANGED),
        ("failed", FAILED),
        ("lost (unreachable)", LOST),
        ("untouched", UNTOUCHED),
    ]
    lines.append("summary:")
    for label, status in groups:
        nodes = rollout.of(status)
        if not nodes and status not in (UPGRADED, FAILED, UNTOUCHED):
            continue
        if status in (FAILED, LOST) and nodes:
            lines.append(f"  {label}:")
            lines += [f"    {o.host}: {o.why}" for o in nodes]
        else:
            names = ", ".join(o.host for o in nodes) or "none"
            lines.append(f"  {label}: {names}")
    for outcome_node in rollout.outcomes:
        if outcome_node.reboot_pending and outcome_node.status == UPGRADED:
            reasons = "; ".join(outcome_node.reboot_pending)
            lines.append(f"  reboot required: {outcome_node.host} ({reasons})")
    if rollout.stopped:
        lines.append(f"rollout {rollout.stopped}")
    return lines
