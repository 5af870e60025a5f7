"""AgentContext: everything a check may use, and the one way to run GPU work (in a child).

Checks receive it as `run(ctx)`; they read parameters, thresholds, GPUs and the root path
from it, and run every GPU step through `ctx.run_step` / `ctx.run_ranks`, which journal the
step (fsync'd, with the boot id, before it starts) and enforce its timeout. A check never
prints: `ctx.progress(text)` reports what is going on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import aer_counters as aer
from r9700ctl.agent import codes, watchdog
from r9700ctl.agent.gpus import Discovery, GpuInfo
from r9700ctl.agent.journal import Journal
from r9700ctl.agent.judge import Verdict, not_applied
from r9700ctl.agent.result import ERROR, SKIP, CheckResult
from r9700ctl.agent.thresholds import Thresholds
from r9700ctl.agent.watchdog import StepOutcome


@dataclass
class AgentContext:
    level: str
    gpus: list[GpuInfo]
    thresholds: Thresholds
    params: dict[str, Any]
    root: Path = Path("/")
    expected_gpus: int | None = None
    expect_scaling: dict[int, float] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    model_spec: dict[str, Any] = field(default_factory=dict)
    journal: Journal | None = None
    discovery: Discovery = field(default_factory=Discovery)
    state_dir: Path | None = None
    tool_timeout_s: float = 20.0
    on_progress: Callable[[str], None] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    # PCIe AER counters read before and after every GPU step (checks/aer.py judges them).
    aer_steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def model(self) -> str:
        return self.thresholds.section

    @property
    def gpu_indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    def gpu(self, index: int) -> GpuInfo:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(f"no GPU with index {index} in this run")

    def param(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def threshold(self, key: str) -> Any:
        """The value of `key` from thresholds.yaml for this node (None = no limit); no fallbacks."""
        return self.thresholds.get(key)

    def threshold_text(self, key: str) -> str:
        """'compute.peak_tflops_bf16 from thresholds.yaml [NVIDIA H200]': a rule's source, for reports."""
        return f"{key} from {self.thresholds.origin(key)}"

    def unjudged(self, key: str, what: str) -> Verdict:
        """The verdict for a figure whose limit `key` is null: SKIP "reported only" when the model's
        section says so, else INCONCLUSIVE (no limit known for this model)."""
        if self.thresholds.reported_only(key):
            return not_applied(
                "reported only", f"{what}: not judged for {self.model} ({self.threshold_text(key)})", SKIP
            )
        return not_applied(
            "no threshold applies",
            f"{what}: no limit known for {self.model} ({key} is null in thresholds.yaml; "
            "set it in a --thresholds file to judge it)",
        )

    def progress(self, text: str) -> None:
        if self.on_progress is not None:
            self.on_progress(text)

    def _journaled(
        self, step_id: str, gpus: Sequence[int], timeout_s: float, run: Callable[[], StepOutcome]
    ) -> StepOutcome:
        seq = self.journal.step_start(step_id, list(gpus), timeout_s) if self.journal else 0
        self.progress(f"step {step_id} on GPU(s) {','.join(map(str, gpus)) or '-'} (timeout {timeout_s:g} s)")
        addresses = [g.pci_address for g in self.gpus if g.pci_address]
        before = aer.snapshot(self.root, addresses)
        outcome = run()
        after = aer.snapshot(self.root, addresses)
        self.aer_steps.append(
            {
                "step": step_id,
                "gpus": list(gpus),
                "seconds": outcome.duration_s,
                "increases": aer.increases(before, after),
                "unreadable": after.unreadable,
            }
        )
        if self.journal:
            self.journal.step_end(seq, step_id, outcome.status, outcome.duration_s)
        record = {**outcome.to_dict(), "gpus": list(gpus), "timeout_s": timeout_s}
        if not outcome.ok and outcome.output:
            record["output_tail"] = outcome.output[-2000:]
        self.steps.append(record)
        return outcome

    def run_step(
        self,
        step_id: str,
        gpus: Sequence[int],
        fn: Callable[..., dict[str, Any]],
        *args: Any,
        timeout_s: float,
        env: dict[str, str] | None = None,
    ) -> StepOutcome:
        """Run `fn(*args)` in a spawned child with a deadline; journaled before it starts."""
        return self._journaled(
            step_id,
            gpus,
            timeout_s,
            lambda: watchdog.run_in_child(step_id, fn, args, timeout_s=timeout_s, env=env),
        )

    def run_ranks(
        self,
        step_id: str,
        world_size: int,
        fn: Callable[..., dict[str, Any]],
        *args: Any,
        timeout_s: float,
        backend: str = "nccl",
        env: dict[str, str] | None = None,
        gpus: Sequence[int] | None = None,
    ) -> StepOutcome:
        """Run `fn(rank, world_size, *args)` in one process per rank through torch.distributed."""
        devices = list(gpus) if gpus is not None else self.gpu_indices[:world_size]
        if backend != "nccl" and gpus is None:
            devices = []
        return self._journaled(
            step_id,
            devices,
            timeout_s,
            lambda: watchdog.run_ranks(
                step_id,
                world_size,
                fn,
                args,
                timeout_s=timeout_s,
                backend=backend,
                env=env,
                gpus=devices or None,
            ),
        )

    def outcome_result(self, check_id: str, subject: str, outcome: StepOutcome) -> CheckResult:
        """The ERROR result for a step that timed out or crashed (the agent then goes on)."""
        if outcome.status == watchdog.TIMEOUT:
            return CheckResult(
                id=check_id,
                subject=subject,
                status=ERROR,
                metric="timeout",
                value=round(outcome.duration_s, 1),
                unit="s",
                threshold="step must finish within its timeout",
                hint=codes.hint(
                    "STEP_TIMEOUT", "a GPU step hung and was killed", check=check_id.split(".")[0]
                ),
                evidence={"step": outcome.step_id, "error": outcome.error},
                code="STEP_TIMEOUT",
            )
        return CheckResult(
            id=check_id,
            subject=subject,
            status=ERROR,
            metric="error",
            threshold="step must return a result",
            hint=codes.hint(
                "STEP_CRASHED", "the step crashed before giving a result", check=check_id.split(".")[0]
            ),
            evidence={"step": outcome.step_id, "error": outcome.error[-4000:]},
            code="STEP_CRASHED",
        )
