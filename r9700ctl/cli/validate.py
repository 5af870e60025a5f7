"""`r9700ctl validate`: measure GPUs, links and nodes and judge the figures.

`--local` runs the on-node agent on this machine; with an INVENTORY it runs on every node
through Ansible (r9700ctl.validate) and the fleet is judged as a whole (r9700ctl.fleet).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import check_output_path, group_option, limit_option
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.history.runs import HistoryPlan
    from r9700ctl.validate import FleetReport, NodeOutcome

LEVELS = ("config", "quick", "standard", "burnin")


def _check_scaling(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    import argparse

    from r9700ctl.agent.__main__ import parse_scaling

    try:
        parse_scaling(value)
    except argparse.ArgumentTypeError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _check_gpus(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise click.BadParameter(f"expected distinct GPU indices like 0,1,3, got {value!r}")
    return ",".join(parts)


@click.command(
    epilog="""\b
Levels:
  config    static checks, no GPU load, < 10 s: inventory, driver, iommu, ACS, BAR, PCIe links
  quick     + host<->GPU and P2P bandwidth, memory, GEMM, all-reduce: <= 90 s on 4 GPUs
  standard  + size sweeps, 3 repeats (medians), P2P on/off, scaling 1..N: <= 15 min
  burnin    soak for --duration seconds: drift, tail latency, throttling
\b
Examples:
  r9700ctl validate inventory.ini                      # every node, config level, fleet verdict
  r9700ctl validate inventory.ini --level quick --expected-gpus 4 --json fleet.json
  r9700ctl validate inventory.ini --limit node03 --level standard -v
  r9700ctl validate --local --level config
  r9700ctl validate inventory.ini --level quick --runtime container   # in the provisioned image
  r9700ctl validate --local --level quick --expected-gpus 4 --json quick.json
  r9700ctl validate --local --level standard --expect-scaling 4:3.4,8:6.1
  r9700ctl validate --local --level standard --json now.json --baseline before.json
  r9700ctl validate inventory.ini --html fleet.html --junit fleet.xml
  r9700ctl validate --local --prom /var/lib/node_exporter/textfile/r9700.prom
\b
Exit codes: 0 all good, 1 warnings only, 2 something failed, 3 could not run
(no GPU, a step timed out; with INVENTORY also: a node unreachable or its agent wrote
no report), 4 inconclusive (nothing failed, but something could not be judged: a busy
GPU, a figure without a threshold, too few or too noisy windows), 64 bad option or
inventory (then no host was contacted)."""
)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--local", is_flag=True, help="Run the validation agent on this machine.")
@group_option
@limit_option
@click.option(
    "--level",
    type=click.Choice(LEVELS),
    default="config",
    show_default=True,
    envvar="R9700CTL_VALIDATE_LEVEL",
    help="How deep to go (see Levels below). [env var: R9700CTL_VALIDATE_LEVEL]",
)
@click.option(
    "--duration", type=click.FloatRange(min=1), metavar="S", help="burnin only: soak length in seconds."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write the report as JSON: schema r9700ctl.validate/1 with --local, "
    "r9700ctl.validate-fleet/1 (every node's report + fleet results) with INVENTORY; '-' for "
    "standard output (everything else then goes to standard error).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write a self-contained HTML page: per node its checks, worst first, and the environment.",
)
@click.option(
    "--prom",
    "prom_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write a Prometheus textfile (node_exporter textfile collector; name it *.prom): "
    "r9700_check_status (0 PASS, 1 WARN, 2 FAIL, 3 ERROR, 4 INCONCLUSIVE, -1 SKIP), r9700_check_value, "
    "r9700_node_status, r9700_last_run_timestamp_seconds and per GPU link, temperature, clocks, power, "
    "VRAM (docs/monitoring.md).",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write JUnit XML for CI: a testsuite per node, a testcase per check result.",
)
@click.option(
    "--expected-gpus", type=click.IntRange(min=0), metavar="N", help="FAIL when fewer GPUs are found."
)
@click.option(
    "--expect-scaling",
    callback=_check_scaling,
    metavar="N:X,...",
    help="Hold multi-GPU scaling to these speed-ups, e.g. 4:3.4,8:6.1 (FAIL below 0.9 x).",
)
@click.option("--only", metavar="CHECKS", help="Run only these checks or families, e.g. hostbw,p2p.")
@click.option("--skip", metavar="CHECKS", help="Skip these checks or families, e.g. p2p.")
@click.option(
    "--gpus", callback=_check_gpus, metavar="0,1,...", help="Validate only these GPUs (torch indices)."
)
@click.option(
    "--journal-dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Where the crash-proof step journal lives (default /var/lib/r9700ctl).",
)
@click.option(
    "--thresholds",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="R9700CTL_THRESHOLDS",
    metavar="FILE",
    help="Thresholds overriding the shipped ones (same layout). [env var: R9700CTL_THRESHOLDS]",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PREVIOUS.json",
    help="Compare every GB/s, TFLOPS and speedup figure with an earlier --json report of this node "
    "(3-gate regression check: results baseline.*).",
)
@click.option(
    "--allow-busy",
    is_flag=True,
    help="Judge the figures of a GPU another process is using (normally INCONCLUSIVE 'GPU busy').",
)
@click.option(
    "--save-baseline",
    metavar="NAME",
    help="Save this run in the history as baseline NAME for every node that did not fail "
    "(a later --compare NAME holds each node and GPU to it).",
)
@click.option(
    "--compare",
    "compare_with",
    metavar="NAME|last",
    help="Compare every GB/s, TFLOPS and speedup figure per node and GPU (followed by serial or PCI "
    "address) with baseline NAME, or with the node's previous run ('last'), from the history: "
    "3-gate regression check, results baseline.*.",
)
@click.option(
    "--no-history",
    is_flag=True,
    help="Do not record this run in the history (~/.local/state/r9700ctl/history.db; "
    "env var R9700CTL_HISTORY names another file).",
)
@click.option(
    "--runtime",
    type=click.Choice(("auto", "container", "host")),
    default="auto",
    show_default=True,
    help="Where the agent runs: container = the ROCm image provisioned on the node (r9700-run); "
    "host = the node's python3; auto = the image when it is on the node, else the host's python3 "
    "when it imports torch (or at --level config), else exit 3 'no torch on the node'.",
)
@click.option(
    "--verbose",
    "-v",
    count=True,
    help="INVENTORY: every task result in the progress (-vv: Ansible's output).",
)
@click.pass_obj
def validate(
    app: Application, inventory: Path | None, local: bool, group: str, limit: str | None, **options: object
) -> None:
    """Measure every GPU, link and node and judge the figures.

    With --local, the validation agent runs on this machine: per GPU, per pair and for the
    node it says PASS / WARN / FAIL with the figure, the threshold and the likely cause.
    Every GPU step runs in a child process with a timeout and is journaled first, so a run
    after a host reset names the step that was running.

    \b
    With INVENTORY, playbooks/validate.yml ships the agent to every node of the group at
    once (it needs python3 there, plus PyTorch for quick/standard/burnin), runs it as root
    and fetches each node's JSON report. Then each node's weakest figure per check (GB/s,
    TFLOPS, speed-up, latency) is held against the fleet median: robust z beyond 3 in the
    bad direction is WARN FLEET_OUTLIER, beyond 5 FAIL (needs 3+ nodes). The table shows
    per node its status, checks passed/warn/fail and its worst finding with the hint.
    --duration, --expect-scaling, --only, --skip, --gpus, --journal-dir, --thresholds and
    --baseline are for --local only; --group and --limit for INVENTORY only.
    """
    if inventory is not None and local:
        raise BadInput(what="give an inventory or --local, not both", hint="--local validates this machine")
    if inventory is None and not local:
        raise BadInput(
            what="nothing to validate",
            hint="give an INVENTORY for the nodes, or --local for this machine; see r9700ctl validate --help",
        )
    to_stdout = options.get("json_path") == Path("-")
    if to_stdout:  # the document alone on stdout: written to a scratch file, printed at the end
        options = {**options, "json_path": None, "json_stdout": True}
    _check_output_dirs(options)
    plan = _history_plan(options)
    if inventory is not None:
        _validate_fleet(app, inventory, group, limit, options, plan)
        return
    if limit is not None:
        raise BadInput(what="--limit applies to an INVENTORY, not --local", hint="drop --limit")
    if options["duration"] is not None and options["level"] != "burnin":
        raise BadInput(what="--duration applies to --level burnin only", hint="add --level burnin")
    if options["baseline"] is not None and plan.compare_with:
        raise BadInput(
            what="--baseline FILE and --compare NAME both name a baseline", hint="give one of them"
        )
    plan.check()

    from r9700ctl.launch import run_agent
    from r9700ctl.runtime import choose

    runtime = choose(str(options["runtime"]), str(options["level"]))

    with tempfile.TemporaryDirectory(prefix="r9700ctl-validate-") as scratch:
        given_json = options.get("json_path")
        if (_wanted_formats(options) or plan.enabled or options.get("json_stdout")) and given_json is None:
            # The formats and the history read the agent's report.
            options = {**options, "json_path": Path(scratch) / "report.json"}
        if isinstance(options.get("thresholds"), Path):
            from r9700ctl.agentpack import convert_thresholds

            converted = convert_thresholds(options["thresholds"], Path(scratch) / "thresholds.json")
            options = {**options, "thresholds": converted}
        args = _agent_args(options, verbose=not app.plain and sys.stderr.isatty())
        if runtime.name == "container":
            click.echo(f"r9700ctl: the agent runs in {runtime.image} (r9700-run)", err=True)
        to_stdout = bool(options.get("json_stdout"))
        code = run_agent(
            args,
            on_stdout=lambda line: click.echo(line, err=to_stdout),
            on_stderr=lambda line: click.echo(line, err=True),
            runtime=runtime,
            mounts=_path_dirs(options),
        )
        report = _read_agent_report(options)
        if report is not None:
            report.update(runtime.to_dict())
            from r9700ctl.agent.report import write_json

            json_path = options["json_path"]
            assert isinstance(json_path, Path)
            write_json(json_path.expanduser(), report)  # which runtime and image judged this node
            code = _local_history(report, plan, options, code, source=str(given_json or ""))
        _write_formats_from_report(report, options, plan)
        if to_stdout and report is not None:
            click.echo(json.dumps(report, indent=2))
    _say_history(plan)
    click.get_current_context().exit(code)


def _path_dirs(options: dict[str, object]) -> list[Path]:
    """The directories of every path the agent reads or writes (mounted when it runs in the image)."""
    dirs = []
    for key in ("json_path", "thresholds", "baseline"):
        value = options.get(key)
        if isinstance(value, Path):
            dirs.append(value.expanduser().resolve().parent)
    journal = options.get("journal_dir")
    if isinstance(journal, Path):
        dirs.append(journal.expanduser().resolve())
    return dirs


def _history_plan(options: dict[str, object]) -> HistoryPlan:
    from r9700ctl.history.runs import HistoryPlan

    save_as, compare_with = options.get("save_baseline"), options.get("compare_with")
    return HistoryPlan(
        enabled=not options.get("no_history"),
        # '' is a value given (and refused by HistoryPlan.check), not the option left out.
        compare_with=None if compare_with is None else str(compare_with),
        save_as=None if save_as is None else str(save_as),
    )


def _local_history(
    report: dict, plan: HistoryPlan, options: dict[str, object], code: int, source: str
) -> int:
    """--local: compare with the history (results printed below the agent's table), record, save."""
    node = str(report.get("node") or "localhost")
    json_path = options["json_path"]
    assert isinstance(json_path, Path)
    if report.get("status") == "ERROR" and not report.get("gpus"):
        # The agent could not run (exit 3) and found no GPU: it measured nothing. The history
        # holds validations to compare and trend; a run of nothing would only become the
        # "previous run" that the next --compare last finds nothing in, and a row in
        # `r9700ctl history` that looks like a broken node. So it is not recorded, and the
        # user is told so (a node that lost its GPUs in a fleet run is still recorded there,
        # beside the nodes that ran).
        if plan.enabled:
            plan.notes.append("history: not recorded: the agent found no GPU and measured nothing")
        return code
    comparisons = plan.after_run({node: report}, lambda: report, scope="local", source=source)
    if not comparisons:
        return code
    from r9700ctl.agent.report import write_json

    write_json(json_path.expanduser(), report)  # the --json file carries the comparison too
    err = bool(options.get("json_stdout"))
    for line in _comparison_lines(comparisons):
        click.echo(line, err=err)
    click.echo(
        f"node {node} with the history comparison: {report['status']} (exit {report['exit_code']})", err=err
    )
    return int(report["exit_code"])


def _comparison_lines(comparisons: dict) -> list[str]:
    """One line per comparison that did not pass, then how many figures were compared per node."""
    lines = []
    for node, results in comparisons.items():
        for r in results:
            if r.status != "PASS" and r.id != "baseline.coverage":
                lines.append(f"{node} {r.id} {r.subject}: {r.status}; {r.hint}")
        coverage = next((r for r in results if r.id == "baseline.coverage"), None)
        if coverage is not None:
            text = f"{node} baseline.coverage: {coverage.status}, {coverage.value} figure(s) compared"
            lines.append(f"{text}; {coverage.hint}" if coverage.hint else text)
    return lines


def _say_history(plan: HistoryPlan) -> None:
    for note in plan.notes:
        click.echo(note, err=True)


FORMAT_OPTIONS = {
    "html": ("html_path", "--html"),
    "prom": ("prom_path", "--prom"),
    "junit": ("junit_path", "--junit"),
}


def _wanted_formats(options: dict[str, object]) -> dict[str, Path]:
    """The extra report formats asked for: renderer name -> output path."""
    return {
        name: value
        for name, (key, _) in FORMAT_OPTIONS.items()
        if isinstance(value := options.get(key), Path)
    }


def _check_output_dirs(options: dict[str, object]) -> None:
    """Bad output paths are refused before anything runs (a 15-minute run must not end in 'no such dir')."""
    outputs = {"--json": options.get("json_path")}
    outputs.update({flag: options.get(key) for key, flag in FORMAT_OPTIONS.values()})
    for flag, path in outputs.items():
        if flag != "--json" and path == Path("-"):  # never a file named '-'
            raise BadInput(
                what=f"{flag} writes a file, not standard output", where="-", hint=f"give {flag} a file name"
            )
        if path is not None and str(path) != "-":
            check_output_path(flag, Path(str(path)))


def _write_formats(report: dict, options: dict[str, object], plan: HistoryPlan) -> None:
    from r9700ctl.history.runs import trends_for
    from r9700ctl.report.formats import RENDERERS, render_html, write_text

    for name, path in _wanted_formats(options).items():
        if name == "html":
            text = render_html(report, trends=trends_for(plan, _node_reports(report)))
        else:
            text = RENDERERS[name](report)
        write_text(path.expanduser(), text)


def _node_reports(document: dict) -> dict[str, dict]:
    """node name -> agent report, for either schema."""
    if document.get("schema") == schemas.VALIDATE:
        return {str(document.get("node") or "localhost"): document}
    return {
        str(n.get("host")): n["report"]
        for n in document.get("nodes") or []
        if isinstance(n.get("report"), dict)
    }


def _read_agent_report(options: dict[str, object]) -> dict | None:
    """--local: the agent's JSON report, or None when it wrote none (bad option, no GPU ...)."""
    json_path = options.get("json_path")
    if not isinstance(json_path, Path):
        return None
    try:
        report = json.loads(json_path.expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _write_formats_from_report(report: dict | None, options: dict[str, object], plan: HistoryPlan) -> None:
    """--local: the agent's JSON report is the source; without one there is nothing to render."""
    if not _wanted_formats(options):
        return
    if report is None:
        flags = ", ".join(flag for key, flag in FORMAT_OPTIONS.values() if options.get(key) is not None)
        click.echo(f"r9700ctl: the agent wrote no report, so {flags} not written", err=True)
        return
    _write_formats(report, options, plan)


LOCAL_ONLY = {
    "duration": "--duration",
    "expect_scaling": "--expect-scaling",
    "only": "--only",
    "skip": "--skip",
    "gpus": "--gpus",
    "journal_dir": "--journal-dir",
    "thresholds": "--thresholds",
    "baseline": "--baseline",
}


def _validate_fleet(
    app: Application, inventory: Path, group: str, limit: str | None, options: dict, plan: HistoryPlan
) -> None:
    """INVENTORY: the agent on every node through Ansible, then a table per node and the fleet findings."""
    for key, flag in LOCAL_ONLY.items():
        if options.get(key) is not None:
            raise BadInput(
                what=f"{flag} applies to --local only", hint=f"drop {flag} when giving an INVENTORY"
            )
    plan.check()
    json_path = options.get("json_path")
    from r9700ctl.agent.atomic import write_json
    from r9700ctl.report import print_plain
    from r9700ctl.report.progress import renderer as progress_renderer
    from r9700ctl.validate import validate_inventory

    to_stdout = bool(options.get("json_stdout"))
    console = app.console(stderr=to_stdout)
    verbosity = int(options.get("verbose") or 0)
    renderer = progress_renderer(console, plain=app.plain or to_stdout, verbosity=verbosity)
    expected = options.get("expected_gpus")
    with renderer:
        report = validate_inventory(
            inventory,
            group,
            level=str(options["level"]),
            limit=limit,
            expected_gpus=int(expected) if isinstance(expected, int) else None,
            allow_busy=bool(options.get("allow_busy")),
            runtime=str(options.get("runtime") or "auto"),
            progress=renderer,
            history=plan,
        )
    table = _nodes_table(report)
    print_plain(console, table) if app.plain else console.print(table)
    for line in _image_lines(report) + _fleet_lines(report) + _comparison_lines(report.comparisons):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if isinstance(json_path, Path):
        write_json(json_path, report.to_dict())
    _write_formats(report.to_dict(), options, plan)
    if to_stdout:
        click.echo(json.dumps(report.to_dict(), indent=2))
    closing = f"fleet: {report.status} (exit {report.exit_code})"
    if any(node.report for node in report.nodes):
        closing += f"; reports in {report.reports_dir}/<host>.json"
    else:  # no node wrote one: pointing at the directory would send the user to nothing
        closing += "; no node wrote a report (`r9700ctl doctor INVENTORY` checks reachability and sudo)"
    console.print(
        closing,
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    _say_history(plan)
    click.get_current_context().exit(report.exit_code)


def _nodes_table(report: FleetReport) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # The image's full name (70 characters) would crowd node, status and finding out of an
    # 80-column table: the column says where the agent ran, _image_lines() which image.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("node", no_wrap=True, min_width=max([4, *(len(n.host) for n in report.nodes)]))
    table.add_column("status", no_wrap=True, min_width=max([6, *(len(n.status) for n in report.nodes)]))
    table.add_column("runtime", no_wrap=True)
    table.add_column("pass/warn/\nfail/inconclusive", justify="right", no_wrap=True)
    table.add_column("worst finding", overflow="fold", ratio=1, min_width=20)
    for node in report.nodes:
        counts = node.counts
        numbers = (
            f"{counts['passed']}/{counts['warn']}/{counts['fail']}/{counts['inconclusive']}"
            if node.report
            else "-"
        )
        table.add_row(node.host, node.status, node.runtime or "-", numbers, Text(_worst_text(node)))
    return table


def _image_lines(report: FleetReport) -> list[str]:
    """Which container image judged which nodes (the table's runtime column says only 'container')."""
    by_image: dict[str, list[str]] = {}
    for node in report.nodes:
        if node.runtime == "container" and node.image:
            by_image.setdefault(node.image, []).append(node.host)
    return [f"{', '.join(hosts)}: the agent ran in {image}" for image, hosts in by_image.items()]


def _worst_text(node: NodeOutcome) -> str:
    if node.report is None:
        return node.error
    finding = node.worst_finding()
    if finding is None:
        return "-"
    text = f"{finding.get('id')} {finding.get('subject')}: {finding.get('status')}"
    if finding.get("value") not in (None, ""):
        text += f" {finding.get('value')} {finding.get('unit') or ''}".rstrip()
    return f"{text}; {finding['hint']}" if finding.get("hint") else text


def _fleet_lines(report: FleetReport) -> list[str]:
    from r9700ctl.validate import fleet_results

    if report.fleet.note:
        return [report.fleet.note]
    findings = fleet_results(report)
    if not findings:
        return [f"fleet: no outlier among {report.fleet.compared} compared figure(s)"]
    return [f"{r.status} {r.id} {r.subject}: {r.hint}" for r in findings]


def _agent_args(options: dict[str, object], verbose: bool) -> list[str]:
    flags = {
        "level": "--level",
        "duration": "--duration",
        "json_path": "--json",
        "expected_gpus": "--expected-gpus",
        "expect_scaling": "--expect-scaling",
        "only": "--only",
        "skip": "--skip",
        "gpus": "--gpus",
        "journal_dir": "--journal-dir",
        "thresholds": "--thresholds",
        "baseline": "--baseline",
    }
    args: list[str] = []
    for key, flag in flags.items():
        value = options.get(key)
        if isinstance(value, Path):
            value = value.expanduser().resolve()  # the agent runs in its staged directory
        if value is not None:
            args += [flag, str(value)]
    if options.get("allow_busy"):
        args.append("--allow-busy")
    if verbose:
        args.append("--verbose")
    return args
