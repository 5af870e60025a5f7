"""The proof of the agent on a real GPU (issues 4 and 10): figures against a reference, planted faults.

Each step in its own process, so no two share CUDA state:
  1. figures  bench/cuda_reference.py (CuPy, CUDA runtime directly), bench/agent_figures.py (the
              agent's torch kernels), the reference again (A/B/A: a machine drifting during the run
              shows as two different reference figures). Targets: host<->device within 1% of the
              reference, memory copy within 3% of the device-to-device ceiling.
  2. race     planted fault (a): about 1 ms of work queued on the default stream before every phase
              of the host<->device kernel, 40 runs: every verification must pass. The same runs with
              the stream ordering patched out show that the planted work does break an unordered
              kernel (so the 40/40 means something).
  3. quick    `--level quick` on a healthy GPU, wall time (target < 60 s on one GPU) and verdict.
  4. busy     planted fault (b): a competing bf16 GEMM process on the GPU. quick without a baseline
              must say "GPU busy: pid N (...)" and be INCONCLUSIVE (exit 4); with --allow-busy the
              GEMM floor must FAIL (exit 2).
  5. floor    planted fault (c): a thresholds file raising the GEMM floor above what the card does:
              compute.tflops_bf16 FAILs and its threshold names that file.
  6. pytest   tests/gpu (the 40/40 race test among them) and tests/unit/test_kernels_local.py.
  7. standard `--level standard`, only with --standard and when the budget allows.
The agent runs as the controller ships it: staged by r9700ctl.agentpack (data files as JSON).

Usage:  python3 bench/proof.py --out DIR [--gpu 0] [--gemm-seconds 5] [--budget-s 560] [--standard]
Writes at most 8 files to DIR: summary.json, log.txt, quick.json, fault-b-busy.json,
fault-b-allow.json, fault-c.json, pytest.txt, standard.json; prints a table last. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, no install

HOSTBW_TOLERANCE = 0.01
MEMORY_TOLERANCE = 0.03
QUICK_BUDGET_S = 60.0
RACE_RUNS = 40
ONE_MS_OF_SLEEP = 2_000_000  # torch.cuda._sleep cycles, about 1 ms at 2 GHz
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# --- children ------------------------------------------------------------------------------------


def race_child(gpu: int, runs: int, unordered: bool) -> int:
    """Planted fault (a): the host<->device kernel with ~1 ms of default-stream work before each phase."""
    import torch

    from r9700ctl.agent.kernels import hostbw
    from r9700ctl.agent.kernels.specs import CopySpec

    if unordered:  # the bug of issue 10, put back for the control run only
        torch.cuda.Stream.wait_stream = lambda self, stream: None  # type: ignore[method-assign]
    spec = CopySpec(
        gpus=(gpu,),
        size_bytes=64 << 20,
        windows=1,
        copies_per_window=2,
        warmup=1,
        pageable=False,
        planted_default_stream_cycles=ONE_MS_OF_SLEEP,
    )
    verified = {"h2d": 0, "d2h": 0, "both": 0}
    started = time.monotonic()
    for _ in range(runs):
        fig = hostbw.host_device_bandwidth(spec)["gpus"][str(gpu)]
        verified["h2d"] += fig["verify"]["h2d"]["ok"]
        verified["d2h"] += fig["verify"]["d2h"]["ok"]
        verified["both"] += fig["verified"]
    out = {"runs": runs, "unordered": unordered, "verified": verified, "wall_s": time.monotonic() - started}
    print(json.dumps(out))
    return 0


def busy_child(gpu: int, seconds: float, ready: Path) -> int:
    """Planted fault (b): the competing process, bf16 GEMMs on one GPU until `seconds` have passed."""
    import torch

    device = torch.device("cuda", gpu)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize(device)
    ready.write_text(str(os.getpid()))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(device)
    return 0


# --- the orchestrator ----------------------------------------------------------------------------


class Proof:
    def __init__(self, out: Path, gpu: int, budget_s: float) -> None:
        self.out = out
        self.gpu = gpu
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="r9700ctl-proof-"))
        self.log: list[str] = []
        self.summary: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "targets": {}}
        self.env = {**os.environ, **SAFE_ENV, "PYTHONUNBUFFERED": "1"}
        self._staged: Path | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        line = f"[{self.elapsed():6.1f} s] {text}"
        print(line, flush=True)
        self.log.append(line)

    def target(self, name: str, ok: Any, detail: Any = None) -> None:
        self.summary["targets"][name] = {"ok": bool(ok), "detail": detail}
        self.say(f"target {name}: {'MET' if ok else 'MISSED'} {detail if detail is not None else ''}")

    def run(
        self, cmd: list[str], timeout: float = 600, cwd: Path = ROOT, env: dict | None = None
    ) -> tuple[int, float, str]:
        start = time.monotonic()
        done = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env or self.env
        )
        wall = time.monotonic() - start
        self.log.append(
            f"$ {' '.join(cmd)}  (rc {done.returncode}, {wall:.1f} s)\n{done.stdout}{done.stderr[-6000:]}"
        )
        self.say(f"rc {done.returncode} in {wall:.1f} s: {' '.join(cmd)[:140]}")
        return done.returncode, wall, done.stdout

    def staged(self) -> Path:
        if self._staged is None:
            from r9700ctl import agentpack

            self._staged = agentpack.stage(self.tmp / "agent")
        return self._staged

    def agent(self, name: str, *args: str, timeout: float = 300) -> dict[str, Any]:
        """The staged agent with `args`; its report copied to OUT/<name>.json."""
        path = self.out / f"{name}.json"
        cmd = [sys.executable, "-m", "r9700ctl.agent", *args, "--json", str(path)]
        cmd += ["--journal-dir", str(self.tmp / "journal"), "--gpus", str(self.gpu)]
        env = {**self.env, "PYTHONPATH": str(self.staged())}
        rc, wall, stdout = self.run(cmd, timeout, cwd=self.staged(), env=env)
        print(stdout[-5000:], flush=True)
        report = json.loads(path.read_text()) if path.exists() else None
        return {"rc": rc, "wall_s": round(wall, 1), "report": report}

    # --- phases --------------------------------------------------------------------------------

    def figures(self, gemm_seconds: float) -> None:
        py, gpu = sys.executable, str(self.gpu)
        files = {k: self.tmp / f"{k}.json" for k in ("ref1", "agent", "ref2")}
        self.run([py, str(HERE / "cuda_reference.py"), "--gpu", gpu, "--json", str(files["ref1"])])
        figures_cmd = [py, str(HERE / "agent_figures.py"), "--gpu", gpu, "--json", str(files["agent"])]
        self.run([*figures_cmd, "--gemm-seconds", str(gemm_seconds), "--dtypes", "bf16,fp16,fp32"])
        self.run([py, str(HERE / "cuda_reference.py"), "--gpu", gpu, "--json", str(files["ref2"])])
        try:
            ref1, ref2, agent = (json.loads(files[k].read_text()) for k in ("ref1", "ref2", "agent"))
        except (OSError, ValueError) as err:
            self.summary["figures"] = {"error": f"{type(err).__name__}: {err}"}
            self.target("figures.measured", False, str(err))
            return
        figures: dict[str, Any] = {"card": ref1.get("name")}
        g = agent["hostbw"]["gpus"][gpu]
        for key in ("h2d_gbs", "d2h_gbs"):
            refs = [ref1["hostbw"][key], ref2["hostbw"][key]]
            figures[f"hostbw.{key}"] = _within(g[key], sum(refs) / 2, HOSTBW_TOLERANCE, refs)
            self.target(
                f"hostbw.{key}.within_1pct", figures[f"hostbw.{key}"]["ok"], figures[f"hostbw.{key}"]["gap"]
            )
        refs = [ref1["d2d"]["d2d_gbs"], ref2["d2d"]["d2d_gbs"]]
        figures["memory.copy_gbs"] = _within(
            agent["memory"]["copy_gbs"], sum(refs) / 2, MEMORY_TOLERANCE, refs
        )
        self.target(
            "memory.copy.within_3pct", figures["memory.copy_gbs"]["ok"], figures["memory.copy_gbs"]["gap"]
        )
        figures["memory.triad_gbs"] = agent["memory"]["triad_gbs"]
        figures["verified"] = {"hostbw": g["verified"], "memory": agent["memory"]["verified"]}
        gemm = agent.get("gemm", {}).get("gpus", {}).get(gpu, {})
        figures["gemm_tflops"] = {
            d: v["tflops"] for d, v in gemm.items() if isinstance(v, dict) and "tflops" in v
        }
        figures["telemetry"] = {k: v for k, v in gemm.get("telemetry", {}).items() if k != "throttle_groups"}
        figures["throttle_groups"] = gemm.get("telemetry", {}).get("throttle_groups")
        figures["references"] = {"ref1": _brief_ref(ref1), "ref2": _brief_ref(ref2)}
        self.summary["figures"] = figures

    def race(self) -> None:
        results = {}
        for unordered in (False, True):
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--race-child",
                str(RACE_RUNS),
                "--gpu",
                str(self.gpu),
            ]
            cmd += ["--unordered"] if unordered else []
            rc, _, stdout = self.run(cmd, timeout=240)
            try:
                results["unordered" if unordered else "ordered"] = json.loads(stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                results["unordered" if unordered else "ordered"] = {"rc": rc, "error": stdout[-500:]}
        self.summary["race"] = results
        ordered = results["ordered"].get("verified", {}).get("both")
        self.target("fault_a.verified_40_of_40", ordered == RACE_RUNS, f"{ordered}/{RACE_RUNS}")
        broken = results["unordered"].get("verified", {}).get("h2d")
        self.target(
            "fault_a.unordered_control_is_caught",
            broken is not None and broken < RACE_RUNS,
            f"h2d verified {broken}/{RACE_RUNS} with wait_stream patched out",
        )

    def quick(self) -> None:
        run = self.agent("quick", "--level", "quick")
        self.summary["quick"] = _brief_run(run)
        self.target("quick.under_60s", run["wall_s"] < QUICK_BUDGET_S, f"{run['wall_s']} s, exit {run['rc']}")
        self.target("quick.healthy_exit_0", run["rc"] == 0, _not_passing(run["report"]))

    @contextlib.contextmanager
    def competing_gemm(self):
        ready = self.tmp / "busy.ready"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--busy-child", "600", "--gpu", str(self.gpu)]
        cmd += ["--busy-ready", str(ready)]
        process = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, start_new_session=True, stdout=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 120
            while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            self.say(f"competing GEMM process pid {process.pid} {'ready' if ready.exists() else 'NOT ready'}")
            yield process.pid
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def busy(self) -> None:
        with self.competing_gemm() as pid:
            busy = self.agent("fault-b-busy", "--level", "quick")
            allow = self.agent("fault-b-allow", "--level", "quick", "--only", "compute", "--allow-busy")
        report = busy["report"] or {}
        flags = [r for r in report.get("results", []) if r["id"] == "gpu.busy"]
        said = bool(flags) and f"GPU busy: pid {pid} " in flags[0]["hint"]
        gemm = _result(report, "compute.tflops_bf16")
        self.summary["fault_b"] = {
            "competitor_pid": pid,
            "busy": _brief_run(busy),
            "allow_busy": _brief_run(allow),
            "banners": report.get("banners"),
            "gpu_busy": flags,
            "tflops_bf16_busy": gemm,
        }
        self.target("fault_b.says_gpu_busy_with_the_pid", said, flags[0]["hint"][:160] if flags else None)
        self.target(
            "fault_b.inconclusive_exit_4",
            busy["rc"] == 4 and report.get("status") == "INCONCLUSIVE",
            busy["rc"],
        )
        allowed = _result(allow["report"] or {}, "compute.tflops_bf16")
        self.target(
            "fault_b.allow_busy_gemm_floor_fails",
            allowed is not None and allowed["status"] == "FAIL" and allow["rc"] == 2,
            allowed and {k: allowed[k] for k in ("status", "value", "threshold")},
        )

    def floor(self) -> None:
        from r9700ctl import agentpack

        source = self.tmp / "raised-floor.yaml"
        source.write_text('models:\n  "NVIDIA H200":\n    compute:\n      peak_tflops_bf16: 2000\n')
        converted = agentpack.convert_thresholds(source, self.tmp / "raised-floor.json")
        run = self.agent("fault-c", "--level", "quick", "--only", "compute", "--thresholds", str(converted))
        result = _result(run["report"] or {}, "compute.tflops_bf16")
        self.summary["fault_c"] = {
            "thresholds": source.read_text(),
            "run": _brief_run(run),
            "tflops_bf16": result,
        }
        self.target(
            "fault_c.fails_naming_the_floors_source",
            result is not None
            and result["status"] == "FAIL"
            and f"{source} [NVIDIA H200]" in result["threshold"],
            result and result["threshold"],
        )

    def pytest(self) -> None:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"]
        cmd += ["tests/unit/test_kernels_local.py"]
        rc, wall, stdout = self.run(cmd, timeout=400)
        (self.out / "pytest.txt").write_text(stdout[-20000:])
        last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
        self.summary["pytest"] = {"rc": rc, "wall_s": round(wall, 1), "last_line": last}
        self.target("pytest.gpu_tests_pass", rc == 0, last)

    def standard(self) -> None:
        run = self.agent("standard", "--level", "standard", timeout=400)
        self.summary["standard"] = _brief_run(run)
        self.target("standard.healthy_exit_0", run["rc"] == 0, _not_passing(run["report"]))

    def save(self) -> None:
        self.summary["wall_s"] = round(self.elapsed(), 1)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))
        (self.out / "log.txt").write_text("\n".join(self.log) + "\n")


def _within(value: float, reference: float, tolerance: float, refs: list[float]) -> dict[str, Any]:
    gap = (value - reference) / reference
    return {
        "agent": value,
        "reference": reference,
        "ref_runs": refs,
        "gap": round(gap, 5),
        "ok": abs(gap) <= tolerance,
    }


def _brief_ref(ref: dict[str, Any]) -> dict[str, Any]:
    return {"hostbw": ref.get("hostbw"), "d2d": ref.get("d2d"), "versions": ref.get("versions")}


def _result(report: dict[str, Any], check_id: str) -> dict[str, Any] | None:
    return next((r for r in report.get("results", []) if r["id"] == check_id), None)


def _not_passing(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    keep = ("id", "subject", "status", "value", "unit", "hint")
    return [
        {k: r.get(k) for k in keep}
        for r in (report or {}).get("results", [])
        if r["status"] not in ("PASS", "SKIP")
    ]


def _brief_run(run: dict[str, Any]) -> dict[str, Any]:
    report = run["report"] or {}
    figures = {
        f"{r['id']} {r['subject']}": f"{r['status']} {r.get('value')} {r.get('unit') or ''}".strip()
        for r in report.get("results", [])
    }
    return {
        "rc": run["rc"],
        "wall_s": run["wall_s"],
        "status": report.get("status"),
        "counts": report.get("counts"),
        "banners": report.get("banners"),
        "results": figures,
        "not_passing": _not_passing(report),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--gemm-seconds", type=float, default=5.0)
    parser.add_argument("--budget-s", type=float, default=560.0)
    parser.add_argument(
        "--standard", action="store_true", help="also the standard level, if the budget allows"
    )
    parser.add_argument("--race-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--unordered", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--busy-child", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--busy-ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.race_child:
        return race_child(args.gpu, args.race_child, args.unordered)
    if args.busy_child:
        return busy_child(args.gpu, args.busy_child, args.busy_ready)
    if not args.out:
        parser.error("--out DIR is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    proof = Proof(out, args.gpu, args.budget_s)
    phases = [
        ("figures", lambda: proof.figures(args.gemm_seconds)),
        ("race", proof.race),
        ("quick", proof.quick),
        ("busy", proof.busy),
        ("floor", proof.floor),
        ("pytest", proof.pytest),
    ]
    try:
        for name, phase in phases:
            proof.say(f"== {name}")
            try:
                phase()
            except Exception as err:  # one broken phase must not lose the others' figures
                proof.target(f"{name}.ran", False, f"{type(err).__name__}: {err}")
            proof.save()
        if args.standard and proof.elapsed() < proof.budget_s - 200:
            proof.say("== standard")
            proof.standard()
        elif args.standard:
            proof.say(f"standard not run: {proof.elapsed():.0f} s of {proof.budget_s:.0f} s used")
    finally:
        proof.save()
    print("\nproof summary")
    for name, target in proof.summary["targets"].items():
        print(f"  {'MET   ' if target['ok'] else 'MISSED'} {name}: {str(target['detail'])[:150]}")
    met = sum(t["ok"] for t in proof.summary["targets"].values())
    print(f"  {met}/{len(proof.summary['targets'])} targets met in {proof.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
