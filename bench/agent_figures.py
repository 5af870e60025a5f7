"""The agent's own kernels, called directly (no watchdog, no checks), for side-by-side comparison.

Usage:  python3 bench/agent_figures.py [--gpu 0] [--json out.json] [--gemm-seconds 5]
Runs: host<->device bandwidth (r9700ctl.agent.kernels.hostbw), memory copy/triad
(kernels.memory), GEMM under load with telemetry (kernels.gemm; 0 s skips it), and the P2P pair
kernel for every pair when there are two or more GPUs. Prints one line per figure. Not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install

import torch

from r9700ctl.agent.kernels import gemm, hostbw, memory, p2p
from r9700ctl.agent.kernels.specs import CopySpec, GemmSpec, MemorySpec, PairSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--json")
    parser.add_argument("--gemm-seconds", type=float, default=5.0)
    parser.add_argument("--dtypes", default="bf16")
    args = parser.parse_args(argv)
    out: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": args.gpu}
    t = time.monotonic()
    out["hostbw"] = hostbw.host_device_bandwidth(CopySpec(gpus=(args.gpu,)))
    out["hostbw_s"] = time.monotonic() - t
    g = out["hostbw"]["gpus"][str(args.gpu)]
    print(
        f"agent hostbw gpu{args.gpu}: h2d {g['h2d_gbs']:.2f} GB/s, d2h {g['d2h_gbs']:.2f} GB/s, "
        f"pageable h2d {g.get('pageable_h2d_gbs', 0):.2f} d2h {g.get('pageable_d2h_gbs', 0):.2f}, "
        f"verified {g['verified']}, host memory {g['host_memory']} ({out['hostbw_s']:.1f} s)"
    )
    t = time.monotonic()
    out["memory"] = memory.memory_bandwidth(MemorySpec(gpu=args.gpu))
    out["memory_s"] = time.monotonic() - t
    m = out["memory"]
    print(
        f"agent memory gpu{args.gpu}: copy {m['copy_gbs']:.1f} GB/s, triad {m['triad_gbs']:.1f} GB/s, "
        f"verified {m['verified']} ({out['memory_s']:.1f} s)"
    )
    count = torch.cuda.device_count()
    if count > 1:
        out["hostbw_all"] = hostbw.host_device_bandwidth(CopySpec(gpus=tuple(range(count)), pageable=False))
        for i, fig in out["hostbw_all"]["gpus"].items():
            print(f"agent hostbw all-at-once gpu{i}: h2d {fig['h2d_gbs']:.2f} d2h {fig['d2h_gbs']:.2f} GB/s")
        out["p2p"] = {}
        for a in range(count):
            for b in range(a + 1, count):
                r = p2p.pair_bandwidth(PairSpec(a=a, b=b))
                out["p2p"][f"{a}-{b}"] = r
                for key, d in r["directions"].items():
                    print(
                        f"agent p2p {key}: uni {d['unidirectional_gbs']:.2f} "
                        f"bidir {d['bidirectional_gbs']:.2f} bounce {d['host_bounce_gbs']:.2f} GB/s "
                        f"verified {d['verified']}"
                    )
    if args.gemm_seconds > 0:
        t = time.monotonic()
        dtypes = tuple(args.dtypes.split(","))
        out["gemm"] = gemm.gemm_under_load(
            GemmSpec(gpus=tuple(range(count)), dtypes=dtypes, seconds_per_dtype=args.gemm_seconds)
        )
        out["gemm_s"] = time.monotonic() - t
        for i, entry in out["gemm"]["gpus"].items():
            tel = entry["telemetry"]
            figures = ", ".join(
                f"{d} {entry[d]['tflops']:.1f} TFLOPS (ok {entry[d]['verified']})" for d in dtypes
            )
            print(
                f"agent gemm gpu{i}: {figures}; sclk median {tel.get('sclk_mhz', {}).get('median')} MHz, "
                f"power {tel.get('power_w', {}).get('median')} W of cap {tel.get('power_cap_w')} W, "
                f"groups {tel.get('throttle_groups')}, link {tel.get('link_under_load')}"
            )
        print(f"agent gemm sampler: {out['gemm']['sampler']} ({out['gemm_s']:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
