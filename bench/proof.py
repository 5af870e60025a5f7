"""The proof of the measurements on a real GPU (issue 4): the agent against an independent reference.

Order, each in its own process so neither shares state with the other:
  1. bench/cuda_reference.py   (CuPy, CUDA runtime directly)    -> ref1.json
  2. bench/agent_figures.py    (the agent's torch kernels)      -> agent.json
  3. bench/cuda_reference.py   again                             -> ref2.json
The agent's figure is compared with the mean of the two reference runs around it (A/B/A: a
drift of the machine during the run shows as ref1 != ref2, reported next to the verdict).
Targets: host<->device within 1% of the reference; memory copy within 3% of the D2D ceiling.
Then, unless --no-levels, `python3 -m r9700ctl.agent --level quick` (and `standard` with
--standard) run end to end with their wall time measured (target: quick < 60 s on one GPU).

Usage:  python3 bench/proof.py --out DIR [--gpu 0] [--standard] [--no-levels]
Writes DIR/{ref1,agent,ref2,compare}.json, the levels' JSON and log.txt; prints a table last. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTBW_TOLERANCE = 0.01
MEMORY_TOLERANCE = 0.03
QUICK_BUDGET_S = 60.0


def _run(cmd: list[str], log: list[str], timeout: float = 600) -> tuple[int, float]:
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.monotonic() - start
    log.append(f"$ {' '.join(cmd)}  (rc {done.returncode}, {wall:.1f} s)\n{done.stdout}{done.stderr[-4000:]}")
    print(done.stdout, end="")
    if done.returncode:
        print(done.stderr[-4000:], end="", file=sys.stderr)
    return done.returncode, wall


def _within(value: float, reference: float, tolerance: float) -> dict:
    gap = (value - reference) / reference
    return {
        "agent": value,
        "reference": reference,
        "gap": gap,
        "tolerance": tolerance,
        "ok": abs(gap) <= tolerance,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gemm-seconds", type=float, default=5.0)
    parser.add_argument("--standard", action="store_true", help="also run the standard level")
    parser.add_argument("--no-levels", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    py = sys.executable
    gpu = str(args.gpu)
    _run([py, str(HERE / "cuda_reference.py"), "--gpu", gpu, "--json", str(out / "ref1.json")], log)
    _run(
        [
            py,
            str(HERE / "agent_figures.py"),
            "--gpu",
            gpu,
            "--json",
            str(out / "agent.json"),
            "--gemm-seconds",
            str(args.gemm_seconds),
            "--dtypes",
            "bf16,fp16,fp32",
        ],
        log,
    )
    _run([py, str(HERE / "cuda_reference.py"), "--gpu", gpu, "--json", str(out / "ref2.json")], log)

    compare: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        ref1 = json.loads((out / "ref1.json").read_text())
        ref2 = json.loads((out / "ref2.json").read_text())
        agent = json.loads((out / "agent.json").read_text())
        g = agent["hostbw"]["gpus"][gpu]
        for key in ("h2d_gbs", "d2h_gbs"):
            ref = (ref1["hostbw"][key] + ref2["hostbw"][key]) / 2
            compare[f"hostbw.{key}"] = {
                **_within(g[key], ref, HOSTBW_TOLERANCE),
                "ref_runs": [ref1["hostbw"][key], ref2["hostbw"][key]],
            }
        ceiling = (ref1["d2d"]["d2d_gbs"] + ref2["d2d"]["d2d_gbs"]) / 2
        compare["memory.copy_gbs"] = {
            **_within(agent["memory"]["copy_gbs"], ceiling, MEMORY_TOLERANCE),
            "ref_runs": [ref1["d2d"]["d2d_gbs"], ref2["d2d"]["d2d_gbs"]],
        }
        compare["memory.triad_fraction_of_ceiling"] = agent["memory"]["triad_gbs"] / ceiling
        compare["card"] = ref1["name"]
    except (OSError, KeyError, ValueError) as err:
        compare["error"] = f"{type(err).__name__}: {err}"

    if not args.no_levels:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for level in ["quick"] + (["standard"] if args.standard else []):
            start = time.monotonic()
            cmd = [
                py,
                "-m",
                "r9700ctl.agent",
                "--level",
                level,
                "--json",
                str(out / f"{level}.json"),
                "--journal-dir",
                str(Path(tempfile.gettempdir()) / "r9700ctl-proof-journal"),
            ]
            done = subprocess.run(
                cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1500, check=False
            )
            wall = time.monotonic() - start
            log.append(
                f"$ {' '.join(cmd)}  (rc {done.returncode}, {wall:.1f} s)\n{done.stdout}\n"
                f"--- stderr ---\n{done.stderr[-20000:]}"
            )
            compare[f"level.{level}"] = {"wall_s": wall, "exit_code": done.returncode}
            print(done.stdout[-6000:])
            print(f"level {level}: exit {done.returncode}, {wall:.1f} s")
        if "level.quick" in compare:
            compare["level.quick"]["budget_s"] = QUICK_BUDGET_S
            compare["level.quick"]["ok"] = compare["level.quick"]["wall_s"] < QUICK_BUDGET_S

    (out / "compare.json").write_text(json.dumps(compare, indent=1))
    (out / "log.txt").write_text("\n".join(log))
    print("\nproof summary")
    for key, v in compare.items():
        if isinstance(v, dict) and "gap" in v:
            print(
                f"  {key:16s} agent {v['agent']:9.2f}  reference {v['reference']:9.2f}  gap {v['gap']:+.2%}  "
                f"(tolerance {v['tolerance']:.0%})  {'OK' if v['ok'] else 'MISSED'}  refs {v['ref_runs']}"
            )
        elif isinstance(v, dict):
            print(f"  {key:16s} {v}")
        else:
            print(f"  {key:16s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
