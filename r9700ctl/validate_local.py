"""`r9700ctl validate --local` as a use case: the agent on this machine, then the history.

1. The options the agent cannot judge are checked first (bad input, exit 64, nothing runs):
   --duration without burnin, --baseline beside --compare, the history's names and file.
2. Where the agent runs (r9700ctl.runtime.choose): the provisioned ROCm image, or this Python.
3. The agent is staged and run as a child (r9700ctl.launch), its lines handed to callbacks; an
   operator's --thresholds YAML is converted to the JSON it reads.
4. Its report (r9700ctl.validate/1) gains where it ran, then the history compares, records and
   saves (r9700ctl.history.runs.HistoryPlan); a comparison's results join the report.
The outcome carries the report and the exit code; the caller renders them. Nothing is printed.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.atomic import write_json
from r9700ctl.agent.result import CheckResult
from r9700ctl.errors import BadInput
from r9700ctl.history.runs import HistoryPlan

Lines = Callable[[str], None]


@dataclass
class LocalRequest:
    """What to run: the agent's options (paths absolute or ~), the runtime and the history plan."""

    level: str = "config"
    duration: float | None = None
    report_path: Path | None = None  # the user's --json file; None: a scratch file
    expected_gpus: int | None = None
    expect_scaling: str | None = None
    only: str | None = None
    skip: str | None = None
    gpus: str | None = None
    journal_dir: Path | None = None
    thresholds: Path | None = None
    baseline: Path | None = None
    allow_busy: bool = False
    runtime: str = "auto"
    verbose: bool = False  # the agent's per-step lines on stderr
    history: HistoryPlan = field(default_factory=HistoryPlan)

    def check(self) -> None:
        if self.duration is not None and self.level != "burnin":
            raise BadInput(what="--duration applies to --level burnin only", hint="add --level burnin")
        if self.baseline is not None and self.history.compare_with:
            raise BadInput(
                what="--baseline FILE and --compare NAME both name a baseline", hint="give one of them"
            )
        self.history.check()


@dataclass
class LocalOutcome:
    """The agent's report as the run left it (None: the agent wrote none) and the exit code."""

    report: dict[str, Any] | None
    exit_code: int
    comparisons: dict[str, list[CheckResult]] = field(default_factory=dict)


# The agent's command-line flag of each request field that carries a value.
AGENT_FLAGS = {
    "level": "--level",
    "duration": "--duration",
    "report_path": "--json",
    "expected_gpus": "--expected-gpus",
    "expect_scaling": "--expect-scaling",
    "only": "--only",
    "skip": "--skip",
    "gpus": "--gpus",
    "journal_dir": "--journal-dir",
    "thresholds": "--thresholds",
    "baseline": "--baseline",
}


# Options of the agent alone: with an INVENTORY they are refused (the fleet's runs take none).
LOCAL_ONLY = ("duration", "expect_scaling", "only", "skip", "gpus", "journal_dir", "thresholds", "baseline")


def validate_local(request: LocalRequest, on_stdout: Lines, on_stderr: Lines) -> LocalOutcome:
    """Run the agent here with `request`; its output lines go to the callbacks as they come."""
    from r9700ctl import launch
    from r9700ctl.runtime import choose

    request.check()
    runtime = choose(request.runtime, request.level)
    with tempfile.TemporaryDirectory(prefix="r9700ctl-validate-") as scratch:
        given = request.report_path
        staged = _staged(request, Path(scratch))
        if runtime.name == "container":
            on_stderr(f"r9700ctl: the agent runs in {runtime.image} (r9700-run)")
        code = launch.run_agent(
            agent_args(staged),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            runtime=runtime,
            mounts=mounted_dirs(staged),
        )
        assert staged.report_path is not None
        report = read_report(staged.report_path)
        if report is None:
            return LocalOutcome(report=None, exit_code=code)
        report.update(runtime.to_dict())  # which runtime and image judged this node
        write_json(staged.report_path, report)
        comparisons, code = _history(report, request.history, code, source=str(given or ""))
        if comparisons:
            write_json(staged.report_path, report)  # the --json file carries the comparison too
    return LocalOutcome(report=report, exit_code=code, comparisons=comparisons)


def _staged(request: LocalRequest, scratch: Path) -> LocalRequest:
    """The request as the agent gets it: a report path always (the history and the formats read
    the report), an operator's thresholds YAML as the JSON the agent reads."""
    from dataclasses import replace

    from r9700ctl.agentpack import convert_thresholds

    staged = replace(request, report_path=request.report_path or scratch / "report.json")
    if request.thresholds is not None:
        staged.thresholds = convert_thresholds(request.thresholds, scratch / "thresholds.json")
    return staged


def agent_args(request: LocalRequest) -> list[str]:
    """The agent's command line; paths made absolute (it runs in its staged directory)."""
    args: list[str] = []
    for key, flag in AGENT_FLAGS.items():
        value = getattr(request, key)
        if isinstance(value, Path):
            value = value.expanduser().resolve()
        if value is not None:
            args += [flag, str(value)]
    if request.allow_busy:
        args.append("--allow-busy")
    if request.verbose:
        args.append("--verbose")
    return args


def mounted_dirs(request: LocalRequest) -> list[Path]:
    """The directories of every path the agent reads or writes (mounted when it runs in the image)."""
    dirs = [
        value.expanduser().resolve().parent
        for value in (request.report_path, request.thresholds, request.baseline)
        if isinstance(value, Path)
    ]
    if request.journal_dir is not None:
        dirs.append(request.journal_dir.expanduser().resolve())
    return dirs


def read_report(path: Path) -> dict[str, Any] | None:
    """The agent's JSON report, or None when it wrote none (bad option, no GPU ...)."""
    try:
        report = json.loads(path.expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _history(
    report: dict[str, Any], plan: HistoryPlan, code: int, source: str
) -> tuple[dict[str, list[CheckResult]], int]:
    """Compare with the history (results join the report), record, save; the exit code after."""
    if report.get("status") == "ERROR" and not report.get("gpus"):
        # The agent could not run (exit 3) and found no GPU: it measured nothing. The history
        # holds validations to compare and trend; a run of nothing would only become the
        # "previous run" that the next --compare last finds nothing in, and a row in
        # `r9700ctl history` that looks like a broken node. So it is not recorded, and the
        # user is told so (a node that lost its GPUs in a fleet run is still recorded there,
        # beside the nodes that ran).
        if plan.enabled:
            plan.notes.append("history: not recorded: the agent found no GPU and measured nothing")
        return {}, code
    node = str(report.get("node") or "localhost")
    comparisons = plan.after_run({node: report}, lambda: report, scope="local", source=source)
    return comparisons, int(report["exit_code"]) if comparisons else code
