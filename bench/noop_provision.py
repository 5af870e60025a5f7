"""A second `r9700ctl provision` that changes nothing: how long it takes, and where the time goes.

For each node count asked for, a lab of that many nodes that start provisioned (snapshots of the
nodes of a lab after one cold provision with ROCm auto, r9700ctl/lab/snapshot.py; made first when
missing), one provision to settle anything that differs (it must change nothing), then the measured
runs, each round the default run, `provision --full` (every role runs: the reference) and
`provision --full` building every module payload afresh (r9700ctl/ansiballz_cache.py's kept payloads
off: a cache directory that is not private is never used) side by side: wall time of
`r9700ctl provision INVENTORY` as a user starts it (process start to exit), the
changed count (must be 0), and from ansible-runner's job events the seconds per role and per module
of node1 and how many tasks ran on the node, ran only on the controller, or were skipped.

Usage (root, the lab's host tools installed):
    python3 bench/noop_provision.py --nodes 2 6 [--runs 3] [--out bench/results/DIR] [--skip-full]
Prints a table; with --out writes summary.json and the per-run task tables there. Not a test.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Actions that run on the controller only (no module is sent to the node).
CONTROLLER_ONLY = {
    "ansible.builtin.set_fact",
    "ansible.builtin.assert",
    "ansible.builtin.debug",
    "ansible.builtin.include_vars",
    "ansible.builtin.validate_argument_spec",
    "ansible.builtin.include_role",
    "ansible.builtin.include_tasks",
    "ansible.builtin.meta",
    "ansible.builtin.fail",
}


def node_cpu_s(cgroups: list[Path]) -> float:
    """CPU seconds the lab's nodes used so far (cgroup v1 cpuacct.usage, or v2 cpu.stat usage_usec)."""
    total = 0.0
    for cgroup in cgroups:
        if (cgroup / "cpuacct.usage").is_file():
            total += int((cgroup / "cpuacct.usage").read_text()) / 1e9
        elif (cgroup / "cpu.stat").is_file():
            stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
            total += int(stat["usage_usec"]) / 1e6
    return total


def node_cgroups(lab_id: int, nodes: int) -> list[Path]:
    """Each node's cgroup that counts CPU: v1's cpuacct hierarchy, else the v2 one."""
    from r9700ctl.lab import dockerd
    from r9700ctl.lab.naming import LabNames

    found = dockerd.hierarchies()
    counting = [h for h in found if "cpuacct" in h.options.split(",")] or [
        h for h in found if h.fstype == "cgroup2"
    ]
    names = LabNames(lab_id)
    return [h.node_cgroup(names.netns(i)) for h in counting[:1] for i in range(1, nodes + 1)]


CPU: dict[str, list[float]] = {}  # "controller"/"nodes" CPU seconds of the last provision() call


def provision(
    inventory: Path, home: Path, *extra: str, cgroups: list[Path] | None = None, built: bool = False
) -> tuple[float, dict[str, Any], Path]:
    report = home / f"provision-{time.monotonic_ns()}.json"
    env = {**os.environ, "XDG_STATE_HOME": str(home / "state"), "NO_COLOR": "1"}
    if built:  # no kept module payloads: their directory is not private, so r9700ctl uses none
        shared = home / "shared-cache" / "r9700ctl" / "ansiballz"
        shared.mkdir(parents=True, exist_ok=True)
        shared.chmod(0o777)
        env["XDG_CACHE_HOME"] = str(home / "shared-cache")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes_before = node_cpu_s(cgroups or [])
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "r9700ctl", "provision", str(inventory), "--json", str(report), *extra],
        capture_output=True, text=True, env=env, check=False, timeout=1800,
    )  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["controller"] = [after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime]
    CPU["nodes"] = [node_cpu_s(cgroups or []) - nodes_before]
    if done.returncode not in (0, 1):
        raise SystemExit(f"provision exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    document = json.loads(report.read_text())
    return wall, document, Path(document["artifact_dir"])


def task_table(run_dir: Path, host: str = "node1") -> dict[str, Any]:
    events = [json.loads(Path(f).read_text()) for f in glob.glob(f"{run_dir}/artifacts/*/job_events/*.json")]
    per_role: collections.Counter[str] = collections.Counter()
    per_action: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    for event in events:
        data = event.get("event_data", {})
        if data.get("host") != host or not event["event"].startswith("runner_on_"):
            continue
        if event["event"] not in ("runner_on_ok", "runner_on_skipped", "runner_on_failed"):
            continue
        seconds = float(data.get("duration") or 0)
        action = data.get("task_action", "")
        per_role[data.get("role") or "(play)"] += seconds
        if event["event"] == "runner_on_skipped":
            kinds["skipped"] += 1
        elif action in CONTROLLER_ONLY:
            kinds["controller"] += 1
        else:
            kinds["node"] += 1
            per_action[action] += seconds
    return {
        "tasks": dict(kinds),
        "seconds_per_role": {k: round(v, 2) for k, v in per_role.most_common()},
        "seconds_per_module": {k: round(v, 2) for k, v in per_action.most_common()},
    }


def changed(report: dict[str, Any]) -> int:
    return sum(int(h.get("changed", 0)) for h in report.get("hosts", []))


def measure(nodes: int, runs: int, out: Path | None, full: bool = True) -> dict[str, Any]:
    from r9700ctl.lab import down, provisioned, up
    from r9700ctl.lab.node import NodeOptions

    home = Path(tempfile.mkdtemp(prefix="r97-bench-"))
    provisioned.ensure("auto", 4, nodes, progress=print)
    directory = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))
    options = {f"node{i}": NodeOptions(provisioned="auto") for i in range(1, nodes + 1)}
    info = up(directory, nodes=nodes, node_options=options)
    try:
        provision(info.inventory, home)  # settles what differs per node (its name in the node record)
        # Side by side in each round: the default run (a converged node ends its play after
        # preflight) and `--full` (every role runs: the reference, what a no-op run did before).
        walls: dict[str, list[float]] = {"converged": [], "full": [], "full_built": []}
        cpu: dict[str, dict[str, list[float]]] = {name: {"controller": [], "nodes": []} for name in walls}
        cgroups = node_cgroups(info.lab_id, nodes)
        tables: dict[str, dict[str, Any]] = {}
        for _ in range(runs):
            kinds = (("converged", ()), ("full", ("--full",)), ("full_built", ("--full",)))
            for name, extra in kinds if full else kinds[:1]:
                wall, report, run_dir = provision(
                    info.inventory, home, *extra, cgroups=cgroups, built=name == "full_built"
                )
                for side in ("controller", "nodes"):
                    cpu[name][side].append(round(CPU[side][0], 2))
                if changed(report):
                    raise SystemExit(
                        f"a {name} provision after the settling one changed {changed(report)} task(s)"
                    )
                walls[name].append(round(wall, 2))
                tables[name] = task_table(run_dir)
        result = {
            "nodes": nodes,
            "wall_s": walls["converged"],
            "median_s": statistics.median(walls["converged"]),
            "full_wall_s": walls["full"],
            "full_median_s": statistics.median(walls["full"]) if full else None,
            # CPU seconds per run: the controller (r9700ctl, ansible-playbook, ssh) and all nodes
            "cpu_s": cpu["converged"],
            "full_cpu_s": cpu["full"],
            "full_built_wall_s": walls["full_built"],
            "full_built_cpu_s": cpu["full_built"],
            "node1": tables["converged"],
            "node1_full": tables.get("full"),
        }
        if out:
            (out / f"noop-{nodes}-nodes.json").write_text(json.dumps(result, indent=2) + "\n")
        return result
    finally:
        down(directory)
        shutil.rmtree(home, ignore_errors=True)  # the runs' reports and state: summarised above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 6])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    # The node-count ratio needs only the default runs (2 and 6 nodes side by side in one run).
    parser.add_argument("--skip-full", action="store_true", help="leave out the --full reference runs")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    results = [measure(n, args.runs, args.out, full=not args.skip_full) for n in args.nodes]
    print(f"{'nodes':>5}  {'median s':>8}  {'--full s':>8}  runs (default; --full)")
    for r in results:
        full_median = "-" if r["full_median_s"] is None else f"{r['full_median_s']:.1f}"
        medians = f"{r['nodes']:>5}  {r['median_s']:>8.1f}  {full_median:>8}"
        print(f"{medians}  {r['wall_s']}; {r['full_wall_s']}  node1 tasks {r['node1']['tasks']}")
    for r in results:
        print(f"node1 of {r['nodes']}: per role {r['node1']['seconds_per_role']}")
        print(f"node1 of {r['nodes']}: per module {r['node1']['seconds_per_module']}")
        print(f"{r['nodes']} nodes, CPU s per run: default {r['cpu_s']}; --full {r['full_cpu_s']}")
        if r["full_built_wall_s"]:
            print(
                f"{r['nodes']} nodes, --full building every module payload: wall {r['full_built_wall_s']},"
                f" CPU s {r['full_built_cpu_s']}"
            )
    if args.out:
        (args.out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
