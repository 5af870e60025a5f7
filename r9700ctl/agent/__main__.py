"""`python -m r9700ctl.agent`: validate this node's GPUs, print a table, exit 0/1/2/3 (64: bad option).

Standard library only (torch is imported in child processes), so it runs on any GPU node
with a Python and, for the measurement levels, PyTorch for ROCm or CUDA.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import fields
from pathlib import Path

from r9700ctl.agent import checks, levels, report, schemas
from r9700ctl.agent.check_run import EXIT_BAD_INPUT, EXIT_CANNOT_RUN, AgentExit, Options, run

DESCRIPTION = """\
Validate this node's GPUs: inventory, driver, platform and PCIe links (level config, no GPU
load, < 10 s), then measured host<->GPU and P2P bandwidth, memory, GEMM throughput with clock
and throttle sampling, all-reduce, scaling and stability (quick <= 90 s on 4 GPUs, standard
<= 15 min, burnin --duration). Every GPU step runs in a child process with a timeout and is
journaled (fsync'd) first, so a run after a host reset names the step that was running."""

EPILOG = """\
examples:
  python -m r9700ctl.agent --level config
  python -m r9700ctl.agent --level quick --expected-gpus 4 --json /tmp/quick.json
  python -m r9700ctl.agent --level standard --expect-scaling 4:3.4,8:6.1 --skip p2p
  python -m r9700ctl.agent --level burnin --duration 7200
  python -m r9700ctl.agent --level standard --json now.json --baseline last-month.json

exit codes: 0 all good, 1 warnings only, 2 something failed, 3 could not run (no GPU, a step
timed out or crashed), 4 inconclusive (nothing failed, but something could not be judged: a
busy GPU, a figure without a threshold, too few or too noisy windows), 64 bad option (one line
on stderr, nothing ran)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line and exit 64 (the project's contract), not usage + 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise AgentExit(f"{message} (see python -m r9700ctl.agent --help)", EXIT_BAD_INPUT)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected >= 0, got {value}")
    return value


def _duration(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected > 0 seconds, got {text}")
    return value


def parse_scaling(text: str) -> dict[int, float]:
    """'4:3.4,8:6.1' -> {4: 3.4, 8: 6.1}: expected speed-up at N GPUs."""
    out: dict[int, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        gpus_text, sep, speedup_text = item.partition(":")
        try:
            n, speedup = int(gpus_text), float(speedup_text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected N:SPEEDUP pairs like 4:3.4,8:6.1, got {item!r}"
            ) from None
        if not sep or n < 2 or not 0 < speedup <= n:
            raise argparse.ArgumentTypeError(f"{item!r}: N must be >= 2 and 0 < SPEEDUP <= N")
        out[n] = speedup
    if not out:
        raise argparse.ArgumentTypeError("expected N:SPEEDUP pairs like 4:3.4,8:6.1")
    return out


def _gpu_list(text: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1,3, got {text!r}") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct GPU indices like 0,1,3, got {text!r}")
    return values


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The agent's options, each stored under the name of its Options field."""
    parser = _Parser(
        prog="python -m r9700ctl.agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--level", choices=levels.LEVEL_NAMES, default="config", help="how deep to go (default: config)"
    )
    parser.add_argument(
        "--duration",
        dest="duration_s",
        type=_duration,
        metavar="S",
        help="burnin only: soak length in seconds (default 3600)",
    )
    parser.add_argument(
        "--json",
        dest="json_path",
        type=Path,
        metavar="PATH",
        help=f"also write the report as JSON (schema {schemas.VALIDATE}), atomically",
    )
    parser.add_argument(
        "--expected-gpus",
        type=_positive_int,
        metavar="N",
        help="FAIL when the node has fewer GPUs (inventory)",
    )
    parser.add_argument(
        "--expect-scaling",
        type=parse_scaling,
        default={},
        metavar="N:X,...",
        help="hold scaling to these speed-ups, e.g. 4:3.4,8:6.1 (FAIL below 0.9 x)",
    )
    parser.add_argument(
        "--only",
        type=_names,
        default=[],
        metavar="CHECKS",
        help="run only these checks or families (comma-separated)",
    )
    parser.add_argument(
        "--skip",
        type=_names,
        default=[],
        metavar="CHECKS",
        help="skip these checks or families (comma-separated), e.g. p2p",
    )
    parser.add_argument(
        "--gpus", type=_gpu_list, metavar="0,1,...", help="validate only these GPUs (torch device indices)"
    )
    parser.add_argument(
        "--journal-dir",
        type=Path,
        metavar="DIR",
        help="journal directory (default /var/lib/r9700ctl, or ~/.local/state/r9700ctl "
        "when that is not writable)",
    )
    parser.add_argument(
        "--thresholds",
        dest="thresholds_path",
        type=Path,
        metavar="FILE",
        help="thresholds overriding the shipped ones: JSON with the layout of r9700ctl/data/thresholds.yaml "
        "(r9700ctl validate --thresholds converts a YAML file)",
    )
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="judge the figures of a GPU another process is using (by default they are INCONCLUSIVE "
        "'GPU busy: pid N (command)')",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="read /sys, /proc, /dev under DIR (for tests with a fake tree)",
    )
    parser.add_argument(
        "--baseline",
        dest="baseline_path",
        type=Path,
        metavar="PREVIOUS.json",
        help="compare every GB/s, TFLOPS and speedup figure with the same check and subject in this "
        "earlier --json report (3-gate regression check; results baseline.*)",
    )
    parser.add_argument("--list", action="store_true", help="list the checks of each level and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress lines on stderr")
    return parser


def _list_checks() -> str:
    checks.load_all()
    lines = []
    for level in levels.LEVEL_NAMES:
        names = [f"{s.id}{' (last)' if s.runs_last else ''}" for s in checks.plan(level)]
        lines.append(f"{level:<9} {', '.join(names) or '-'}")
    return "\n".join(lines) + "\n"


def _stop_on_sigterm() -> None:
    """SIGTERM (a timeout in Ansible, systemd) unwinds like Ctrl-C: steps' process groups get killed
    and the journal is closed, instead of the agent vanishing with its children running."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    _stop_on_sigterm()
    try:
        args = build_parser().parse_args(argv)
        if args.list:
            sys.stdout.write(_list_checks())
            return 0
        # Every field of Options is the option of its name (the parser's dest).
        options = Options(**{f.name: getattr(args, f.name) for f in fields(Options)})

        def progress(text: str) -> None:
            if args.verbose:
                print(f"[agent] {text}", file=sys.stderr, flush=True)

        outcome = run(options, progress)
    except AgentExit as exc:
        print(f"error: {exc.line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the last line of defence: a one-line error, never a traceback
        print(f"error: internal error in the agent: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if outcome.one_line:
        # A measurement level on a node without a usable GPU: one clear line (the JSON has the rest).
        print(f"error: {outcome.one_line}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    sys.stdout.write(report.render_table(outcome.report))
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
