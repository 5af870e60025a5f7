"""`r9700ctl validate`: measure GPUs, links and nodes and judge the figures.

`--local` runs the on-node agent on this machine; running it on the nodes of an inventory
(through Ansible) is not built yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from r9700ctl.cli.app import Application
from r9700ctl.errors import BadInput, not_built

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
  r9700ctl validate --local --level config
  r9700ctl validate --local --level quick --expected-gpus 4 --json quick.json
  r9700ctl validate --local --level standard --expect-scaling 4:3.4,8:6.1
  r9700ctl validate --local --level standard --json now.json --baseline before.json
\b
Exit codes: 0 all good, 1 warnings only, 2 something failed, 3 could not run
(no GPU, a step timed out), 64 bad option."""
)
@click.argument("inventory", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--local", is_flag=True, help="Run the validation agent on this machine.")
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
    help="Also write the report as JSON (schema r9700ctl.validate/1).",
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
@click.pass_obj
def validate(app: Application, inventory: Path | None, local: bool, **options: object) -> None:
    """Measure every GPU, link and node and judge the figures.

    With --local, the validation agent runs on this machine: per GPU, per pair and for the
    node it says PASS / WARN / FAIL with the figure, the threshold and the likely cause.
    Every GPU step runs in a child process with a timeout and is journaled first, so a run
    after a host reset names the step that was running.
    """
    if inventory is not None and local:
        raise BadInput(what="give an inventory or --local, not both", hint="--local validates this machine")
    if inventory is None and not local:
        raise BadInput(
            what="nothing to validate",
            hint="give an INVENTORY for the nodes, or --local for this machine; see r9700ctl validate --help",
        )
    if inventory is not None:
        raise not_built("validate INVENTORY")
    if options["duration"] is not None and options["level"] != "burnin":
        raise BadInput(what="--duration applies to --level burnin only", hint="add --level burnin")

    from r9700ctl.agent.launch import run_agent

    args = _agent_args(options, verbose=not app.plain and sys.stderr.isatty())
    code = run_agent(args, on_stdout=click.echo, on_stderr=lambda line: click.echo(line, err=True))
    click.get_current_context().exit(code)


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
        if value is not None:
            args += [flag, str(value)]
    if verbose:
        args.append("--verbose")
    return args
