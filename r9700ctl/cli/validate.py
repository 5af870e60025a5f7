"""`r9700ctl validate`: measure GPUs, links and nodes and judge the figures.

`--local` runs the on-node agent on this machine; with an INVENTORY it runs on every node
through Ansible (r9700ctl.validate) and the fleet is judged as a whole (r9700ctl.fleet).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from r9700ctl.agent import schemas
from r9700ctl.agent.levels import LEVEL_NAMES
from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, limit_option
from r9700ctl.cli.output import Output, check_output_path, file_option, json_option, write_output
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.cli.validate_cluster import InventoryRun
    from r9700ctl.history.runs import HistoryPlan

LEVELS = LEVEL_NAMES


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
  r9700ctl validate inventory.ini --cluster --json cluster.json --html cluster.html
\b
Exit codes: 0 all good, 1 warnings only, 2 something failed, 3 could not run
(no GPU, a step timed out; with INVENTORY also: a node unreachable or its agent wrote
no report), 4 inconclusive (nothing failed, but something could not be judged: a busy
GPU, a figure without a threshold, too few or too noisy windows), 64 bad option or
inventory (then no host was contacted)."""
)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--local", is_flag=True, help="Run the validation agent on this machine.")
@click.option(
    "--cluster",
    is_flag=True,
    help="INVENTORY as one cluster: can its nodes run one job together? Phases facts, network pairs, "
    "rendezvous, pairwise collective, each stopping early with the cause and naming the bad node or "
    f"link (needs r9700_cluster_network; docs/cluster.md). JSON schema {schemas.VALIDATE_CLUSTER}.",
)
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
@json_option(
    "the report (with INVENTORY: every node's report and the fleet's results)",
    f"{schemas.VALIDATE} with --local, {schemas.VALIDATE_FLEET} with INVENTORY",
)
@file_option(
    "--html",
    "html_path",
    help="Also write a self-contained HTML page: per node its checks, worst first, and the environment.",
)
@file_option(
    "--prom",
    "prom_path",
    help="Also write a Prometheus textfile (node_exporter textfile collector; name it *.prom): "
    "r9700_check_status (0 PASS, 1 WARN, 2 FAIL, 3 ERROR, 4 INCONCLUSIVE, -1 SKIP), r9700_check_value, "
    "r9700_node_status, r9700_last_run_timestamp_seconds and per GPU link, temperature, clocks, power, "
    "VRAM (docs/monitoring.md).",
)
@file_option(
    "--junit",
    "junit_path",
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
    app: Application, inventory: Path | None, local: bool, group: str, limit: str | None, **options: Any
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
    if options.get("cluster") and inventory is None:
        raise BadInput(
            what="--cluster validates the nodes of an INVENTORY", hint="give the inventory, not --local"
        )
    if inventory is None and not local:
        raise BadInput(
            what="nothing to validate",
            hint="give an INVENTORY for the nodes, or --local for this machine; see r9700ctl validate --help",
        )
    out = Output(app, options["json_path"])
    formats = _wanted_formats(options)
    plan = _history_plan(options, want_trends="html" in formats)
    if inventory is not None:
        from r9700ctl.cli.validate_cluster import InventoryRun, validate_cluster

        asked = InventoryRun(inventory, group, limit, options, plan, formats)
        if options.get("cluster"):
            validate_cluster(out, asked)
        else:
            _validate_fleet(out, asked)
        return
    if limit is not None:
        raise BadInput(what="--limit applies to an INVENTORY, not --local", hint="drop --limit")
    _validate_local(out, options, plan, formats)


def _validate_local(
    out: Output, options: dict[str, Any], plan: HistoryPlan, formats: dict[str, Path]
) -> None:
    """--local: the agent streams its own table; the controller adds the history's comparisons."""
    from r9700ctl.report.validate import local_lines
    from r9700ctl.validate_local import LocalRequest, validate_local

    json_path = options["json_path"]
    request = LocalRequest(
        level=str(options["level"]),
        duration=options["duration"],
        report_path=None if json_path is None or out.to_stdout else Path(json_path),
        expected_gpus=options["expected_gpus"],
        expect_scaling=options["expect_scaling"],
        only=options["only"],
        skip=options["skip"],
        gpus=options["gpus"],
        journal_dir=options["journal_dir"],
        thresholds=options["thresholds"],
        baseline=options["baseline"],
        allow_busy=bool(options["allow_busy"]),
        runtime=str(options["runtime"]),
        verbose=not out.app.plain and sys.stderr.isatty(),
        history=plan,
    )
    outcome = validate_local(request, on_stdout=out.echo, on_stderr=out.note)
    if outcome.report is not None:
        for line in local_lines(outcome.report, outcome.comparisons):
            out.echo(line)
    _write_formats(out, outcome.report, formats, plan)
    _say_history(out, plan)
    out.finish(outcome.report, outcome.exit_code)


def _validate_fleet(out: Output, asked: InventoryRun) -> None:
    """INVENTORY: the agent on every node through Ansible, then a table per node and the fleet findings."""
    from r9700ctl.report import validate as text
    from r9700ctl.validate import validate_inventory
    from r9700ctl.validate_local import AGENT_FLAGS, LOCAL_ONLY

    options, plan = asked.options, asked.plan
    for key in LOCAL_ONLY:
        flag = AGENT_FLAGS[key]
        if options.get(key) is not None:
            raise BadInput(
                what=f"{flag} applies to --local only", hint=f"drop {flag} when giving an INVENTORY"
            )
    with out.progress(int(options.get("verbose") or 0)) as progress:
        report = validate_inventory(
            asked.inventory,
            asked.group,
            level=str(options["level"]),
            limit=asked.limit,
            expected_gpus=options.get("expected_gpus"),
            allow_busy=bool(options.get("allow_busy")),
            runtime=str(options.get("runtime") or "auto"),
            progress=progress,
            history=plan,
        )
    out.table(text.nodes_table(report))
    out.lines(text.fleet_text(report))
    document = report.to_dict()
    _write_formats(out, document, asked.formats, plan)
    out.line(text.fleet_closing(report))
    _say_history(out, plan)
    out.finish(document, report.exit_code)


def _history_plan(options: dict[str, Any], want_trends: bool) -> HistoryPlan:
    from r9700ctl.history.runs import HistoryPlan

    save_as, compare_with = options.get("save_baseline"), options.get("compare_with")
    return HistoryPlan(
        enabled=not options.get("no_history"),
        # '' is a value given (and refused by HistoryPlan.check), not the option left out.
        compare_with=None if compare_with is None else str(compare_with),
        save_as=None if save_as is None else str(save_as),
        want_trends=want_trends,
    )


def _say_history(out: Output, plan: HistoryPlan) -> None:
    for note in plan.notes:
        out.note(note)


FORMAT_OPTIONS = {
    "html": ("html_path", "--html"),
    "prom": ("prom_path", "--prom"),
    "junit": ("junit_path", "--junit"),
}


def _wanted_formats(options: dict[str, Any]) -> dict[str, Path]:
    """The extra report formats asked for (renderer name -> output path), refused before anything
    runs when they cannot be written (a 15-minute run must not end in 'no such directory')."""
    wanted = {}
    for name, (key, flag) in FORMAT_OPTIONS.items():
        path = options.get(key)
        if path == Path("-"):  # never a file named '-'
            raise BadInput(
                what=f"{flag} writes a file, not standard output", where="-", hint=f"give {flag} a file name"
            )
        if isinstance(path, Path):
            check_output_path(flag, path)
            wanted[name] = path
    return wanted


def _write_formats(
    out: Output, document: dict[str, Any] | None, formats: dict[str, Path], plan: HistoryPlan
) -> None:
    """--html, --prom, --junit from the run's document; without one there is nothing to render."""
    from r9700ctl.report.formats import render

    if not formats:
        return
    if document is None:
        flags = ", ".join(FORMAT_OPTIONS[name][1] for name in formats)
        out.note(f"r9700ctl: the agent wrote no report, so {flags} not written")
        return
    for name, path in formats.items():
        write_output(FORMAT_OPTIONS[name][1], path, render(name, document, trends=plan.trends))
