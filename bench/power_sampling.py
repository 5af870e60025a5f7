"""Board power sampled at >= 10 Hz during GEMM, by the agent's own kernel, beside nvidia-smi.

Usage:  python3 bench/power_sampling.py [--gpu 0] [--seconds 60] [--out DIR]

Runs the agent's staged power phase (r9700ctl.agent.kernels.power: idle, then bf16 8192^3 GEMM on
the GPU) with its sampler at 0.1 s, and, at the same time and independently, `nvidia-smi
--query-gpu=power.draw.instant,power.draw.average,power.limit -lms 100` as the reference. Prints
the achieved sample rate, the peak (highest single reading) and the sustained draw (highest 5 s
mean, stats.max_window_mean) from both, against the card's power cap, then runs the power check's
judge on the agent's samples with a 1000 W PSU carrying the GPU and 200 W of host (the full path
to a verdict). Writes power-sampling.json and nvidia-smi.csv to --out. Not a test. Never changes
the GPU's settings: it reads the cap, it does not set it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install

from r9700ctl.agent import power_budget as power
from r9700ctl.agent import stats, thresholds
from r9700ctl.agent.checks import power as power_check
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.agent.kernels import power as power_kernel
from r9700ctl.agent.kernels.specs import PowerSpec

WINDOW_S = 5.0


def nvidia_smi_pci(gpu: int) -> str:
    done = subprocess.run(
        ["nvidia-smi", "-i", str(gpu), "--query-gpu=pci.bus_id", "--format=csv,noheader"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    bus = done.stdout.strip().lower()
    domain, _, rest = bus.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus


def reference(csv_text: str) -> dict:
    """nvidia-smi -lms 100 lines: "timestamp, instant W, average W, limit W"."""
    rows = []
    for line in csv_text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            continue
        try:
            stamp = time.mktime(time.strptime(cells[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            frac = float("0." + cells[0].split(".")[1]) if "." in cells[0] else 0.0
            rows.append((stamp + frac, float(cells[1]), float(cells[2]), float(cells[3])))
        except ValueError:
            continue
    if len(rows) < 2:
        return {"rows": len(rows)}
    t0 = rows[0][0]
    instant = [(t - t0, w) for t, w, _, _ in rows]
    average = [(t - t0, a) for t, _, a, _ in rows]
    return {
        "rows": len(rows),
        "rate_hz": (len(rows) - 1) / (rows[-1][0] - t0) if rows[-1][0] > t0 else None,
        "peak_instant_w": max(w for _, w in instant),
        "sustained_instant_w": stats.max_window_mean(instant, WINDOW_S),
        "peak_average_w": max(a for _, a in average),
        "power_limit_w": rows[-1][3],
    }


def judge(value: dict, gpu: int, address: str) -> list[dict]:
    """The whole judging path on these samples: a 1000 W PSU feeding this GPU and 200 W of host."""
    root = Path(tempfile.mkdtemp(prefix="r9700ctl-power-"))
    policy_path = root / power.POLICY_PATH
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(power.Policy({}, (power.Psu("psu1", 1000, (address,), 200),), 0.1).to_json())
    ctx = AgentContext(
        level="standard",
        gpus=[GpuInfo(index=gpu, pci_address=address, vendor="10de")],
        thresholds=thresholds.resolve(["NVIDIA H200"], ["10de"]),
        params={},
        root=root,
    )
    return [r.to_dict() for r in power_check.judge(ctx, value)]


def show(results: list[dict]) -> None:
    for r in results:
        head = f"  {r['id']:<22} {r['subject']:<6} {r['status']:<12} {r['value']} {r['unit']}"
        print(f"{head}  {r['hint'][:160]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default=".")
    parser.add_argument("--judge", metavar="POWER_SAMPLING_JSON", help="judge a recorded run again (no GPU)")
    args = parser.parse_args(argv)
    if args.judge:
        recorded = json.loads(Path(args.judge).read_text())
        value = {
            "stages": recorded["stages"],
            "samples": recorded["samples"],
            "sampler": {
                "source": recorded["agent"]["source"],
                "rate_hz": {str(recorded["gpu"]): recorded["agent"]["rate_hz"]},
            },
            "limits": recorded.get("limits", {}),
        }
        show(judge(value, recorded["gpu"], recorded["pci_address"]))
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    address = nvidia_smi_pci(args.gpu)
    query = "--query-gpu=timestamp,power.draw.instant,power.draw.average,power.limit"
    smi = subprocess.Popen(
        ["nvidia-smi", "-i", str(args.gpu), query, "--format=csv,noheader,nounits", "-lms", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    spec = PowerSpec(gpus=(args.gpu,), stage_s=args.seconds, idle_s=2.0, pci_addresses={args.gpu: address})
    started = time.monotonic()
    value = power_kernel.staged_power(spec)
    elapsed = time.monotonic() - started
    smi.terminate()
    smi_out, smi_err = smi.communicate(timeout=30)
    (out_dir / "nvidia-smi.csv").write_text(smi_out)

    samples = value["samples"]
    stage = next(s for s in value["stages"] if s["name"] == f"gpu{args.gpu}")
    loaded = [s for s in samples if stage["t0"] <= s["t"] <= stage["t1"]]
    instant = [(s["t"], s["power_w"]) for s in loaded if s.get("power_w") is not None]
    average = [(s["t"], s["power_avg_w"]) for s in loaded if s.get("power_avg_w") is not None]
    caps = [s["power_cap_w"] for s in samples if s.get("power_cap_w") is not None]
    agent = {
        "source": value["sampler"]["source"],
        "rate_hz": value["sampler"]["rate_hz"][str(args.gpu)],
        "samples_under_load": len(loaded),
        "peak_w": max(w for _, w in instant),
        "sustained_w": stats.max_window_mean(instant, WINDOW_S),
        "median_w": stats.median(w for _, w in instant),
        "peak_average_reading_w": max((w for _, w in average), default=None),
        "cap_w": caps[-1] if caps else None,
        "cap_default_w": next(
            (s["power_cap_default_w"] for s in samples if s.get("power_cap_default_w")), None
        ),
        "sampler_errors": value["sampler"]["errors"],
    }
    a = agent
    figures = [
        f"agent sampler ({a['source']}): {a['rate_hz']:.2f} Hz, {a['samples_under_load']} samples in "
        f"{args.seconds:g} s of GEMM",
        f"peak {a['peak_w']:.1f} W, sustained ({WINDOW_S:g} s) {a['sustained_w']:.1f} W",
        f"median {a['median_w']:.1f} W; cap {a['cap_w']} W (default {a['cap_default_w']} W)",
        f"NVML 1 s average peaked at {a['peak_average_reading_w']} W",
    ]
    print("; ".join(figures))
    ref = reference(smi_out)
    print(f"nvidia-smi -lms 100 reference: {json.dumps(ref)}; stderr: {smi_err.strip()[:200]}")

    results = judge(value, args.gpu, address)
    for r in results:
        print(
            f"  {r['id']:<22} {r['subject']:<6} {r['status']:<12} {r['value']} {r['unit']}  {r['hint'][:150]}"
        )
    document = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": args.gpu,
        "pci_address": address,
        "seconds": args.seconds,
        "elapsed_s": elapsed,
        "sustained_window_s": WINDOW_S,
        "agent": agent,
        "nvidia_smi_reference": ref,
        "stages": value["stages"],
        "limits": value["limits"],
        "versions": value["versions"],
        "devices": value["devices"],
        "results": results,
        "samples": samples,
    }
    (out_dir / "power-sampling.json").write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
