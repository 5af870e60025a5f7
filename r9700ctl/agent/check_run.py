"""One agent run: journal, discovery, thresholds, the level's checks, the report. Never prints.

`run(options, progress)` returns a RunOutcome (report dict, exit code, and the one line to show
when the run could not happen). Bad options raise AgentExit(64); an unusable journal raises
AgentExit(3). A check that raises becomes one ERROR result; the run goes on.
"""

from __future__ import annotations

import re
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from r9700ctl.agent import (
    baseline,
    burnin,
    busy,
    causes,
    checks,
    codes,
    environment,
    gpus,
    levels,
    report,
    watchdog,
)
from r9700ctl.agent.checks._measure import name_known_issues
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.datafiles import DataFileError, gpu_models, load_data
from r9700ctl.agent.journal import (
    Interrupted,
    Journal,
    JournalError,
    default_directory,
    fallback_directory,
    read_boot_id,
    usable,
)
from r9700ctl.agent.result import ERROR, FAIL, INCONCLUSIVE, SKIP, WARN, WRONG_DATA, CheckResult
from r9700ctl.agent.thresholds import Thresholds, resolve

EXIT_BAD_INPUT = 64
EXIT_CANNOT_RUN = 3
SHARED_NOTE = "measured while shared with {holders}"
P2P_WORDS = ("p2p", "peer", "collective", "allreduce", "all_reduce", "scaling", "stability")


class AgentExit(Exception):
    """Stop before or instead of a run: one line for the user, and the exit code."""

    def __init__(self, line: str, exit_code: int) -> None:
        super().__init__(line)
        self.line = line
        self.exit_code = exit_code


@dataclass
class Options:
    level: str = "config"
    duration_s: float | None = None
    json_path: Path | None = None
    expected_gpus: int | None = None
    expect_scaling: dict[int, float] = field(default_factory=dict)
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    journal_dir: Path | None = None
    gpus: list[int] | None = None
    thresholds_path: Path | None = None
    root: Path = Path("/")
    baseline_path: Path | None = None
    allow_busy: bool = False


@dataclass
class RunOutcome:
    report: dict[str, Any]
    exit_code: int
    one_line: str = ""
    journal_note: str = ""


def previous_run_results(previous: Interrupted | None) -> list[CheckResult]:
    """What the journal says about the previous run: FAIL after a host reset, WARN after a kill."""
    if previous is None:
        return []
    step = previous.last_step
    evidence: dict[str, Any] = {
        "run_id": previous.run_id,
        "level": previous.level,
        "started": previous.started,
        "previous_boot_id": previous.boot_id,
        "open_steps": previous.open_steps,
    }
    verdict = partial(
        CheckResult,
        id="node.previous_run_interrupted",
        subject="node",
        metric="unfinished_step",
        evidence=evidence,
    )
    if step is None:
        what = "rebooted between steps" if previous.rebooted else "was stopped between steps"
        said = f"the previous {previous.level} run ({previous.started}) {what}"
        hint = f"{said}; rerun the level to get complete figures"
        return [
            verdict(status=WARN, threshold="the previous run finished", hint=hint, code="RUN_INTERRUPTED")
        ]
    name = str(step.get("step", "?"))
    gpu_list = ",".join(str(g) for g in step.get("gpus", [])) or "-"
    where = f"step {name} on GPU(s) {gpu_list}"
    if previous.rebooted:
        p2p_like = any(word in name.lower() for word in P2P_WORDS)
        code = "HOST_HANG_DURING_P2P" if p2p_like else "HOST_RESET_DURING_STEP"
        said = (
            f"host hang during {where}: known R9700/RCCL issue with PCIe P2P (ROCm/rocm-systems#11348)"
            if p2p_like
            else f"the node died or was reset while {where} ran"
        )
        threshold = "the previous run finished (or the host survived it)"
        return [verdict(status=FAIL, value=name, threshold=threshold, hint=codes.hint(code, said), code=code)]
    hint = (
        f"the previous agent was killed during {where} (same boot): a watchdog or a person stopped it; "
        "rerun the level"
    )
    return [
        verdict(
            status=WARN, value=name, threshold="the previous run finished", hint=hint, code="RUN_INTERRUPTED"
        )
    ]


def _journal_directory(requested: Path | None) -> Path:
    if requested is not None:
        return requested
    default = default_directory()
    return default if usable(default) else fallback_directory()


def _probe(ctx_params: dict[str, Any], journal: Journal, progress: Callable[[str], None]) -> dict[str, Any]:
    if not ctx_params.get("discovery.torch_probe", True):
        return {}
    timeout = float(ctx_params["discovery.torch_timeout_s"])
    seq = journal.step_start("discovery.torch", [], timeout)
    progress("probing torch for GPUs")
    outcome = watchdog.run_in_child("discovery.torch", gpus.probe_torch, (), timeout_s=timeout)
    journal.step_end(seq, "discovery.torch", outcome.status, outcome.duration_s)
    if outcome.ok:
        return outcome.value
    return {
        "status": outcome.status,
        "error": outcome.error.strip().splitlines()[-1] if outcome.error else "",
        "importable": outcome.status != watchdog.ERROR,
    }


def _select(found: list[gpus.GpuInfo], wanted: list[int] | None) -> list[gpus.GpuInfo]:
    if wanted is None:
        return list(found)
    by_index = {g.index: g for g in found}
    unknown = [i for i in wanted if i not in by_index]
    if unknown:
        have = ",".join(str(i) for i in sorted(by_index)) or "none"
        raise AgentExit(
            f"--gpus: no GPU {','.join(map(str, unknown))} on this node (GPUs: {have})", EXIT_BAD_INPUT
        )
    return [by_index[i] for i in wanted]


def _unusable_reason(level: str, discovery: gpus.Discovery, selected: list[gpus.GpuInfo]) -> str:
    """Why the GPU levels cannot run here ("" when they can)."""
    if level not in levels.GPU_LEVELS:
        return ""
    probe = discovery.torch
    if not discovery.gpus and not discovery.torch_devices:
        return (
            "no GPU found: no AMD or NVIDIA display device on the PCI bus and torch sees none "
            "(run on a GPU node; `--level config` checks the node without one)"
        )
    if probe.get("status") == watchdog.TIMEOUT:
        return (
            f"torch did not answer within its timeout while opening the GPUs ({probe.get('error')}): "
            "check dmesg for amdgpu errors"
        )
    if not probe.get("importable", False):
        reason = probe.get("error") or "torch is not importable"
        return (
            f"PyTorch is not importable ({reason}): install PyTorch for ROCm or run the agent in the "
            "rocm/pytorch container (`--level config` runs without it)"
        )
    if not discovery.torch_devices:
        return (
            f"torch {probe.get('torch')} sees no GPU although {len(discovery.gpus)} are on the PCI bus: "
            "check /dev/kfd access (render group), HIP/CUDA_VISIBLE_DEVICES and that this torch build "
            "matches the driver (ROCm vs CUDA)"
        )
    if not selected:
        return "no GPU selected"
    return ""


def _run_check(spec: checks.CheckSpec, ctx: AgentContext) -> list[CheckResult]:
    """The check's results; a check that raises or returns something else is one ERROR (a bug in
    the check: the other checks still run)."""
    crashed = partial(
        CheckResult,
        id=f"{spec.id}.crashed",
        subject="node",
        status=ERROR,
        metric="exception",
        code="CHECK_CRASHED",
    )
    try:
        produced = spec.fn(ctx)
    except Exception as exc:
        return [
            crashed(
                value=f"{type(exc).__name__}: {exc}",
                threshold="the check runs to the end",
                hint="a bug in the check; the evidence holds the traceback (report it); the other checks ran",
                evidence={"traceback": traceback.format_exc(limit=12)},
            )
        ]
    if not isinstance(produced, list) or not all(isinstance(r, CheckResult) for r in produced):
        return [
            crashed(
                value="bad return value",
                threshold="the check returns a list of CheckResult",
                hint="a bug in the check",
                evidence={"returned": repr(produced)[:500]},
            )
        ]
    return produced


def _measure_round(
    specs: list[checks.CheckSpec], ctx: AgentContext, params: dict[str, Any], say: Callable[[str], None]
) -> list[CheckResult]:
    """Every GPU check once, in plan order (P2P last), with a cooldown between heavy phases."""
    results: list[CheckResult] = []
    for position, spec in enumerate(specs):
        if position and params.get("cooldown_s"):
            time.sleep(float(params["cooldown_s"]))
        say(f"check {spec.id}")
        results.extend(_run_check(spec, ctx))
    return results


def _burn_in(
    specs: list[checks.CheckSpec], ctx: AgentContext, params: dict[str, Any], say: Callable[[str], None]
) -> list[CheckResult]:
    """Rounds of the GPU checks until the duration has passed (the last round may end after it)."""
    duration = float(params["burnin.duration_s"])
    started = time.monotonic()
    rounds: list[list[CheckResult]] = []
    while not rounds or time.monotonic() - started < duration:
        say(f"burn-in round {len(rounds) + 1} ({time.monotonic() - started:.0f} of {duration:.0f} s)")
        rounds.append(_measure_round(specs, ctx, params, say))
    return burnin.merge_rounds(
        rounds,
        warn_drop=float(ctx.threshold("burnin.drift_warn")),
        fail_drop=float(ctx.threshold("burnin.drift_fail")),
    )


# Thresholds the runner itself reads (burn-in drift, the busy scan); checks declare their own.
RUNNER_KEYS = {"burnin.drift_warn", "burnin.drift_fail", "busy.ignored_commands"}


def _busy_scan(ctx: AgentContext) -> busy.Scan:
    return busy.scan(
        ctx.root,
        ctx.gpus,
        ignored_commands=ctx.threshold("busy.ignored_commands") or [],
        tool_timeout_s=ctx.tool_timeout_s,
    )


_GPU_IN_SUBJECT = re.compile(r"gpu(\d+)")


def judge_busy(
    selected: list[gpus.GpuInfo],
    before: busy.Scan,
    after: busy.Scan,
    figures: list[CheckResult],
    allow_busy: bool,
) -> tuple[list[CheckResult], list[str]]:
    """One `gpu.busy` result per shared GPU, and the measured figures of shared GPUs made
    INCONCLUSIVE (unless allow_busy: then judged, with a note). Returns (busy results, banners).

    A figure belongs to the GPUs its subject names ("gpu1", "gpu0->gpu2"); a subject naming none
    ("node", "p2p_on", "n=4 p2p_on") covers every GPU of the run.
    """
    holders: dict[int, dict[int, busy.Holder]] = {}
    for scan in (before, after):
        for index, found in scan.by_gpu().items():
            for holder in found:
                holders.setdefault(index, {})[holder.pid] = holder
    results, banners = [], []
    for gpu in selected:
        mine = list(holders.get(gpu.index, {}).values())
        if not mine:
            continue
        text = ", ".join(h.text() for h in mine)
        results.append(
            CheckResult(
                id="gpu.busy",
                subject=gpu.subject,
                status=WARN if allow_busy else INCONCLUSIVE,
                metric="other_processes",
                value=len(mine),
                unit="processes",
                threshold="no other process computes on the GPU while it is measured",
                hint=SHARED_NOTE.format(holders=text)
                if allow_busy
                else codes.hint("GPU_BUSY", f"GPU busy: {text}: its figures below are INCONCLUSIVE"),
                code="GPU_SHARED" if allow_busy else "GPU_BUSY",
                evidence={
                    "holders": [h.to_dict() for h in mine],
                    "before": before.to_dict(),
                    "after": after.to_dict(),
                },
            )
        )
        banners.append(
            f"GPU busy: {gpu.subject} is used by {text}: its figures are "
            + ("judged anyway (--allow-busy)" if allow_busy else "INCONCLUSIVE (--allow-busy judges them)")
        )
    if not holders:
        return results, banners
    everyone = sorted(holders)
    for result in figures:
        if result.status in (SKIP, ERROR, INCONCLUSIVE) and not allow_busy:
            continue
        named = [int(i) for i in _GPU_IN_SUBJECT.findall(result.subject)] or everyone
        shared = [h for i in named for h in holders.get(i, {}).values()]
        if not shared:
            continue
        text = ", ".join(sorted({h.text() for h in shared}))
        if allow_busy or result.evidence.get(WRONG_DATA):
            # Wrong data is a fault whatever shares the GPU: it keeps its FAIL, with the note.
            note = SHARED_NOTE.format(holders=text) + (" (--allow-busy)" if allow_busy else "")
            result.hint = "; ".join(x for x in (result.hint, note) if x)
            continue
        result.evidence["if_judged"] = {"status": result.status, "hint": result.hint, "code": result.code}
        result.status, result.code = INCONCLUSIVE, "GPU_BUSY"
        result.hint = codes.hint("GPU_BUSY", f"GPU busy: {text}: its figures are INCONCLUSIVE")
    return results, banners


def validate_names(options: Options) -> None:
    """Unknown --only/--skip words are bad input (exit 64), found before anything runs."""
    known = checks.known_names()
    for flag, words in (("--only", options.only), ("--skip", options.skip)):
        unknown = [w for w in words if w not in known]
        if unknown:
            raise AgentExit(
                f"{flag}: unknown check {', '.join(unknown)} (known: {', '.join(sorted(known))})",
                EXIT_BAD_INPUT,
            )
    if options.duration_s is not None and options.level != "burnin":
        raise AgentExit("--duration applies to --level burnin only", EXIT_BAD_INPUT)
    if options.thresholds_path is not None and not options.thresholds_path.is_file():
        raise AgentExit(f"--thresholds: {options.thresholds_path} is not a file", EXIT_BAD_INPUT)


def load_baseline(options: Options) -> dict[str, Any] | None:
    """The --baseline report, checked before anything runs (a bad file is bad input: exit 64)."""
    if options.baseline_path is None:
        return None
    try:
        return baseline.load(options.baseline_path)
    except baseline.BaselineError as exc:
        raise AgentExit(str(exc), EXIT_BAD_INPUT) from None


def run(options: Options, progress: Callable[[str], None] | None = None) -> RunOutcome:
    say = progress or (lambda text: None)
    import_failures = checks.load_all()
    validate_names(options)
    try:
        for name in ("manifest", "thresholds"):
            load_data(name)
    except DataFileError as exc:
        raise AgentExit(f"data files: {exc}", EXIT_CANNOT_RUN) from None
    previous_report = load_baseline(options)
    params = levels.params_for(options.level, options.duration_s)
    if options.json_path is not None:
        report.remove_stale(options.json_path)
    started_wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    started = time.monotonic()
    journal = Journal(_journal_directory(options.journal_dir), read_boot_id(options.root))
    try:
        previous = journal.open(options.level)
    except JournalError as exc:
        raise AgentExit(f"{exc} (pass --journal-dir DIR, or run as root)", EXIT_CANNOT_RUN) from exc
    status = "aborted"
    try:
        outcome = _run_opened(
            options, params, journal, previous, import_failures, say, started_wall, started, previous_report
        )
        status = outcome.report["status"]
        return outcome
    finally:
        journal.close(status)


def _run_opened(
    options: Options,
    params: dict[str, Any],
    journal: Journal,
    previous: Interrupted | None,
    import_failures: dict[str, str],
    say: Callable[[str], None],
    started_wall: str,
    started: float,
    previous_report: dict[str, Any] | None = None,
) -> RunOutcome:
    """One run with its journal open, step by step: discover the GPUs, plan the level's checks
    with their thresholds, measure, annotate the results (baseline, causes, known issues), report."""
    results = previous_run_results(previous) + _import_failures(import_failures)
    found = _discover(options, params, journal, say, previous_report)
    planned, thresholds = _plan(options, found.selected, previous_report)
    ctx = found.context(options, params, journal, thresholds, say)
    unusable = _unusable_reason(options.level, ctx.discovery, ctx.gpus)
    banners = _measure(options, ctx, planned, unusable, results, say)
    _annotate(options, ctx, previous_report, unusable, results, say)
    doc = _report(options, ctx, results, banners, unusable, previous, previous_report, started_wall, started)
    return RunOutcome(doc, int(doc["exit_code"]), unusable)


def _import_failures(import_failures: dict[str, str]) -> list[CheckResult]:
    """A check module that failed to import: one ERROR naming it (its checks did not run)."""
    return [
        CheckResult(
            id=f"{module.rsplit('.', 1)[-1]}.import",
            subject="node",
            status=ERROR,
            metric="exception",
            value=text.strip().splitlines()[-1],
            threshold="check module imports",
            hint="a check module failed to import (bug or missing file); its checks did not run",
            evidence={"traceback": text},
            code="CHECK_IMPORT_FAILED",
        )
        for module, text in import_failures.items()
    ]


@dataclass
class _Found:
    """What discovery found on the node: the tools' probe, every GPU, the --gpus selection."""

    probe: dict[str, Any]
    discovery: gpus.Discovery
    selected: list[gpus.GpuInfo]

    def context(
        self,
        options: Options,
        params: dict[str, Any],
        journal: Journal,
        thresholds: Thresholds,
        say: Callable[[str], None],
    ) -> AgentContext:
        """The context the checks share: the selected GPUs, their thresholds, the environment."""
        pci_ids = {g.pci_id for g in self.selected}
        return AgentContext(
            level=options.level,
            gpus=self.selected,
            thresholds=thresholds,
            params=params,
            root=options.root,
            expected_gpus=options.expected_gpus,
            expect_scaling=dict(options.expect_scaling),
            environment=environment.capture(options.root, self.probe),
            model_spec=gpu_models().get(pci_ids.pop(), {}) if len(pci_ids) == 1 else {},
            journal=journal,
            discovery=self.discovery,
            state_dir=journal.directory,
            tool_timeout_s=float(params["tools.timeout_s"]),
            on_progress=say,
        )


def _discover(
    options: Options,
    params: dict[str, Any],
    journal: Journal,
    say: Callable[[str], None],
    previous_report: dict[str, Any] | None,
) -> _Found:
    """The node's GPUs and the --gpus selection (a --baseline of other GPU models is bad input)."""
    probe = _probe(params, journal, say)
    say("discovering GPUs")
    discovery = gpus.discover(options.root, probe, tool_timeout_s=float(params["tools.timeout_s"]))
    selected = _select(discovery.gpus, options.gpus)
    if previous_report is not None:
        mismatch = baseline.model_mismatch(
            previous_report, [g.model for g in selected], where=f"--baseline {options.baseline_path}"
        )
        if mismatch:
            raise AgentExit(mismatch, EXIT_BAD_INPUT)
    return _Found(probe, discovery, selected)


def _plan(
    options: Options, selected: list[gpus.GpuInfo], previous_report: dict[str, Any] | None
) -> tuple[list[checks.CheckSpec], Thresholds]:
    """The level's checks (--only, --skip) and the thresholds they need for these GPUs' models."""
    planned = checks.plan(options.level, options.only, options.skip)
    try:
        thresholds = resolve(
            [g.model for g in selected],
            [g.vendor for g in selected],
            overrides=options.thresholds_path,
            required=checks.threshold_keys(planned)
            | RUNNER_KEYS
            | (baseline.REQUIRED_KEYS if previous_report is not None else set()),
        )
    except DataFileError as exc:
        code = EXIT_BAD_INPUT if options.thresholds_path else EXIT_CANNOT_RUN
        raise AgentExit(f"thresholds: {exc}", code) from exc
    return planned, thresholds


def _measure(
    options: Options,
    ctx: AgentContext,
    planned: list[checks.CheckSpec],
    unusable: str,
    results: list[CheckResult],
    say: Callable[[str], None],
) -> list[str]:
    """The static checks, then (with a usable GPU) the GPU checks between two scans for other
    processes on the GPUs; their results join `results`. Returns the busy banners."""
    for spec in (s for s in planned if not s.needs_gpu):
        say(f"check {spec.id}")
        results.extend(_run_check(spec, ctx))
    measured = [] if unusable else [s for s in planned if s.needs_gpu]
    if not measured:
        return []
    say("looking for other processes on the GPUs")
    before = _busy_scan(ctx)
    if options.level == "burnin":
        figures = _burn_in(measured, ctx, ctx.params, say)
    else:
        figures = _measure_round(measured, ctx, ctx.params, say)
    after = _busy_scan(ctx)
    busy_results, banners = judge_busy(ctx.gpus, before, after, figures, options.allow_busy)
    results.extend(busy_results)
    results.extend(figures)
    return banners


def _annotate(
    options: Options,
    ctx: AgentContext,
    previous_report: dict[str, Any] | None,
    unusable: str,
    results: list[CheckResult],
    say: Callable[[str], None],
) -> None:
    """What the results mean beyond their own figures: the --baseline comparison, the likely
    causes, the known issues they are evidence of, and why a measuring level could not run."""
    if previous_report is not None:
        say(f"comparing with the baseline {options.baseline_path}")
        results.extend(
            baseline.baseline_results(
                previous_report,
                [r.to_dict() for r in results],
                ctx.environment,
                baseline.config_from_thresholds(ctx.thresholds.values),
                source_path=str(options.baseline_path),
                level=options.level,
                node=socket.gethostname(),
            )
        )
    causes.apply(
        results,
        vbios={g.subject: g.vbios for g in ctx.gpus},
        numa={g.subject: g.numa_node for g in ctx.gpus},
    )
    # The manifest's known issues name the results that are evidence of them (data/manifest.yaml).
    name_known_issues(ctx, results)
    if unusable:
        results.append(
            CheckResult(
                id="node.gpu",
                subject="node",
                status=ERROR,
                metric="usable_gpus",
                value=0,
                unit="GPUs",
                threshold=f"level {options.level} needs a GPU torch can use",
                hint=unusable,
                evidence={"torch": {k: v for k, v in ctx.discovery.torch.items() if k != "devices"}},
                code="NO_USABLE_GPU",
            )
        )


def _report(
    options: Options,
    ctx: AgentContext,
    results: list[CheckResult],
    banners: list[str],
    unusable: str,
    previous: Interrupted | None,
    previous_report: dict[str, Any] | None,
    started_wall: str,
    started: float,
) -> dict[str, Any]:
    """The report document (r9700ctl.validate/1), written to --json when asked."""
    discovery = ctx.discovery
    doc = report.build(
        node=socket.gethostname(),
        level=options.level,
        started=started_wall,
        duration_s=time.monotonic() - started,
        environment=ctx.environment,
        gpus=[g.to_dict() for g in ctx.gpus],
        results=results,
        model=ctx.thresholds.section,
        model_reason=ctx.thresholds.reason,
        journal=str(ctx.journal.path) if ctx.journal else "",
        steps=ctx.steps,
        notes=discovery.notes
        + [f"{tool}: {state}" for tool, state in discovery.tools.items() if state != "ok"],
        banners=banners,
    )
    if unusable:
        # The measurement level could not run at all: that is the answer (exit 3), whatever
        # the static checks found (their results are in the report).
        doc["status"], doc["exit_code"] = ERROR, EXIT_CANNOT_RUN
    doc["integrated_gpus"] = [g.to_dict() for g in discovery.ignored]
    doc["previous_run"] = (
        None if previous is None else {"run_id": previous.run_id, "rebooted": previous.rebooted}
    )
    doc["baseline"] = (
        None
        if previous_report is None
        else {
            "path": str(options.baseline_path),
            "node": previous_report.get("node"),
            "level": previous_report.get("level"),
            "started": previous_report.get("started"),
        }
    )
    if options.json_path is not None:
        report.write_json(options.json_path, doc)
    return doc
