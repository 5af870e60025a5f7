"""Batches, gates and the stop rule of an upgrade or a rollback, independent of how nodes are moved.

The controller drives the batches: per batch it runs the drain hook per node, moves the nodes
(quiesce, the provisioning roles at the target release, reboot where the driver changed),
gates each moved node on validation, and returns a node (resume hook, monitoring timer) only
when its validation passed. After a batch with failures the rollout stops once the failed
share of all nodes exceeds --max-fail-percent (default 0: the first failure stops it); the
nodes of later batches are left untouched. The steps come in as callables, so this module
is tested without Ansible.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from r9700ctl.agent.result import CheckResult
from r9700ctl.errors import BadInput
from r9700ctl.lifecycle.plan import MOVE, NOTHING, REFUSED, UNREACHABLE, NodePlan

UPGRADED = "upgraded"  # moved and validated
UNCHANGED = "unchanged"  # already at the target
FAILED = "failed"
LOST = "lost"  # unreachable mid-way: its state is unknown
UNTOUCHED = "untouched"
HOOK_TIMEOUT_S = 600


@dataclass
class StepResult:
    """What a step said about one node: ok, or why not (and whether it was lost)."""

    ok: bool
    why: str = ""
    lost: bool = False
    reboot_pending: list[str] = field(default_factory=list)
    verdict: CheckResult | None = None  # the gate's verdict on the node (the one verdict model)


Move = Callable[[list[str], str], dict[str, StepResult]]  # hosts, release -> per host
Gate = Callable[[list[str]], dict[str, StepResult]]
Resume = Callable[[list[str]], dict[str, StepResult]]
Progress = Callable[[str], None]


@dataclass
class NodeOutcome:
    host: str
    status: str
    plan: NodePlan
    why: str = ""
    batch: int = 0
    reboot_pending: list[str] = field(default_factory=list)
    gate: CheckResult | None = None  # the validation gate's verdict, once the node was gated

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["plan"] = self.plan.to_dict()
        document["gate"] = self.gate.to_dict() if self.gate is not None else None
        return document


@dataclass
class Rollout:
    outcomes: list[NodeOutcome]
    stopped: str = ""  # why the rollout stopped before the last batch, if it did
    batches: int = 0

    def of(self, status: str) -> list[NodeOutcome]:
        return [o for o in self.outcomes if o.status == status]


# A {word} in a hook: a placeholder. Shell's ${VAR} is not one, nor awk's '{print $1}'.
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
PLACEHOLDERS = ("node",)


@dataclass
class Hooks:
    """Commands run on the controller per node; {node} is replaced by the node's name."""

    drain: str | None = None
    resume: str | None = None

    def check(self) -> None:
        """Bad input before any host is touched: an empty hook, or one naming a placeholder that
        does not exist (`{host}` would reach the shell as the literal text on every node)."""
        for flag, template in (("--drain-cmd", self.drain), ("--resume-cmd", self.resume)):
            if template is None:
                continue
            if not template.strip():
                raise BadInput(what=f"{flag} is empty", hint=f"give a command, or leave {flag} out")
            unknown = [name for name in _PLACEHOLDER.findall(template) if name not in PLACEHOLDERS]
            if unknown:
                raise BadInput(
                    what=f"{flag} {template!r} names {{{unknown[0]}}}, which is no placeholder",
                    hint="the one placeholder is {node} (the node's inventory name); write ${VAR} for a "
                    "shell variable",
                )

    def run(self, which: str, host: str) -> StepResult:
        template = self.drain if which == "drain" else self.resume
        if not template:
            return StepResult(ok=True)
        command = template.replace("{node}", shlex.quote(host))
        try:
            done = subprocess.run(
                command, shell=True, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return StepResult(ok=False, why=f"{which} hook ran past {HOOK_TIMEOUT_S} s: {command}")
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            return StepResult(
                ok=False, why=f"{which} hook failed (exit {done.returncode}): {said[-1] if said else command}"
            )
        return StepResult(ok=True)


def roll_out(
    plans: list[NodePlan],
    size: int,
    *,
    move: Move,
    gate: Gate,
    resume: Resume,
    hooks: Hooks | None = None,
    before: Callable[[list[str]], None] | None = None,
    max_fail_percent: float = 0.0,
    progress: Progress = lambda _: None,
) -> Rollout:
    """Work through the nodes to move, `size` at a time, in the plans' order.

    before: called with each batch's drained nodes before they move (the gate's baseline).
    """
    hooks = hooks or Hooks()
    outcomes = {p.host: _initial(p) for p in plans}
    todo = [p for p in plans if p.action == MOVE]
    failed = sum(1 for o in outcomes.values() if o.status in (FAILED, LOST))
    rollout = Rollout(outcomes=list(outcomes.values()))
    for number, start in enumerate(range(0, len(todo), size), start=1):
        batch = todo[start : start + size]
        rollout.batches = number
        progress(f"batch {number}: {', '.join(p.host for p in batch)}")
        moving = []
        for plan in batch:
            outcomes[plan.host].batch = number
            drained = hooks.run("drain", plan.host)
            if drained.ok:
                moving.append(plan)
            else:
                _fail(outcomes[plan.host], drained.why)
        if before is not None and moving:
            before([p.host for p in moving])  # e.g. the validation the gate compares with
        for release in dict.fromkeys(p.to_release for p in moving):
            hosts = [p.host for p in moving if p.to_release == release]
            results = move(hosts, release)
            moved = []
            for host in hosts:
                result = results.get(host) or StepResult(ok=False, why="no result for this node")
                outcomes[host].reboot_pending = result.reboot_pending or _unrebooted(outcomes[host].plan)
                if result.ok:
                    moved.append(host)
                else:
                    _fail(outcomes[host], result.why, lost=result.lost)
            if moved:
                for host, result in gate(moved).items():
                    outcomes[host].gate = result.verdict
                    if not result.ok:
                        _fail(outcomes[host], result.why, lost=result.lost)
            passed = [h for h in moved if outcomes[h].status == UNTOUCHED]
            if passed:
                for host, result in resume(passed).items():
                    if not result.ok:
                        _fail(outcomes[host], f"validated, but could not be returned: {result.why}")
            for host in passed:
                if outcomes[host].status == UNTOUCHED:
                    returned = hooks.run("resume", host)
                    if returned.ok:
                        outcomes[host].status = UPGRADED
                    else:
                        _fail(outcomes[host], f"validated, but {returned.why}")
        failed = sum(1 for o in outcomes.values() if o.status in (FAILED, LOST))
        lost = [o.host for o in outcomes.values() if o.status == LOST]
        if lost:
            rollout.stopped = f"lost {', '.join(lost)} mid-way (unreachable): stopped"
        elif failed and failed * 100.0 / len(plans) > max_fail_percent:
            share = f"more than --max-fail-percent {max_fail_percent:g}"
            rollout.stopped = f"{failed} of {len(plans)} node(s) failed, {share}: stopped"
        if rollout.stopped and start + size < len(todo):
            progress(rollout.stopped)
            break
    return rollout


def _unrebooted(plan: NodePlan) -> list[str]:
    """The plan's reboot that this node cannot do itself (no init system, r9700_reboot false)."""
    if plan.driver_changes and plan.reboot.startswith("needed"):
        return [f"amdgpu {plan.from_driver or '?'} -> {plan.to_driver}: {plan.reboot}"]
    return []


def _initial(plan: NodePlan) -> NodeOutcome:
    if plan.action == NOTHING:
        return NodeOutcome(plan.host, UNCHANGED, plan, why=f"already at ROCm {plan.to_release}")
    if plan.action == REFUSED:
        return NodeOutcome(plan.host, FAILED, plan, why=plan.why)
    if plan.action == UNREACHABLE:
        return NodeOutcome(plan.host, LOST, plan, why=plan.why)
    return NodeOutcome(plan.host, UNTOUCHED, plan)


def _fail(outcome: NodeOutcome, why: str, lost: bool = False) -> None:
    if outcome.status in (FAILED, LOST):
        return  # the first reason is the one that counts
    outcome.status = LOST if lost else FAILED
    outcome.why = why
