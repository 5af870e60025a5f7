"""Shared glue of the checks, the measurement checks above all (hostbw, p2p, memory, compute,
collective, scaling, stability): per-level defaults, timeouts, running a kernel, the windows rule
and the common results (a node without a GPU, or with one where two are needed).

The kernels (r9700ctl.agent.kernels) measure; the checks only choose parameters, run the
kernels through ctx.run_step / ctx.run_ranks, and judge. Module name starts with "_": the
registry does not load it as a check.
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import levels
from r9700ctl.agent.context import AgentContext, StepOutcome
from r9700ctl.agent.judge import Verdict, judge_measured, not_applied, worse_of
from r9700ctl.agent.result import PASS, SKIP, CheckResult

MULTI_GPU_SKIP = "needs >= 2 GPUs"
NOT_APPLICABLE = "NOT_APPLICABLE"  # the check does not apply to this node (one GPU, no such figure)
MiB = 1 << 20
KERNELS = "r9700ctl.agent.kernels"


def call_kernel(module: str, function: str, *args: Any) -> dict[str, Any]:
    """Run kernels.<module>.<function>(*args); the target of ctx.run_step.

    The kernels import torch; importing them here, in the child, keeps torch out of the agent's
    own process (the agent imports torch only in children, and runs without it at config level).
    """
    import importlib

    return getattr(importlib.import_module(f"{KERNELS}.{module}"), function)(*args)


def call_rank_kernel(rank: int, world_size: int, module: str, function: str, *args: Any) -> dict[str, Any]:
    """Run kernels.<module>.<function>(rank, world_size, *args); the target of ctx.run_ranks."""
    import importlib

    return getattr(importlib.import_module(f"{KERNELS}.{module}"), function)(rank, world_size, *args)


def run_kernel(
    ctx: AgentContext, step_id: str, gpus: list[int], kernel: str, spec: Any, *, expected_s: float
) -> StepOutcome:
    """kernels.<module>.<function> (`kernel` names both, "gemm.gemm_under_load") on `spec` in a
    journaled child on `gpus`, with the watchdog's timeout for a step expected to take `expected_s`."""
    module, function = kernel.split(".")
    return ctx.run_step(
        step_id, gpus, call_kernel, module, function, spec, timeout_s=timeout(ctx, expected_s)
    )


def param(ctx: AgentContext, key: str, defaults: dict[str, dict[str, Any]]) -> Any:
    """ctx.param(key), falling back to this check's default for the level (then for `standard`)."""
    table = defaults.get(ctx.level) or defaults["standard"]
    return ctx.param(key, table.get(key, defaults["standard"].get(key)))


def timeout(ctx: AgentContext, expected_s: float) -> float:
    """Watchdog timeout for a step expected to take `expected_s` (3x, >= 30 s; levels.py)."""
    return levels.step_timeout(ctx.params, expected_s) if ctx.params else max(30.0, 3 * expected_s)


JUDGING = (
    "judging.min_windows",
    "judging.min_repeats",
    "judging.max_window_cv",
    "judging.min_peers",
    "judging.min_samples",
)


def min_peers(ctx: AgentContext) -> int:
    """How many subjects a node-median comparison needs (thresholds judging.min_peers)."""
    return int(ctx.threshold("judging.min_peers"))


def measured(
    ctx: AgentContext,
    windows: list[float],
    warn: float | None,
    fail: float | None,
    *,
    unit: str,
    higher_is_better: bool = True,
) -> Verdict:
    """judge_measured with the windows rules of thresholds `judging.*`."""
    return judge_measured(
        windows,
        warn,
        fail,
        min_windows=int(ctx.threshold("judging.min_windows")),
        max_cv=float(ctx.threshold("judging.max_window_cv")),
        unit=unit,
        higher_is_better=higher_is_better,
    )


def no_gpu(check_id: str, threshold: str, hint: str = "no GPU found") -> list[CheckResult]:
    """The SKIP a check gives on a node where discovery found no GPU to judge."""
    return [
        CheckResult(id=check_id, subject="node", status=SKIP, threshold=threshold, hint=hint, code="NO_GPU")
    ]


def skip_single_gpu(ctx: AgentContext, check_id: str) -> list[CheckResult] | None:
    """The SKIP result a multi-GPU check gives on a node with fewer than two GPUs."""
    if len(ctx.gpus) >= 2:
        return None
    return [
        CheckResult(
            id=check_id,
            subject="node",
            status=SKIP,
            hint=MULTI_GPU_SKIP,
            evidence={"gpus": len(ctx.gpus)},
            code=NOT_APPLICABLE,
        )
    ]


def combine(own: Verdict, *others: Verdict) -> tuple[str, str, str, str]:
    """Status, threshold text, hint and reason code of one figure judged by several rules.

    `own` is the figure's own, absolute rule (a floor from the link, the datasheet, the spec);
    `others` compare it with something relative (its siblings, a host bounce, the reverse
    direction). The worst applied verdict wins, except that the relative rules cannot make a
    figure PASS on their own: when `own` could not apply (unknown link, model without a limit),
    four GPUs equally at 2 GB/s are alike, not healthy, so the result keeps own's INCONCLUSIVE
    (or SKIP for a figure reported only) and only a WARN or FAIL of the others counts. No rule
    applied: INCONCLUSIVE (or SKIP) with every rule's reason. The code is the worst verdict's (give
    each rule's WARN and FAIL their code with judge.coded first).
    """
    verdicts = (own, *others)
    worst = worse_of(*verdicts)
    if not own.applied and worst.applied and worst.status == PASS:
        alike = "; ".join(v.reason for v in others if v.applied and v.reason)
        reason = own.reason + (f" (relative rules pass: {alike})" if alike else "")
        worst = not_applied(own.threshold, reason, own.status, code=own.code)
    threshold = "; ".join(v.threshold for v in verdicts if v.applied) or worst.threshold
    hints = [v.reason for v in verdicts if v.status != PASS and v.reason and v.applied]
    if not worst.applied:
        hints = [worst.reason]
    return worst.status, threshold, "; ".join(hints), worst.code


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)


def _known_issues(ctx: AgentContext) -> tuple[list[Any], Any]:
    """The manifest's known issues ([] when the packed manifest is missing) and the node as they see it."""
    from r9700ctl.agent import datafiles
    from r9700ctl.agent import known_issue_match as known_issues

    try:
        issues = known_issues.load(datafiles.load_data("manifest"))
    except datafiles.DataFileError:
        issues = []
    node = known_issues.NodeView(
        gpus=tuple((g.pci_id, g.gfx_target) for g in ctx.gpus),
        rocm=ctx.environment.get("rocm") if isinstance(ctx.environment, dict) else None,
        env=(ctx.environment.get("variables") if isinstance(ctx.environment, dict) else None),
    )
    return issues, node


def known_issue_hints(ctx: AgentContext, check_id: str, text: str, code: str = "") -> list[str]:
    """The hints of the manifest's known issues that apply to this node and name this result
    (detection.agent: the check id, its reason codes and a pattern its text must show, each where
    given), r9700ctl/agent/known_issue_match.py."""
    from r9700ctl.agent import known_issue_match as known_issues

    issues, node = _known_issues(ctx)
    return known_issues.hints_for(issues, node, check_id, text, [code] if code else [])


def name_known_issues(ctx: AgentContext, results: list[CheckResult]) -> None:
    """Every result that did not pass names the known issues of this node it is evidence of
    (a collective that timed out on two gfx1201 GPUs with ROCm 7.2.x: r9700-rccl-72-hang)."""
    from r9700ctl.agent import known_issue_match as known_issues

    issues, node = _known_issues(ctx)
    known_issues.annotate(results, issues, node)
