"""`python3 -m r9700ctl.agent.cluster PHASE --plan PLAN.json --out OUT.json`: one phase on this node.

PHASE: facts, routes, torchinfo, pairs, smoke, collective (r9700ctl/agent/cluster/__init__.py).
The plan is this node's part of the controller's plan (JSON); the output one JSON document,
written atomically. Exit 0 when the document was written (its contents carry the verdict's facts),
64 for a bad invocation, 3 when the phase could not run at all, 128+N when stopped by signal N
(SIGTERM from the role's `timeout`, SIGINT, SIGHUP): then every step still running is killed with
every process it started, by their pids (processes.py: torchrun and its workers are in sessions
of their own, which the signal to this program's process group does not reach).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from r9700ctl.agent.atomic import write_atomic
from r9700ctl.agent.cluster import processes

PHASES = ("facts", "routes", "torchinfo", "pairs", "smoke", "collective")
EXIT_BAD_INPUT = 64
EXIT_CANNOT_RUN = 3


def _phase(name: str, plan: dict[str, Any]) -> dict[str, Any]:
    if name == "facts":
        from r9700ctl.agent.cluster import netfacts

        return netfacts.gather(plan)
    if name == "routes":
        from r9700ctl.agent.cluster import netfacts

        return {"node": plan.get("node"), "routes": netfacts.routes(plan)}
    if name == "torchinfo":
        from r9700ctl.agent.cluster import torchinfo

        return torchinfo.gather()
    if name == "pairs":
        from r9700ctl.agent.cluster import pairs

        return pairs.run(plan)
    if name == "smoke":
        from r9700ctl.agent.cluster import smoke

        return smoke.run(plan)
    from r9700ctl.agent.cluster import collective

    return collective.run(plan)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stopped(signum: int, _frame: Any) -> None:
    """The agent is being stopped: nothing it started may outlive it."""
    processes.kill_live()
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m r9700ctl.agent.cluster", description=__doc__)
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--plan", help="this node's plan (JSON file; '-' reads standard input)")
    parser.add_argument("--out", type=Path, required=True, help="where the phase's JSON goes")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else 0
    try:
        text = (
            sys.stdin.read()
            if args.plan == "-"
            else Path(args.plan).read_text(encoding="utf-8")
            if args.plan
            else "{}"
        )
        plan = json.loads(text)
    except (OSError, ValueError) as exc:
        print(f"r9700ctl.agent.cluster: cannot read the plan {args.plan}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stopped)
    document = {"phase": args.phase, **_phase(args.phase, plan)}
    write_atomic(args.out, json.dumps(document, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
