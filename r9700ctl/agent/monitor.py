"""`python3 -m r9700ctl.agent.monitor`: the r9700_monitoring timer's job ON a node.

Runs the agent at its level (config by default: static checks, no GPU load, seconds), then
writes every r9700_* metric (metrics.py) into node_exporter's textfile directory in one
atomic rename, so a scrape never reads half a file. Figures of the node's latest measuring
runs (quick, standard, burnin), which `r9700ctl validate INVENTORY` leaves in REPORTS_DIR, are
added with their own `level` label: the dashboard's last P2P and all-reduce figures.

Exit 0 when the textfile was written, whatever the verdicts (they are in the metrics; a
failed unit per bad verdict would only be noise); 3 when it could not be written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from r9700ctl.agent import levels
from r9700ctl.agent.metrics import NodeSample, from_agent_report, registry_for
from r9700ctl.agent.result import ERROR

# Where `r9700ctl validate INVENTORY` leaves each node's latest report per level (role
# r9700_validate, r9700_validate_reports_dir: a test keeps the two equal).
REPORTS_DIR = Path("/var/lib/r9700ctl/reports")
STATE_DIR = Path("/var/lib/r9700ctl/monitoring")
MEASURING_LEVELS = levels.GPU_LEVELS
EXIT_CANNOT_WRITE = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m r9700ctl.agent.monitor",
        description="Run the validation agent and write its verdicts and GPU state as r9700_* metrics "
        "into node_exporter's textfile directory (atomically).",
    )
    parser.add_argument("--textfile", type=Path, required=True, help="the .prom file to write")
    parser.add_argument("--node", required=True, help="the node label (the inventory name)")
    parser.add_argument("--level", default="config", help="agent level to run (default: config)")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR, help="agent journal and last report")
    parser.add_argument("--reports-dir", type=Path, default=REPORTS_DIR, help="latest measuring reports")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the agent may run")
    return parser.parse_args(argv)


def run_agent(level: str, state_dir: Path, timeout: float) -> tuple[dict[str, Any] | None, int, str]:
    """The agent's report (None when it wrote none), its exit code and its last stderr line."""
    state_dir.mkdir(parents=True, exist_ok=True)
    report_path = state_dir / f"last-{level}.json"
    command = [sys.executable, "-m", "r9700ctl.agent", "--level", level, "--json", str(report_path)]
    command += ["--journal-dir", str(state_dir / "journal")]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, 124, f"the agent ran past {timeout:.0f} s"
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
    return read_report(report_path), done.returncode, last


def read_report(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def measured_samples(node: str, reports_dir: Path) -> list[NodeSample]:
    """The latest report of each measuring level: its results only (GPU state comes from now)."""
    samples = []
    for level in MEASURING_LEVELS:
        report = read_report(reports_dir / f"{level}.json")
        if report is None:
            continue
        sample = from_agent_report(report, node)
        sample.level, sample.report = level, None
        samples.append(sample)
    return samples


def samples(args: argparse.Namespace) -> list[NodeSample]:
    report, code, said = run_agent(args.level, args.state_dir, args.timeout)
    if report is not None:
        now = from_agent_report(report, args.node)
        now.exit_code = code
    else:
        failed = {"id": "monitoring.agent", "subject": "node", "status": ERROR, "hint": said}
        now = NodeSample(args.node, args.level, ERROR, None, time.time(), code, [failed])
    return [now, *measured_samples(args.node, args.reports_dir)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from prometheus_client import write_to_textfile

    registry = registry_for(samples(args))
    try:
        args.textfile.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(args.textfile), registry.registry)  # temp file, then rename
    except OSError as exc:
        print(f"error: cannot write {args.textfile}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    return 0


if __name__ == "__main__":
    sys.exit(main())
