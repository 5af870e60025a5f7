"""The measurement checks' verdicts from kernel figures: floors, peers, P2P vs bounce, throttling.

The checks are exercised through the real registry functions with a context whose run_step /
run_ranks hand back the figures a kernel would have returned (the kernels themselves are
tested on the CPU in test_kernels_*.py and on a GPU in tests/gpu).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from r9700ctl.agent import sysfs, thresholds
from r9700ctl.agent.checks import collective, compute, hostbw, p2p, scaling
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.agent.watchdog import OK, TIMEOUT, StepOutcome

GEN5 = sysfs.Link(
    32.0,
    16,
    32.0,
    16,
    at="0000:01:00.0",
    slot_port="0000:00:01.1",
    slot_max_speed_gts=32.0,
    slot_max_width=16,
)


def _gpu(index: int, vendor: str = "1002") -> GpuInfo:
    return GpuInfo(index=index, pci_address=f"0000:0{index + 3}:00.0", vendor=vendor, link=GEN5, numa_node=0)


@dataclass
class CannedContext(AgentContext):
    """An AgentContext whose GPU steps return prepared kernel results, keyed by step id prefix."""

    canned: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, tuple]] = field(default_factory=list)

    def _answer(self, step_id: str, args: tuple) -> StepOutcome:
        self.calls.append((step_id, args))
        for prefix, value in self.canned.items():
            if step_id.startswith(prefix):
                return value if isinstance(value, StepOutcome) else StepOutcome(step_id, OK, value)
        raise AssertionError(f"no canned result for {step_id}")

    def run_step(self, step_id, gpus, fn, *args, timeout_s, env=None):  # type: ignore[override]
        return self._answer(step_id, args)

    def run_ranks(self, step_id, world_size, fn, *args, timeout_s, backend="nccl", env=None, gpus=None):  # type: ignore[override]
        return self._answer(step_id, (world_size, env, *args))


def _ctx(
    gpus: list[GpuInfo],
    canned: dict,
    level: str = "quick",
    model: str = "AMD Radeon AI PRO R9700",
    overrides: Any = None,
    **kw: Any,
) -> CannedContext:
    vendor = "10de" if model.startswith("NVIDIA") else "1002"
    th = thresholds.resolve([model], [vendor], overrides=overrides)
    return CannedContext(level=level, gpus=gpus, thresholds=th, params={}, canned=canned, **kw)


def _hostbw(index: int, h2d: float, d2h: float, ok: bool = True) -> dict:
    check = {"ok": ok, "expected_checksum": 1, "got_checksum": 1 if ok else 2}
    fig = {
        "h2d_gbs": h2d,
        "d2h_gbs": d2h,
        "h2d_windows_gbs": [h2d] * 3,
        "d2h_windows_gbs": [d2h] * 3,
        "verified": ok,
        "verify": {"h2d": check, "d2h": check},
        "host_memory": "NUMA node 0 (8 CPUs)",
        "pageable_h2d_gbs": 6.0,
        "pageable_d2h_gbs": 6.0,
    }
    return {
        "gpus": {str(index): fig},
        "size_bytes": 1,
        "windows": 1,
        "copies_per_window": 1,
        "method": "m",
        "versions": {},
    }


def test_hostbw_at_gen4_speed_fails_the_gen5_floor_with_the_gen4_hint():
    """26 GB/s on an R9700 whose card and slot both do Gen5 x16 (floors 40/45) is a FAIL that says
    the figure fits a link of half the rate."""
    ctx = _ctx([_gpu(0)], {"hostbw.gpu0": _hostbw(0, 26.0, 55.0)})
    results = {r.id: r for r in hostbw.run(ctx)}
    assert results["hostbw.h2d"].status == "FAIL"
    assert "1/2 the rate of Gen5 x16" in results["hostbw.h2d"].hint
    assert results["hostbw.h2d"].threshold.startswith(">= 45 GB/s")
    assert results["hostbw.d2h"].status == "PASS"


def test_an_r9700_in_a_gen4_server_is_judged_against_gen4_with_the_platform_note():
    """Bug pinned: every R9700 was held to Gen5, so a healthy card in a Gen4 server FAILed. The
    expected link is what both ends support; 26 GB/s on Gen4 x16 (31.5 raw) is healthy."""
    gen4_slot = dataclasses.replace(
        GEN5, slot_port="0000:00:01.1", slot_max_speed_gts=16.0, slot_max_width=16
    )
    gpu = GpuInfo(index=0, pci_address="0000:03:00.0", vendor="1002", link=gen4_slot, numa_node=0)
    results = {r.id: r for r in hostbw.run(_ctx([gpu], {"hostbw.gpu0": _hostbw(0, 26.0, 26.5)}))}
    assert results["hostbw.h2d"].status == "PASS"
    assert "the platform limits this card to Gen4 x16" in results["hostbw.h2d"].hint
    assert "[Gen4 x16: 31.5 GB/s raw]" in results["hostbw.h2d"].threshold
    slow = {r.id: r for r in hostbw.run(_ctx([gpu], {"hostbw.gpu0": _hostbw(0, 12.0, 26.5)}))}
    assert slow["hostbw.h2d"].status == "FAIL"


@pytest.mark.parametrize(
    ("h2d", "status"),
    [
        pytest.param(26.0, "INCONCLUSIVE", id="fits-a-gen4-slot"),
        pytest.param(12.5, "INCONCLUSIVE", id="fits-a-gen3-slot"),
        pytest.param(35.0, "FAIL", id="above-gen4-below-the-gen5-floor"),
        pytest.param(4.0, "FAIL", id="below-any-slot"),
        pytest.param(55.0, "PASS", id="gen5"),
    ],
)
def test_without_the_slots_capability_a_figure_a_slower_slot_explains_is_not_failed(h2d, status):
    """As in a VM (the lent H200 shows no port above the GPU): the card's maximum is only an upper
    bound of what both ends support, so 26 GB/s on a Gen5 card may be a healthy Gen4 server."""
    vm = dataclasses.replace(GEN5, slot_port="", slot_max_speed_gts=None, slot_max_width=None)
    gpu = GpuInfo(index=0, pci_address="0000:03:00.0", vendor="1002", link=vm, numa_node=0)
    result = next(
        r for r in hostbw.run(_ctx([gpu], {"hostbw.gpu0": _hostbw(0, h2d, 55.0)})) if r.id == "hostbw.h2d"
    )
    assert result.status == status
    if status == "INCONCLUSIVE":
        assert "slot's capability is not readable" in result.hint


def test_host_to_device_on_a_link_nobody_could_read_is_never_a_pass():
    """Bug pinned: 2 GB/s host->device on an unknown link PASSed (no floor, no peers)."""
    unknown = GpuInfo(index=0, pci_address="0000:03:00.0", vendor="1002", link=sysfs.Link(), numa_node=0)
    results = {r.id: r for r in hostbw.run(_ctx([unknown], {"hostbw.gpu0": _hostbw(0, 2.0, 2.0)}))}
    assert results["hostbw.h2d"].status == "INCONCLUSIVE"
    assert "not readable" in results["hostbw.h2d"].hint


def test_siblings_alike_on_unreadable_links_are_not_a_pass_but_the_odd_one_out_still_fails():
    """Bug pinned: with three GPUs on unreadable links, the peer rule alone PASSed 2 GB/s on every
    GPU (alike is not healthy); a GPU far below its siblings is still caught by it."""
    gpus = [
        GpuInfo(index=i, pci_address=f"0000:0{i + 3}:00.0", vendor="1002", link=sysfs.Link(), numa_node=0)
        for i in range(3)
    ]
    alike = {f"hostbw.gpu{i}": _hostbw(i, 2.0, 2.0) for i in range(3)}
    alike["hostbw.all"] = {"gpus": {str(i): _hostbw(i, 2.0, 2.0)["gpus"][str(i)] for i in range(3)}}
    results = [r for r in hostbw.run(_ctx(gpus, alike)) if r.id == "hostbw.h2d"]
    assert [r.status for r in results] == ["INCONCLUSIVE"] * 3
    assert "not readable" in results[0].hint and "node median" in results[0].hint
    odd = dict(alike, **{"hostbw.gpu2": _hostbw(2, 0.5, 2.0)})
    statuses = {r.subject: r.status for r in hostbw.run(_ctx(gpus, odd)) if r.id == "hostbw.h2d"}
    assert statuses == {"gpu0": "INCONCLUSIVE", "gpu1": "INCONCLUSIVE", "gpu2": "FAIL"}


def test_too_few_windows_or_noise_across_the_limit_is_inconclusive():
    """judge_repeats is wired: 2 windows cannot be judged; windows straddling the floor neither."""
    figure = _hostbw(0, 44.0, 55.0)
    figure["gpus"]["0"]["h2d_windows_gbs"] = [44.0, 44.0]
    results = {r.id: r for r in hostbw.run(_ctx([_gpu(0)], {"hostbw.gpu0": figure}))}
    assert results["hostbw.h2d"].status == "INCONCLUSIVE"
    assert "need >= 3" in results["hostbw.h2d"].hint
    figure["gpus"]["0"]["h2d_windows_gbs"] = [55.0, 30.0, 44.0, 52.0]
    results = {r.id: r for r in hostbw.run(_ctx([_gpu(0)], {"hostbw.gpu0": figure}))}
    assert results["hostbw.h2d"].status == "INCONCLUSIVE"
    assert "across the limit" in results["hostbw.h2d"].hint


def test_hostbw_wrong_data_fails_even_at_full_speed():
    """A copy that delivered wrong bytes is a FAIL (HOSTBW_CORRUPTION), however fast."""
    ctx = _ctx([_gpu(0)], {"hostbw.gpu0": _hostbw(0, 55.0, 55.0, ok=False)})
    results = {r.id: r for r in hostbw.run(ctx)}
    assert results["hostbw.h2d"].status == "FAIL"
    assert results["hostbw.h2d"].code == "HOSTBW_CORRUPTION"
    assert results["hostbw.h2d"].evidence["wrong_data"] is True  # kept FAIL on a busy GPU (runner)


def _pair(uni_ab: float, uni_ba: float, bounce: float, verified_ba: bool = True, can: bool = True) -> dict:
    def direction(uni: float, ok: bool) -> dict:
        check = {"ok": ok, "expected_checksum": 1, "got_checksum": 1 if ok else 0}
        return {
            "unidirectional_gbs": uni,
            "unidirectional_windows_gbs": [uni] * 3,
            "bidirectional_gbs": uni * 0.9,
            "host_bounce_gbs": bounce,
            "verify_unidirectional": check,
            "verified": ok,
        }

    return {
        "pair": [0, 1],
        "can_access_peer": {"0->1": can, "1->0": can},
        "directions": {"0->1": direction(uni_ab, True), "1->0": direction(uni_ba, verified_ba)},
        "size_bytes": 1,
        "windows": 1,
        "copies_per_window": 1,
        "method": "m",
        "versions": {},
        "bidirectional_aggregate_gbs": (uni_ab + uni_ba) * 0.9,
    }


def test_p2p_no_faster_than_a_host_bounce_is_flagged_not_effective():
    """26 GB/s P2P against a 25 GB/s bounce (<= 1.1x): WARN P2P_NOT_EFFECTIVE naming ACS/IOMMU."""
    ctx = _ctx([_gpu(0), _gpu(1)], {"p2p.pair0-1": _pair(26.0, 26.0, 25.0)})
    results = {r.subject: r for r in p2p.run(ctx)}
    assert results["gpu0->gpu1"].status == "WARN"
    assert results["gpu0->gpu1"].code == "P2P_NOT_EFFECTIVE"
    assert "no faster than bouncing through host memory" in results["gpu0->gpu1"].hint
    assert "iommu=pt" in results["gpu0->gpu1"].hint
    assert results["gpu0->gpu1"].evidence["p2p_over_bounce"] == pytest.approx(1.04)


def test_p2p_asymmetry_and_corruption_are_judged_per_direction():
    """1->0 at half of 0->1 is asymmetric (WARN); wrong data on 1->0 FAILs with P2P_CORRUPTION."""
    ctx = _ctx([_gpu(0), _gpu(1)], {"p2p.pair0-1": _pair(50.0, 25.0, 20.0, verified_ba=False)})
    results = {r.subject: r for r in p2p.run(ctx)}
    assert results["gpu0->gpu1"].status == "PASS"
    assert results["gpu1->gpu0"].status == "FAIL"
    assert results["gpu1->gpu0"].code == "P2P_CORRUPTION"
    assert results["gpu1->gpu0"].hint.startswith("a peer copy delivered wrong data")
    assert (
        results["gpu1->gpu0"].evidence["wrong_data"] is True
        and results["gpu0->gpu1"].evidence["wrong_data"] is False
    )
    assert "50%" in results["gpu1->gpu0"].hint


def test_p2p_below_the_floor_a_half_rate_slot_explains_is_not_warned_without_the_slot():
    """15 GB/s between two Gen5 cards warns (floor 20 GB/s = 0.32 x 63); in a VM, where no port
    above the cards shows the slots, a Gen4 slot (floor 10) explains it: INCONCLUSIVE, with why."""
    known = _ctx([_gpu(0), _gpu(1)], {"p2p.pair0-1": _pair(15.0, 15.0, 5.0)})
    assert {r.status for r in p2p.run(known)} == {"WARN"}
    vm = dataclasses.replace(GEN5, slot_port="", slot_max_speed_gts=None, slot_max_width=None)
    gpus = [dataclasses.replace(_gpu(i), link=vm) for i in (0, 1)]
    results = p2p.run(_ctx(gpus, {"p2p.pair0-1": _pair(15.0, 15.0, 5.0)}))
    assert {r.status for r in results} == {"INCONCLUSIVE"}
    assert "slot's capability is not readable" in results[0].hint
    far_below = p2p.run(_ctx(gpus, {"p2p.pair0-1": _pair(8.0, 8.0, 2.0)}))
    assert {r.status for r in far_below} == {"WARN"}


def test_a_hung_p2p_pair_becomes_an_error_naming_the_pair():
    """A P2P step killed at its deadline (the R9700 hang) is an ERROR result; the check goes on."""
    hung = StepOutcome("p2p.pair0-1", TIMEOUT, error="killed after 60 s", duration_s=60.0)
    ctx = _ctx([_gpu(0), _gpu(1)], {"p2p.pair0-1": hung})
    (result,) = p2p.run(ctx)
    assert (result.id, result.subject, result.status, result.metric) == (
        "p2p.bandwidth",
        "gpu0<->gpu1",
        "ERROR",
        "timeout",
    )
    assert "NCCL_P2P_DISABLE=1" in result.hint


@pytest.mark.parametrize("check", [p2p, collective, scaling], ids=["p2p", "collective", "scaling"])
def test_multi_gpu_checks_skip_on_one_gpu_with_the_reason(check):
    """On one GPU: SKIP "needs >= 2 GPUs", and no step is started."""
    ctx = _ctx([_gpu(0)], {})
    (result,) = check.run(ctx)
    assert (result.status, result.hint) == ("SKIP", "needs >= 2 GPUs")
    assert ctx.calls == []


def _gemm(masks: list[int], tflops: float = 90.0, sclk: float | None = None) -> dict:
    samples = []
    for k, mask in enumerate(masks):
        from r9700ctl.agent.kernels import sampler

        names, groups = sampler.decode_nvidia(mask)
        samples.append(
            {
                "t": k * 0.5,
                "gpu": 0,
                "throttle_raw": mask,
                "reasons": names,
                "groups": groups,
                "power_cap_w": 700.0,
                "power_cap_default_w": 700.0,
                "sclk_mhz": sclk,
            }
        )
    s = [sampler.Sample(**{**x}) for x in samples]
    telemetry = sampler.summarize(s, 0)
    fig = {"tflops": tflops, "windows_tflops": [tflops] * 5, "verify": {"ok": True}, "verified": True}
    return {
        "gpus": {"0": {"bf16": fig, "telemetry": telemetry}},
        "samples": samples,
        "n": 8192,
        "seconds_per_dtype": 10,
        "method": "m",
        "versions": {},
        "devices": {"0": {}},
        "sampler": {"source": "nvml", "interval_s": 0.5, "errors": []},
    }


def test_power_cap_limiting_under_load_passes_with_a_note():
    """An H200 at its 700 W cap (reason 0x4 in most samples) is healthy: PASS, the note says why."""
    ctx = _ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 18 + [0x0] * 2)})
    results = {r.id: r for r in compute.run(ctx)}
    assert results["compute.throttle"].status == "PASS"
    assert "power cap limited clocks in 90% of samples" in results["compute.throttle"].hint
    assert results["compute.power_cap"].status == "PASS"


def test_three_thermal_samples_in_a_row_fail_and_one_alone_does_not():
    """>= 3 consecutive thermal samples: FAIL THERMAL_THROTTLE; a single one of 40: WARN, never FAIL."""
    ctx = _ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 10 + [0x20] * 3 + [0x4] * 27)})
    throttle = {r.id: r for r in compute.run(ctx)}["compute.throttle"]
    assert throttle.status == "FAIL"
    assert throttle.code == "THERMAL_THROTTLE"
    ctx = _ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 20 + [0x40] + [0x4] * 19)})
    throttle = {r.id: r for r in compute.run(ctx)}["compute.throttle"]
    assert throttle.status == "WARN"
    assert throttle.hint.startswith("isolated sample(s) only")


def _sweep(busbw: float, wrong: int = 0) -> dict:
    row = {
        "size_bytes": 256 << 20,
        "time_us": 1.0,
        "algbw_gbs": busbw / 1.5,
        "busbw_gbs": busbw,
        "windows_busbw_gbs": [busbw] * 3,
        "calls_per_window": 10,
        "wrong": wrong,
        "checked_elements": 1,
    }
    return {
        "sizes": [row],
        "wrong_total": wrong,
        "dtype": "bf16",
        "bus_factor": 1.5,
        "formula": "f",
        "windows": 3,
        "warmup": 5,
        "versions": {},
    }


def test_allreduce_with_a_wrong_element_fails_and_low_busbw_warns():
    """#wrong > 0 is a FAIL whatever the speed; 12 GB/s on 4 GPUs is under the 20 GB/s floor."""
    gpus = [_gpu(i) for i in range(4)]
    results = collective.run(_ctx(gpus, {"collective.allreduce.p2p_on": _sweep(30.0, wrong=3)}))
    assert results[0].status == "FAIL"
    results = collective.run(_ctx(gpus, {"collective.allreduce.p2p_on": _sweep(12.0)}))
    assert results[0].status == "WARN"
    assert results[0].evidence["env"] == {"HSA_FORCE_FINE_GRAIN_PCIE": "1"}


def test_p2p_gain_below_one_point_one_is_reported_with_the_stability_note():
    """standard: P2P on 21 GB/s vs off 20 GB/s = 1.05x: reported only (SKIP, no rule judges a gain),
    the note recommends NCCL_P2P_DISABLE=1."""
    gpus = [_gpu(i) for i in range(4)]
    ctx = _ctx(
        gpus,
        {"collective.allreduce.p2p_on": _sweep(21.0), "collective.allreduce.p2p_off": _sweep(20.0)},
        level="standard",
    )
    results = {r.id: r for r in collective.run(ctx)}
    gain = results["collective.p2p_gain"]
    assert (gain.status, gain.value) == ("SKIP", 1.05)
    assert "NCCL_P2P_DISABLE=1" in gain.hint


def _tp(step_ms: float, share: float) -> dict:
    return {
        "step_ms": step_ms,
        "comm_share": share,
        "tokens_per_s": 1.0,
        "rank_tflops": 1.0,
        "shape": {},
        "iterations": 30,
        "repeats": [{"step_ms": step_ms}] * 3,
        "versions": {},
    }


def test_expect_scaling_fails_a_node_below_ninety_percent_of_the_claim():
    """--expect-scaling 4:3.4: measured 2.5x on 4 GPUs FAILs; comm share 40% at n=4 is named."""
    gpus = [_gpu(i) for i in range(4)]
    canned = {
        "scaling.p2p_on.n1": _tp(40.0, 0.0),
        "scaling.p2p_on.n2": _tp(22.0, 0.2),
        "scaling.p2p_on.n4": _tp(16.0, 0.4),
        "scaling.p2p_off": _tp(30.0, 0.5),
    }
    ctx = _ctx(gpus, canned, level="standard", expect_scaling={4: 3.4})
    results = {r.subject: r for r in scaling.run(ctx)}
    four = results["n=4 p2p_on"]
    assert four.status == "FAIL"
    assert four.value == 2.5
    assert "below 0.9 x the expected 3.4x" in four.hint
    assert "40% of the step is communication" in four.hint
    assert results["n=2 p2p_on"].status == "SKIP"  # no expectation for n=2: reported only
    assert "reported only" in results["n=2 p2p_on"].hint


H200 = "NVIDIA H200"


def test_a_one_gpu_h200_at_half_its_gemm_rate_fails_the_absolute_floor():
    """Bug pinned: a GEMM only compared with siblings is never judged on a 1-2 GPU node; an H200
    sharing its GPU measured 310 TFLOPS (healthy 657-666) and PASSed. The floor names its source."""
    slow = {
        r.id: r
        for r in compute.run(_ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 20, 310.0)}, model=H200))
    }
    tflops = slow["compute.tflops_bf16"]
    assert tflops.status == "FAIL"
    assert (
        "989 TFLOPS dense peak, compute.peak_tflops_bf16 from thresholds.yaml [NVIDIA H200]"
        in tflops.threshold
    )
    assert "31% of the 989 TFLOPS dense peak" in tflops.hint
    healthy = {
        r.id: r
        for r in compute.run(_ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 20, 660.0)}, model=H200))
    }
    assert healthy["compute.tflops_bf16"].status == "PASS"


def test_a_raised_floor_in_a_thresholds_file_fails_and_names_that_file(tmp_path):
    """Planted fault (c) of the proof, on the CPU: the override's peak is named as the floor's source."""
    from r9700ctl import agentpack

    source = tmp_path / "too-strict.yaml"
    source.write_text(f'models:\n  "{H200}":\n    compute:\n      peak_tflops_bf16: 2000\n')
    converted = agentpack.convert_thresholds(source, tmp_path / "too-strict.json")
    ctx = _ctx([_gpu(0, "10de")], {"compute.gemm": _gemm([0x4] * 20, 660.0)}, model=H200, overrides=converted)
    tflops = {r.id: r for r in compute.run(ctx)}["compute.tflops_bf16"]
    assert tflops.status == "FAIL"
    assert f"{source} [{H200}]" in tflops.threshold


def test_a_dtype_the_model_does_not_judge_is_reported_only():
    """R9700 fp32 GEMM depends on the library's kernel choice: null in its section = SKIP, not PASS."""
    value = _gemm([0x4] * 20, 30.0)
    value["gpus"]["0"]["fp32"] = value["gpus"]["0"]["bf16"]
    ctx = _ctx([_gpu(0)], {"compute.gemm": value}, level="standard")
    ctx.params = {"compute.dtypes": "fp32", "watchdog.min_timeout_s": 30.0, "watchdog.timeout_factor": 3.0}
    fp32 = {r.id: r for r in compute.run(ctx)}["compute.tflops_fp32"]
    assert fp32.status == "SKIP"
    assert "not judged for AMD Radeon AI PRO R9700" in fp32.hint


@pytest.mark.parametrize(
    ("masks", "sclk", "status", "words"),
    [
        pytest.param([0x4] * 20, 1470.0, "PASS", "", id="h200-at-its-power-cap"),
        pytest.param([0x4] * 20, 900.0, "PASS", "power-capped", id="far-below-but-power-capped"),
        pytest.param(
            [0x0] * 20, 900.0, "WARN", "no throttle reason reported", id="far-below-without-a-reason"
        ),
        pytest.param([0x20] * 20, 900.0, "PASS", "see compute.throttle", id="thermal-explains-it"),
    ],
)
def test_the_clock_under_load_against_the_boost_clock(masks, sclk, status, words):
    """0.6 x 1980 MHz = 1188: a healthy power-capped H200 sits at 1470 (0.74)."""
    ctx = _ctx([_gpu(0, "10de")], {"compute.gemm": _gemm(masks, 660.0, sclk)}, model=H200)
    clock = {r.id: r for r in compute.run(ctx)}["compute.clock"]
    assert clock.status == status
    assert words in clock.hint
    assert clock.value == round(sclk)


# ---------------------------------------------------------------- the R9700's TEMP_HOTSPOT bit

RECORDED_THROTTLE = Path(__file__).resolve().parents[1] / "fixtures/throttle/r9700-throttle-status-11781.md"


def _recorded_r9700_rows() -> list[tuple[int, list[str], float, float]]:
    """(samples, bit names, power W, hotspot C) of each row of the recorded amd-smi table; a range
    such as 133-225 W or 63-75 C is taken at its top (the hottest the card was)."""
    rows = []
    for line in RECORDED_THROTTLE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[1].isdigit():
            continue
        top = [float(re.findall(r"[\d.]+", c)[-1]) for c in (cells[4], cells[5])]
        rows.append((int(cells[1]), [b.strip() for b in cells[3].split(",")], top[0], top[1]))
    return rows


def _r9700_gemm(rows: list[tuple[int, list[str], float, float]]) -> dict:
    """The recorded rows as the sampler reads them: amd-smi names the bits, gpu_metrics'
    indep_throttle_status carries them at their own positions (sampler.AMD_THROTTLERS)."""
    from r9700ctl.agent.kernels import sampler

    bit_of = {name: bit for bit, name in sampler.AMD_THROTTLERS.items()}
    credible = float(thresholds.resolve(["AMD Radeon AI PRO R9700"], ["1002"]).get("compute.hotspot_warn_c"))
    samples = []
    for count, names, watts, hotspot in rows:
        mask = sum(1 << bit_of[name] for name in names)
        reasons, groups = sampler.decode_amd(mask, hotspot, credible)
        for _ in range(count):
            bits = {"throttle_raw": mask, "reasons": reasons, "groups": groups}
            samples.append(
                {"t": len(samples) * 0.5, "gpu": 0, **bits, "power_w": watts, "hotspot_c": hotspot,
                 "power_cap_w": 225.0, "power_cap_default_w": 300.0}
            )  # fmt: skip
    telemetry = sampler.summarize([sampler.Sample(**s) for s in samples], 0)
    fig = {"tflops": 90.0, "windows_tflops": [90.0] * 5, "verify": {"ok": True}, "verified": True}
    return {
        "gpus": {"0": {"bf16": fig, "telemetry": telemetry}},
        "samples": samples,
        "n": 8192,
        "seconds_per_dtype": 10,
        "method": "m",
        "versions": {},
        "devices": {"0": {}},
        "sampler": {"source": "sysfs gpu_metrics", "interval_s": 0.5, "errors": []},
    }


def test_the_recorded_r9700_hotspot_bit_is_not_a_warning_and_names_the_known_issue():
    """ROCm/rocm-systems#11781 as recorded: TEMP_HOTSPOT in all 50 samples, idle at 37 C and under
    a 225 W cap at up to 75 C, PPT0 while capped. The judgement: PASS, the bit ignored with the
    known issue named, the cap's limiting noted; never WARN or FAIL on a bit the firmware always sets."""
    rows = _recorded_r9700_rows()
    assert [(n, names) for n, names, _, _ in rows] == [(11, ["TEMP_HOTSPOT"]), (39, ["TEMP_HOTSPOT", "PPT0"])]
    r9700 = dataclasses.replace(_gpu(0), device_id="7551", gfx_target="gfx1201")
    ctx = _ctx([r9700], {"compute.gemm": _r9700_gemm(rows)})
    throttle = {r.id: r for r in compute.run(ctx)}["compute.throttle"]

    assert (throttle.status, throttle.value) == ("PASS", 0)
    assert "TEMP_HOTSPOT bit set without a hot reading: ignored (known issue r9700-hotspot-throttle-bit" in (
        throttle.hint
    )
    assert "https://github.com/ROCm/rocm-systems/issues/11781" in throttle.hint
    assert "power cap limited clocks in 78% of samples" in throttle.hint  # 39 of 50 had PPT0


def test_the_same_bit_with_a_hot_reading_is_thermal_throttling():
    """The bit is ignored only while the hotspot is cool: the same word at 100 C counts."""
    rows = [(5, ["TEMP_HOTSPOT"], 300.0, 100.0)]
    r9700 = dataclasses.replace(_gpu(0), device_id="7551", gfx_target="gfx1201")
    ctx = _ctx([r9700], {"compute.gemm": _r9700_gemm(rows)})
    throttle = {r.id: r for r in compute.run(ctx)}["compute.throttle"]
    assert throttle.status == "FAIL" and throttle.code == "THERMAL_THROTTLE"
