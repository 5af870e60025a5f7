"""The agent's multi-process kernels on every GPU of this machine, one process per GPU (NCCL/RCCL).

Runs through the agent's own launcher (r9700ctl.agent.watchdog.run_ranks), as the checks do:
  all-reduce busbw sweep, P2P on and with NCCL_P2P_DISABLE=1 (>= 2 GPUs)
  scaling 1 -> 2 -> 4 -> ... -> N of the LLaMA-3-70B-shaped tensor-parallel layer step
  stability: p50/p95/p99 of the step on all GPUs
On one GPU the all-reduce runs with world size 1 (a no-op: busbw 0) only to prove the path.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as the lent H200 machines require.

Usage:  python3 bench/multi_gpu.py [--json out.json] [--tokens 2048] [--iterations 1000]
Not a test: prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from r9700ctl.agent import watchdog
from r9700ctl.agent.kernels import collective, figures, scaling, stability, timing
from r9700ctl.agent.kernels.specs import AllReduceSpec, StepSpec

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    count = torch.cuda.device_count()
    out: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpus": count, "versions": timing.versions()}
    sizes = [s * timing.MiB for s in (1, 16, 64, 256, 1024)]
    modes = {"p2p_on": {}, "p2p_off": {"NCCL_P2P_DISABLE": "1"}} if count > 1 else {"p2p_on": {}}
    for mode, extra in modes.items():
        o = watchdog.run_ranks(
            f"allreduce.{mode}",
            count,
            collective.allreduce_sweep,
            (AllReduceSpec(sizes_bytes=tuple(sizes), dtype="bf16"),),
            timeout_s=300,
            backend="nccl",
            env={**SAFE_ENV, **extra},
        )
        out[f"allreduce_{mode}"] = o.to_dict()
        for row in o.value.get("sizes", []):
            print(
                f"allreduce {mode} n={count} {row['size_bytes'] >> 20} MiB: busbw {row['busbw_gbs']:.1f} "
                f"algbw {row['algbw_gbs']:.1f} GB/s, {row['time_us']:.0f} us, wrong {row['wrong']}"
            )
        if not o.ok:
            print(f"allreduce {mode}: {o.status} {o.error[-2000:]}")
    for mode, extra in modes.items():
        step_ms, share = {}, {}
        for n in figures.world_sizes(count):
            o = watchdog.run_ranks(
                f"scaling.{mode}.n{n}",
                n,
                scaling.tp_scaling_rank,
                (StepSpec(tokens=args.tokens, iterations=30, warmup=5, repeats=3),),
                timeout_s=300,
                backend="nccl",
                env={**SAFE_ENV, **extra},
            )
            out[f"scaling_{mode}_n{n}"] = o.to_dict()
            if o.ok:
                step_ms[n], share[n] = o.value["step_ms"], o.value["comm_share"]
                print(
                    f"scaling {mode} n={n}: step {o.value['step_ms']:.2f} ms, comm share "
                    f"{o.value['comm_share']:.1%}, {o.value['rank_tflops']:.0f} TFLOPS per rank"
                )
            else:
                print(f"scaling {mode} n={n}: {o.status} {o.error[-2000:]}")
        if 1 in step_ms:
            out[f"scaling_{mode}_table"] = figures.scaling_table(step_ms, share)
            for row in out[f"scaling_{mode}_table"]:
                print(f"scaling {mode} table: {row}")
    o = watchdog.run_ranks(
        "stability",
        count,
        stability.latency_rank,
        (
            StepSpec(
                tokens=args.tokens, iterations=args.iterations, repeats=args.repeats, warmup=10, warmup_s=5.0
            ),
        ),
        timeout_s=600,
        backend="nccl",
        env=SAFE_ENV,
    )
    out["stability"] = o.to_dict()
    print(f"stability n={count}: {o.status} {o.value.get('median')} {o.error[-2000:] if o.error else ''}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
