"""Issue 6 in one command: the multi-GPU figures against independent references, and planted faults.

Phases, in this order (--phases picks some). Every step runs in its own process with a timeout
(process group killed at the deadline); a phase that would not fit what is left of --budget-s
is skipped and listed with the command that runs it, so a machine's per-command limit is never
hit blind. Nothing here imports torch or CuPy: a hung GPU cannot hang the orchestrator.

  p2p        every ordered pair, unidirectional and bidirectional GB/s: the agent's kernel
             (kernels.p2p.pair_bandwidth: torch copy_ between devices) between two runs of
             bench/cuda_reference.py --peer-only (cudaMemcpyPeerAsync timed with CUDA events,
             copies queued back to back). Target: within 5% of the references' mean (A/B/A).
  allreduce  bus bandwidth at 64 MiB..1 GiB (bf16): the agent's kernel through its own launcher
             (kernels.collective.allreduce_sweep, one process per GPU, NCCL) between two runs of
             bench/nccl_reference.py (cupy.cuda.nccl, one process per GPU), with P2P on and with
             NCCL_P2P_DISABLE=1. Target: within 5%. On one GPU both run at world size 1 (the
             communicators initialise; busbw is 0 by definition).
  fault      planted faults judged by the default thresholds, each a real agent run
             (`--level quick --only compute,collective`): A healthy (the baseline); B healthy
             again with --baseline A (must pass); C while a competing process runs bf16 GEMMs on
             GPU 1 (GPU 0 on a one-GPU machine), --baseline A (must be flagged); D under
             NCCL_P2P_DISABLE=1, --baseline A (>= 2 GPUs; must be flagged).
  standard   `python -m r9700ctl.agent --level standard` on all GPUs: its JSON, verdicts and the
             scaling 1 -> 2 -> 4 -> 8 of the tensor-parallel step with P2P on and with
             NCCL_P2P_DISABLE=1. With more than 4 GPUs the agent's p2p check is left out by default
             (--standard-p2p auto): the p2p phase measures the same matrix with the same kernel,
             while one spawned step per pair costs minutes; `--standard-p2p only` runs it alone.

NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set in
this process before any other starts, so every child inherits them; children report what they
saw and the summary checks it.

Usage:  python3 bench/multi_gpu_proof.py --out DIR [--phases p2p,allreduce,fault,standard]
            [--budget-s 560] [--standard-p2p auto|yes|no|only]
Writes at most 8 files under DIR: summary.json (every figure and comparison), log.txt
(commands, exit codes, output tails), standard.json and fault-a..d.json (agent reports).
Prints a short table last. Exit 0 when everything that ran met its target, 1 when something
missed or could not run, 3 without a GPU. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(SAFE_ENV)  # first thing: every process started from here inherits it

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, no install

from r9700ctl.agent import watchdog  # noqa: E402 (standard library only: no torch in this process)

PHASES = ("p2p", "allreduce", "fault", "standard")
AGREEMENT = 0.05  # issue 6: agent and reference within 5%
MiB = 1 << 20
# The standard level's p2p parameters (checks/p2p.py), so the matrix is the one the agent judges.
P2P_SIZE_MIB, P2P_WINDOWS, P2P_COPIES = 256, 5, 10
ALLREDUCE_SIZES_MIB = (64, 128, 256, 512, 1024)  # issue 6: 64 MiB..1 GiB
ALLREDUCE_WINDOWS, ALLREDUCE_WARMUP = 5, 5
FAULT_CHECKS = "compute,collective"
BUSY_READY_TIMEOUT_S = 120.0
OUTPUT_TAIL = 6000
MODES = {"p2p_on": {}, "p2p_off": {"NCCL_P2P_DISABLE": "1"}}


# --- what runs in children -----------------------------------------------------------------------


def agent_p2p_matrix(indices: list[int], size: int, windows: int, copies: int) -> dict[str, Any]:
    """Child: the agent's P2P kernel for every pair (both directions each), with the host bounce."""
    from r9700ctl.agent.kernels import p2p
    from r9700ctl.agent.kernels.specs import PairSpec

    pairs = {}
    for position, a in enumerate(indices):
        for b in indices[position + 1 :]:
            pairs[f"{a}-{b}"] = p2p.pair_bandwidth(
                PairSpec(a=a, b=b, size_bytes=size, windows=windows, copies_per_window=copies)
            )
    return {"pairs": pairs, "safe_env": {k: os.environ.get(k) for k in SAFE_ENV}}


def agent_allreduce_rank(
    rank: int, world: int, sizes: list[int], windows: int, warmup: int
) -> dict[str, Any]:
    """Rank child: the agent's all-reduce sweep, plus the environment this rank saw."""
    from r9700ctl.agent.kernels import collective
    from r9700ctl.agent.kernels.specs import AllReduceSpec

    spec = AllReduceSpec(sizes_bytes=tuple(sizes), dtype="bf16", windows=windows, warmup=warmup)
    out = collective.allreduce_sweep(rank, world, spec)
    out["safe_env"] = {k: os.environ.get(k) for k in SAFE_ENV}
    out["nccl_p2p_disable"] = os.environ.get("NCCL_P2P_DISABLE")
    return out


def busy_main(gpu: int, seconds: float, ready: Path) -> int:
    """The competing process of fault C: bf16 GEMMs on one GPU until `seconds` have passed."""
    import torch

    device = torch.device("cuda", gpu)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    deadline = time.monotonic() + seconds
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(device)
    ready.write_text(json.dumps({"pid": os.getpid(), "safe_env": {k: os.environ.get(k) for k in SAFE_ENV}}))
    while time.monotonic() < deadline:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(device)
    return 0


# --- comparisons (pure) --------------------------------------------------------------------------


def gap(value: float, reference: float) -> float:
    return (value - reference) / reference if reference else float("inf")


def compare_p2p(agent: dict[str, Any], references: list[dict[str, Any]]) -> dict[str, Any]:
    """Per ordered pair: the agent's uni/bidir GB/s against the mean of the reference runs."""
    rows = []
    for pair in agent.get("pairs", {}).values():
        for direction, fig in pair["directions"].items():
            refs = [r["peer"][direction] for r in references if direction in r.get("peer", {})]
            if not refs:
                continue
            row: dict[str, Any] = {
                "direction": direction,
                "can_access_peer": pair["can_access_peer"][direction],
            }
            for kind in ("unidirectional", "bidirectional"):
                runs = [r[f"{kind}_gbs"] for r in refs]
                mean = statistics.fmean(runs)
                row[kind] = {
                    "agent": fig[f"{kind}_gbs"],
                    "reference_runs": runs,
                    "gap": gap(fig[f"{kind}_gbs"], mean),
                }
            row["host_bounce_gbs"] = fig.get("host_bounce_gbs")
            row["verified_agent"] = fig.get("verified")
            row["verified_reference"] = all(
                r["verified_unidirectional"] and r["verified_bidirectional"] for r in refs
            )
            rows.append(row)
    out: dict[str, Any] = {"pairs": rows}
    for kind in ("unidirectional", "bidirectional"):
        if rows:
            worst = max(rows, key=lambda r: abs(r[kind]["gap"]))
            out[kind] = {
                "agent_median_gbs": statistics.median(r[kind]["agent"] for r in rows),
                "reference_median_gbs": statistics.median(
                    statistics.fmean(r[kind]["reference_runs"]) for r in rows
                ),
                "worst_gap": worst[kind]["gap"],
                "worst_direction": worst["direction"],
                "within": all(abs(r[kind]["gap"]) <= AGREEMENT for r in rows),
            }
    out["verified"] = bool(rows) and all(r["verified_agent"] and r["verified_reference"] for r in rows)
    return out


def compare_allreduce(agent: dict[str, Any], references: list[dict[str, Any]], world: int) -> dict[str, Any]:
    """Per size: the agent's busbw against the mean of the reference runs (n >= 2)."""
    rows = []
    ref_rows = [{r["size_bytes"]: r for r in ref.get("rows", [])} for ref in references]
    for row in agent.get("sizes", []):
        size = row["size_bytes"]
        refs = [by_size[size] for by_size in ref_rows if size in by_size]
        entry: dict[str, Any] = {
            "size_bytes": size,
            "agent_busbw_gbs": row["busbw_gbs"],
            "agent_algbw_gbs": row["algbw_gbs"],
            "agent_wrong": row["wrong"],
            "reference_busbw_runs": [r["busbw_gbs"] for r in refs],
            "reference_algbw_runs": [r["algbw_gbs"] for r in refs],
            "reference_wrong": sum(r["wrong"] for r in refs),
        }
        if world >= 2 and refs:
            entry["gap"] = gap(row["busbw_gbs"], statistics.fmean(entry["reference_busbw_runs"]))
        rows.append(entry)
    compared = [r for r in rows if "gap" in r]
    return {
        "world_size": world,
        "rows": rows,
        "within": bool(compared) and all(abs(r["gap"]) <= AGREEMENT for r in compared),
        "worst_gap": max((r["gap"] for r in compared), key=abs) if compared else None,
        "no_wrong": all(r["agent_wrong"] == 0 and r["reference_wrong"] == 0 for r in rows),
    }


def non_passing(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Results a reader must look at: anything but PASS and SKIP."""
    return [
        {k: r.get(k) for k in ("id", "subject", "status", "value", "unit", "hint")}
        for r in report.get("results", [])
        if r.get("status") not in ("PASS", "SKIP")
    ]


def judge_faults(runs: dict[str, dict[str, Any]], busy_gpu: int) -> dict[str, Any]:
    """Did the default thresholds pass the healthy rerun and flag each planted fault?"""
    out: dict[str, Any] = {}
    healthy = runs.get("b", {}).get("report")
    if healthy is not None:
        baseline_ok = all(
            r["status"] == "PASS" for r in healthy["results"] if r["id"].startswith("baseline.")
        )
        out["healthy_passes"] = healthy.get("exit_code") == 0 and baseline_ok
    busy = runs.get("c", {}).get("report")
    if busy is not None:
        # Issue 10: a busy GPU is found before measuring (gpu.busy) and its figures are INCONCLUSIVE.
        flags = [
            r
            for r in non_passing(busy)
            if r["status"] in ("WARN", "FAIL", "INCONCLUSIVE")
            and (r["subject"] == f"gpu{busy_gpu}" or r["id"].startswith("baseline."))
        ]
        out["busy_flagged"] = bool(flags)
        out["busy_flags"] = flags
    p2p_off = runs.get("d", {}).get("report")
    if p2p_off is not None:
        flags = [
            r for r in non_passing(p2p_off) if r["id"].startswith("baseline.busbw") and r["status"] == "FAIL"
        ]
        out["p2p_off_flagged"] = bool(flags)
        out["p2p_off_names_the_setting"] = any("NCCL_P2P_DISABLE" in (r.get("hint") or "") for r in flags)
        out["p2p_off_flags"] = flags
    return out


def standard_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The standard level's verdict and the figures issue 6 asks for."""
    results = report.get("results", [])
    out: dict[str, Any] = {
        "status": report.get("status"),
        "exit_code": report.get("exit_code"),
        "duration_s": report.get("duration_s"),
        "counts": report.get("counts"),
        "not_passing": non_passing(report),
        "steps": [{k: s.get(k) for k in ("step", "status", "duration_s")} for s in report.get("steps", [])],
        "variables": (report.get("environment") or {}).get("variables"),
    }
    scaling = [r for r in results if r["id"] == "scaling.tp" and r.get("metric") == "speedup"]
    out["scaling"] = [
        {
            "subject": r["subject"],
            "speedup": r["value"],
            "efficiency": r["evidence"].get("efficiency"),
            "step_ms": r["evidence"].get("step_ms"),
            "comm_share": r["evidence"].get("comm_share"),
        }
        for r in scaling
    ]
    out["allreduce"] = {
        r["subject"]: [(row["size_bytes"], row["busbw_gbs"]) for row in r["evidence"].get("sizes", [])]
        for r in results
        if r["id"] == "collective.allreduce" and r["status"] not in ("SKIP", "ERROR")
    }
    p2p = [
        r["value"] for r in results if r["id"] == "p2p.bandwidth" and isinstance(r.get("value"), (int, float))
    ]
    if p2p:
        out["p2p_unidirectional_gbs"] = {"min": min(p2p), "median": statistics.median(p2p), "max": max(p2p)}
    out["stability"] = [
        {"subject": r["subject"], "p99_over_p50": r["value"], "p50_ms": r["evidence"].get("p50_ms")}
        for r in results
        if r["id"] == "stability.latency" and r["status"] not in ("SKIP", "ERROR")
    ]
    return out


# --- the run -------------------------------------------------------------------------------------


@dataclass
class Done:
    rc: int | None  # None: killed at its timeout
    wall_s: float
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def pairs_of(n: int) -> int:
    return n * (n - 1) // 2


class Proof:
    def __init__(self, out: Path, budget_s: float, standard_p2p: str) -> None:
        self.out = out
        self.budget_s = budget_s
        self.standard_p2p = standard_p2p
        self.started = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="r9700ctl-proof-"))
        self.log: list[str] = []
        self.gpus = 0
        self.summary: dict[str, Any] = {
            "tool": "bench/multi_gpu_proof.py",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "safe_env": SAFE_ENV,
            "phases": {},
            "not_run": [],
            "targets": {},
            "safe_env_seen": [],
        }

    # -- plumbing --

    def remaining(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def cap(self, wanted: float) -> float:
        """A child's timeout: what it needs, never more than what is left of the budget."""
        return max(20.0, min(wanted, self.remaining() - 10))

    def save(self) -> None:
        self.summary["wall_s"] = round(time.monotonic() - self.started, 1)
        _write_atomic(self.out / "summary.json", json.dumps(self.summary, indent=1, default=str))
        _write_atomic(self.out / "log.txt", "\n".join(self.log) + "\n")

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f} s] {text}"
        print(line, flush=True)
        self.log.append(line)

    def run(
        self,
        name: str,
        cmd: list[str],
        timeout_s: float,
        extra_env: dict[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> Done:
        """A command in its own process group, output to a file; the group is killed at the deadline."""
        output = self.tmp / f"{name}.out"
        env = {**os.environ, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        self.say(
            f"$ {' '.join(cmd)}  (timeout {timeout_s:.0f} s{', env ' + str(extra_env) if extra_env else ''})"
        )
        with open(output, "w", encoding="utf-8") as sink:
            try:
                process = subprocess.Popen(
                    cmd, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            except OSError as exc:
                self.say(f"  could not start: {exc}")
                return Done(127, 0.0, str(exc))
            try:
                rc: int | None = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                rc = None
        text = output.read_text(encoding="utf-8", errors="replace")
        done = Done(rc, time.monotonic() - started, text)
        self.say(f"  rc {'TIMEOUT' if rc is None else rc}, {done.wall_s:.1f} s")
        self.log.append(text[-OUTPUT_TAIL:])
        return done

    def not_run(self, what: str, why: str, phases: str | None = None) -> dict[str, Any]:
        entry = {"what": what, "why": why}
        if phases:
            entry["command"] = f"python3 bench/multi_gpu_proof.py --out $OUT --phases {phases}"
        self.summary["not_run"].append(entry)
        self.say(f"not run: {what}: {why}")
        return {"not_run": why}

    def seen(self, who: str, env: dict[str, Any] | None, keys: tuple[str, ...] = tuple(SAFE_ENV)) -> None:
        """Record what a child saw of the safe variables (`keys`: those it could report)."""
        ok = isinstance(env, dict) and all(env.get(k) == SAFE_ENV[k] for k in keys)
        self.summary["safe_env_seen"].append({"process": who, "env": env, "ok": ok})

    def target(self, name: str, ok: bool | None) -> None:
        self.summary["targets"][name] = bool(ok)

    # -- machine --

    def discover(self) -> int:
        probe = (
            "import json, torch; n = torch.cuda.device_count(); "
            "print(json.dumps({'gpus': n, 'name': torch.cuda.get_device_name(0) if n else None, "
            "'torch': torch.__version__, 'cuda': torch.version.cuda}))"
        )
        done = self.run("discover", [sys.executable, "-c", probe], 180)
        facts: dict[str, Any] = {}
        with contextlib.suppress(ValueError, IndexError):
            facts = json.loads(done.output.strip().splitlines()[-1])
        for name, cmd in (("nvidia_smi", ["nvidia-smi", "-L"]), ("topology", ["nvidia-smi", "topo", "-m"])):
            facts[name] = self.run(name, cmd, 60).output[-4000:]
        self.summary["machine"] = facts
        self.gpus = int(facts.get("gpus") or 0)
        return self.gpus

    # -- phases --

    def estimate(self, phase: str) -> float:
        """Seconds a phase needs on this many GPUs (generous: from the one-GPU H200 runs)."""
        n, pairs = self.gpus, pairs_of(self.gpus)
        if phase == "p2p":
            return 40 + 4 * pairs
        if phase == "allreduce":
            launches = 2 if n < 2 else 6
            return launches * (15 + 2 * n)
        if phase == "fault":
            return (3 if n < 2 else 4) * (40 + 2 * n)
        include = self.include_p2p_in_standard()
        if include == "only":
            return 40 + 6 * pairs
        return 110 + 35 * n + (6 * pairs if include == "yes" else 0)

    def include_p2p_in_standard(self) -> str:
        if self.standard_p2p == "auto":
            return "yes" if self.gpus <= 4 else "no"
        return self.standard_p2p

    def phase_p2p(self) -> dict[str, Any]:
        n = self.gpus
        if n < 2:
            return self.not_run("p2p matrix", "needs >= 2 GPUs")
        per_pair = 4.0
        refs: list[dict[str, Any]] = []
        agent: dict[str, Any] | None = None
        for label in ("p2p-ref1", "p2p-agent", "p2p-ref2"):
            if label == "p2p-agent":
                self.say(f"agent P2P kernel on {pairs_of(n)} pairs")
                outcome = watchdog.run_in_child(
                    "proof.p2p",
                    agent_p2p_matrix,
                    (list(range(n)), P2P_SIZE_MIB * MiB, P2P_WINDOWS, P2P_COPIES),
                    timeout_s=self.cap(60 + 3 * per_pair * pairs_of(n)),
                )
                self.say(f"  {outcome.status}, {outcome.duration_s:.1f} s {outcome.error[-2000:]}")
                self.log.append(outcome.output[-OUTPUT_TAIL:])
                agent = outcome.value if outcome.ok else None
                continue
            path = self.tmp / f"{label}.json"
            cmd = [sys.executable, str(HERE / "cuda_reference.py"), "--peer-only", "--json", str(path)]
            cmd += ["--peer-mib", str(P2P_SIZE_MIB), "--windows", str(P2P_WINDOWS)]
            cmd += ["--peer-per-window", str(P2P_COPIES)]
            done = self.run(label, cmd, self.cap(60 + per_pair * pairs_of(n)))
            ref = _read_json(path) if done.ok else None
            if ref is not None:
                refs.append(ref)
                self.seen(label, ref.get("safe_env"))
        if agent is None or not refs:
            self.target("p2p.measured", False)
            return {"error": "the agent's kernel or every reference run failed (log.txt)", "references": refs}
        self.seen("p2p-agent", agent.get("safe_env"))
        result = compare_p2p(agent, refs)
        self.target("p2p.unidirectional_within_5pct", result.get("unidirectional", {}).get("within"))
        self.target("p2p.bidirectional_within_5pct", result.get("bidirectional", {}).get("within"))
        self.target("p2p.data_verified", result["verified"])
        result["reference_runs"] = len(refs)
        return result

    def phase_allreduce(self) -> dict[str, Any]:
        n = self.gpus
        sizes = [s * MiB for s in ALLREDUCE_SIZES_MIB]
        modes = MODES if n >= 2 else {"p2p_on": {}}
        if n < 2:
            self.not_run("all-reduce with NCCL_P2P_DISABLE=1 and the 5% comparison", "needs >= 2 GPUs")
        out: dict[str, Any] = {}
        launch = 30 + 3 * n
        for mode, extra in modes.items():
            refs, agent = [], None
            labels = ["ref1", "agent", "ref2"] if n >= 2 else ["ref1", "agent"]
            for label in labels:
                if label == "agent":
                    self.say(f"agent all-reduce sweep, {n} rank(s), {mode}")
                    outcome = watchdog.run_ranks(
                        f"proof.allreduce.{mode}",
                        n,
                        agent_allreduce_rank,
                        (sizes, ALLREDUCE_WINDOWS, ALLREDUCE_WARMUP),
                        timeout_s=self.cap(3 * launch),
                        backend="nccl",
                        env=extra,
                    )
                    self.say(f"  {outcome.status}, {outcome.duration_s:.1f} s {outcome.error[-2000:]}")
                    self.log.append(outcome.output[-OUTPUT_TAIL:])
                    if outcome.ok:
                        agent = outcome.value
                        for rank, value in enumerate(outcome.values):
                            self.seen(f"allreduce-agent-{mode}-rank{rank}", value.get("safe_env"))
                    continue
                path = self.tmp / f"allreduce-{mode}-{label}.json"
                cmd = [sys.executable, str(HERE / "nccl_reference.py"), "--json", str(path)]
                cmd += [
                    "--sizes-mib",
                    ",".join(map(str, ALLREDUCE_SIZES_MIB)),
                    "--windows",
                    str(ALLREDUCE_WINDOWS),
                ]
                cmd += ["--timeout", str(int(self.cap(3 * launch)))]
                done = self.run(f"allreduce-{mode}-{label}", cmd, self.cap(3 * launch) + 15, extra)
                ref = _read_json(path)
                if ref is not None and ref.get("status") == "ok":
                    refs.append(ref)
                    for rank, env in enumerate(ref.get("safe_env_per_rank", [])):
                        self.seen(f"allreduce-{label}-{mode}-rank{rank}", env)
                elif ref is not None or not done.ok:
                    out.setdefault("reference_errors", []).append(
                        (ref or {}).get("error") or done.output.strip()[-500:]
                    )
            if agent is None:
                out[mode] = {"error": "the agent's sweep failed (log.txt)", "references": refs}
                self.target(f"allreduce.{mode}.measured", False)
                continue
            result = compare_allreduce(agent, refs, n)
            result["agent_p2p_disable_seen"] = agent.get("nccl_p2p_disable")
            result["reference_nccl_env"] = [r.get("nccl_env") for r in refs]
            result["nccl_versions"] = {
                "agent (torch)": (agent.get("versions") or {}).get("nccl"),
                "reference (cupy)": [r.get("nccl_version") for r in refs],
            }
            out[mode] = result
            self.target(f"allreduce.{mode}.no_wrong", result["no_wrong"])
            if n >= 2:
                self.target(f"allreduce.{mode}.within_5pct", result["within"])
            else:
                self.target("allreduce.nccl_reference_initialises", bool(refs))
        return out

    def agent_run(self, label: str, args: list[str], timeout_s: float, extra_env=None) -> dict[str, Any]:
        path = self.out / f"{label}.json"
        cmd = [sys.executable, "-m", "r9700ctl.agent", *args, "--json", str(path)]
        cmd += ["--journal-dir", str(self.tmp / "journal")]
        staged = self.staged_agent()
        done = self.run(label, cmd, timeout_s, {**(extra_env or {}), "PYTHONPATH": str(staged)}, cwd=staged)
        report = _read_json(path)
        entry: dict[str, Any] = {"rc": done.rc, "wall_s": round(done.wall_s, 1), "report": report}
        if report is not None:
            entry["status"] = report.get("status")
            entry["not_passing"] = non_passing(report)
            variables = (report.get("environment") or {}).get("variables") or {}
            # The agent's report captures NCCL_* variables only: check the one it can show.
            self.seen(label, {"NCCL_NVLS_ENABLE": variables.get("NCCL_NVLS_ENABLE")}, ("NCCL_NVLS_ENABLE",))
        else:
            entry["output_tail"] = done.output[-2000:]
        return entry

    def staged_agent(self) -> Path:
        """The agent as the controller ships it (code + data as JSON), staged once in the scratch dir."""
        staged = self.tmp / "agent"
        if not (staged / "r9700ctl").is_dir():
            from r9700ctl import agentpack

            agentpack.stage(staged)
        return staged

    def phase_fault(self) -> dict[str, Any]:
        n = self.gpus
        busy_gpu = min(1, n - 1)
        per_run = self.cap(3 * (40 + 2 * n))
        base = ["--level", "quick", "--only", FAULT_CHECKS]
        runs: dict[str, dict[str, Any]] = {}
        runs["a"] = self.agent_run("fault-a", base, per_run)
        baseline_path = str(self.out / "fault-a.json")
        if runs["a"]["report"] is None:
            self.target("fault.baseline_run", False)
            return {"runs": _brief(runs), "error": "the healthy baseline run gave no report"}
        runs["b"] = self.agent_run("fault-b", [*base, "--baseline", baseline_path], self.cap(per_run))
        runs["c"] = self.with_busy_gpu(
            busy_gpu,
            lambda: self.agent_run("fault-c", [*base, "--baseline", baseline_path], self.cap(per_run)),
        )
        if n >= 2:
            runs["d"] = self.agent_run(
                "fault-d", [*base, "--baseline", baseline_path], self.cap(per_run), {"NCCL_P2P_DISABLE": "1"}
            )
        else:
            self.not_run(
                "fault D (a P2P-on baseline against a run under NCCL_P2P_DISABLE=1)", "needs >= 2 GPUs"
            )
        verdict = judge_faults(runs, busy_gpu)
        self.target("fault.healthy_passes", verdict.get("healthy_passes"))
        self.target("fault.busy_gpu_flagged", verdict.get("busy_flagged"))
        if n >= 2:
            self.target("fault.p2p_off_flagged", verdict.get("p2p_off_flagged"))
        return {"busy_gpu": busy_gpu, "checks": FAULT_CHECKS, "verdict": verdict, "runs": _brief(runs)}

    def with_busy_gpu(self, gpu: int, action) -> dict[str, Any]:
        """Run `action` while another process keeps `gpu` busy; that process is always stopped."""
        ready = self.tmp / "busy.ready"
        seconds = max(60.0, self.remaining())
        cmd = [sys.executable, str(Path(__file__).resolve()), "--busy-gpu", str(gpu)]
        cmd += ["--busy-seconds", f"{seconds:.0f}", "--busy-ready", str(ready)]
        self.say(f"$ {' '.join(cmd)}  (competing GEMMs, stopped after the run)")
        with open(self.tmp / "busy.out", "w", encoding="utf-8") as sink:
            process = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(os.environ),
            )
        try:
            deadline = time.monotonic() + BUSY_READY_TIMEOUT_S
            while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            if not ready.exists():
                self.say("  the competing process did not start its GEMMs")
                return {"rc": None, "report": None, "error": "competing process not ready"}
            info = _read_json(ready) or {}
            self.seen("busy-gpu process", info.get("safe_env"))
            entry = action()
            entry["busy_process_alive_during_run"] = process.poll() is None
            return entry
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if process.poll() is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
            self.log.append((self.tmp / "busy.out").read_text(errors="replace")[-2000:])

    def phase_standard(self) -> dict[str, Any]:
        include = self.include_p2p_in_standard()
        args = ["--level", "standard"]
        if include == "no":
            args += ["--skip", "p2p"]
            self.not_run(
                "the agent's p2p check inside the standard level",
                f"left out on {self.gpus} GPUs (--standard-p2p auto); the p2p phase measures the matrix",
                "standard --standard-p2p only",
            )
        elif include == "only":
            args += ["--only", "p2p"]
        entry = self.agent_run("standard", args, self.cap(self.remaining()))
        if entry["report"] is None:
            self.target("standard.ran", False)
            return {"rc": entry["rc"], "output_tail": entry.get("output_tail")}
        figures = standard_figures(entry["report"])
        figures["rc"], figures["wall_s"], figures["p2p_check"] = entry["rc"], entry["wall_s"], include
        self.target("standard.passes_a_healthy_node", entry["report"].get("exit_code") == 0)
        return figures

    def run_phases(self, phases: list[str]) -> None:
        for position, phase in enumerate(phases):
            need = self.estimate(phase)
            if need > self.remaining():
                rest = ",".join(phases[position:])
                self.not_run(
                    f"phase {phase}",
                    f"needs about {need:.0f} s, {self.remaining():.0f} s left of "
                    f"--budget-s {self.budget_s:.0f}",
                    rest,
                )
                continue
            self.say(f"phase {phase} (estimate {need:.0f} s, {self.remaining():.0f} s left)")
            started = time.monotonic()
            try:
                result = getattr(self, f"phase_{phase}")()
            except Exception as exc:  # a bug in a phase must not lose the others' figures
                result = {"error": f"{type(exc).__name__}: {exc}"}
                self.target(f"{phase}.crashed", False)
            result["wall_s"] = round(time.monotonic() - started, 1)
            self.summary["phases"][phase] = result
            self.save()
        env_ok = all(s["ok"] for s in self.summary["safe_env_seen"])
        self.target("safe_env_in_every_child", env_ok and bool(self.summary["safe_env_seen"]))
        self.save()


def _brief(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The fault runs without their full reports (those are the fault-*.json files)."""
    return {k: {key: v for key, v in run.items() if key != "report"} for k, run in runs.items()}


# --- the table -----------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def table(summary: dict[str, Any]) -> str:
    """The short table printed last; a surprise in the data costs the table, never summary.json."""
    try:
        return _table(summary)
    except Exception as exc:
        return f"table failed ({type(exc).__name__}: {exc}); every figure is in summary.json"


def _table(summary: dict[str, Any]) -> str:
    machine = summary.get("machine", {})
    phases = summary.get("phases", {})
    lines = [
        "",
        f"issue 6 proof: {machine.get('gpus')} x {machine.get('name')}, torch {machine.get('torch')}, "
        f"{summary['date']}, {summary.get('wall_s')} s",
    ]
    p2p = phases.get("p2p", {})
    for kind in ("unidirectional", "bidirectional"):
        if kind in p2p:
            k = p2p[kind]
            lines.append(
                f"  p2p {kind:<15} {len(p2p['pairs'])} directions: "
                f"agent median {k['agent_median_gbs']:.1f} vs "
                f"cudaMemcpyPeerAsync {k['reference_median_gbs']:.1f} GB/s, worst gap {_pct(k['worst_gap'])} "
                f"({k['worst_direction']}) -> {'within 5%' if k['within'] else 'MISSED 5%'}"
            )
    for mode in ("p2p_on", "p2p_off"):
        section = phases.get("allreduce", {}).get(mode)
        if not section or "rows" not in section:
            continue
        if section.get("world_size") == 1:
            wrong = sum(r["agent_wrong"] + r["reference_wrong"] for r in section["rows"])
            copies = ", ".join(f"{v:.0f}" for r in section["rows"] for v in r["reference_algbw_runs"][:1])
            lines.append(
                f"  all-reduce n=1: both NCCL paths initialise and run (busbw is 0 by definition at n=1; "
                f"reference out-of-place copy {copies} GB/s algbw at 64 MiB..1 GiB), wrong {wrong}"
            )
            continue
        for row in section["rows"]:
            refs = ", ".join(f"{v:.1f}" for v in row["reference_busbw_runs"]) or "-"
            lines.append(
                f"  all-reduce {mode:<7} {row['size_bytes'] >> 20:>5} MiB: "
                f"agent busbw {row['agent_busbw_gbs']:7.1f} "
                f"(algbw {row['agent_algbw_gbs']:.1f}) vs nccl [{refs}] GB/s, gap {_pct(row.get('gap'))}, "
                f"wrong {row['agent_wrong']}/{row['reference_wrong']}"
            )
    for row in phases.get("standard", {}).get("scaling", []):
        lines.append(
            f"  scaling {row['subject']:<12} speedup {row['speedup']:.2f}, efficiency {row['efficiency']}, "
            f"step {row['step_ms']} ms, comm share {row['comm_share']}"
        )
    fault = phases.get("fault", {})
    for key, what in (("a", "healthy baseline"), ("b", "healthy rerun"), ("c", "busy GPU"), ("d", "P2P off")):
        run = fault.get("runs", {}).get(key)
        if run:
            flags = "; ".join(
                f"{r['id']} {r['subject']} {r['status']} {r['value']} {r['unit'] or ''}".strip()
                for r in run.get("not_passing", [])[:3]
            )
            lines.append(f"  fault {key} {what:<16} exit {run['rc']}: {run.get('status')} {flags}")
    if "verdict" in fault:
        v = fault["verdict"]
        lines.append(
            f"  fault verdicts: healthy passes {v.get('healthy_passes')}, "
            f"busy GPU flagged {v.get('busy_flagged')}, "
            f"P2P off flagged {v.get('p2p_off_flagged', 'n/a')} (names NCCL_P2P_DISABLE "
            f"{v.get('p2p_off_names_the_setting', 'n/a')})"
        )
    standard = phases.get("standard", {})
    if "status" in standard:
        lines.append(
            f"  standard level: exit {standard['exit_code']} {standard['status']} in {standard['wall_s']} s "
            f"{standard['counts']}; not passing: "
            + (
                "; ".join(f"{r['id']} {r['subject']} {r['status']}" for r in standard["not_passing"])
                or "none"
            )
        )
    for entry in summary.get("not_run", []):
        lines.append(
            f"  not run: {entry['what']}: {entry['why']}"
            + (f" -> {entry['command']}" if "command" in entry else "")
        )
    missed = [k for k, ok in summary.get("targets", {}).items() if not ok]
    lines.append(
        f"  targets met: {sum(summary['targets'].values())}/{len(summary['targets'])}; "
        f"missed: {missed or 'none'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="directory for the (at most 8) result files")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument(
        "--budget-s", type=float, default=560.0, help="skip phases that would not fit (seconds)"
    )
    parser.add_argument(
        "--standard-p2p",
        choices=("auto", "yes", "no", "only"),
        default="auto",
        help="the agent's p2p check in the standard phase: auto = yes up to 4 GPUs; only = that check alone",
    )
    parser.add_argument("--busy-gpu", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--busy-seconds", type=float, default=120.0, help=argparse.SUPPRESS)
    parser.add_argument("--busy-ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.busy_gpu is not None:
        return busy_main(args.busy_gpu, args.busy_seconds, args.busy_ready)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if args.out is None or unknown or not phases:
        parser.error(f"--out is required; phases are {', '.join(PHASES)} (unknown: {unknown or '-'})")
    args.out.mkdir(parents=True, exist_ok=True)
    proof = Proof(args.out, args.budget_s, args.standard_p2p)
    if proof.discover() == 0:
        proof.not_run("everything", "no GPU visible to torch")
        proof.save()
        print(table(proof.summary))
        return 3
    proof.run_phases(phases)
    print(table(proof.summary))
    return 0 if all(proof.summary["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
