"""A cold provision on a lab node that sees the lab's cut of Debian against one that sees all of it.

Side by side in one run: each round brings up a lab of two fresh nodes, gives node2 the whole of
bookworm main as its Debian source (the line every lab node had before r9700ctl/lab/debian_subset.py:
`deb <the host's Debian mirror> bookworm main`, through the same apt proxy) and node1 the lab's cut,
then runs one cold `r9700ctl provision` of both. Both nodes run the same tasks in the same run, so
the CPU seconds each node's cgroup used (cgroup v1 cpuacct, or v2 cpu.stat) compare like for like;
the per-host time in the JSON report is shared by the linear strategy and is not per node.

Usage (root, the lab's host tools installed):
    python3 bench/debian_cut.py [--runs 2] [--release 6.4.1]
Prints each round's node CPU seconds and the median. Not a test.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noop_provision import CPU, node_cgroups, node_cpu_s, provision  # this directory's helper


def whole_archive(info, name: str) -> None:  # type: ignore[no-untyped-def]
    """The node's Debian source as the lab wrote it before the cut: the host's mirror, all of it."""
    from r9700ctl.lab import rootfs

    line = f"deb {rootfs.debian_mirror()} {rootfs.SUITE} main"
    done = info.ssh(name, f"echo {shlex.quote(line)} | sudo tee /etc/apt/sources.list >/dev/null")
    if done.returncode != 0:
        raise SystemExit(f"{name}: could not write its sources.list: {done.stderr}")


def one_round(release: str) -> dict[str, float]:
    from r9700ctl.lab import down, up

    home = Path(tempfile.mkdtemp(prefix="r97-bench-"))
    directory = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))
    info = up(directory, nodes=2, gpus=1)
    try:
        whole_archive(info, "node2")
        cgroups = node_cgroups(info.lab_id, 2)
        before = [node_cpu_s([c]) for c in cgroups]
        wall, report, _ = provision(info.inventory, home, "-e", f"r9700_rocm_version={release}")
        used = [round(node_cpu_s([c]) - b, 2) for c, b in zip(cgroups, before, strict=True)]
        failed = [h for h in report["hosts"] if h.get("status") not in ("OK", "CHANGED")]
        if failed:
            raise SystemExit(f"provision failed: {failed}")
        return {
            "cut": used[0],
            "whole": used[1],
            "wall": round(wall, 1),
            "controller": round(CPU["controller"][0], 1),
        }
    finally:
        down(directory)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--release", default="6.4.1")
    args = parser.parse_args()
    rounds = []
    for index in range(args.runs):
        result = one_round(args.release)
        rounds.append(result)
        print(
            f"round {index + 1}: node CPU-s with the cut {result['cut']}, "
            f"with the whole archive {result['whole']} "
            f"(the run: wall {result['wall']} s, controller {result['controller']} CPU-s)",
            flush=True,
        )
    cut, whole = [r["cut"] for r in rounds], [r["whole"] for r in rounds]
    print(f"median node CPU-s: cut {statistics.median(cut):.1f}, whole {statistics.median(whole):.1f}")


if __name__ == "__main__":
    main()
