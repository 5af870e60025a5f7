"""Thermal readings you can trust (r9700ctl/agent/thermal.py) on amd-smi metric series.

The three series in tests/fixtures/thermal/ are SYNTHESISED (their first line says so and
names the report each is shaped after): a healthy R9700 with the figures measured in
Tanguille/cluster#4132, a blower that never spins as in ROCm/legacy-rocm-build#6101, and frozen
temperature sensors. Each fault must be flagged by its own rule and by no other; the healthy
card by none. Limits are the R9700's (hotspot 110 C, memory 108 C, ROCm/rocm-systems#11781).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r9700ctl.agent import thermal, thresholds
from r9700ctl.agent.parsers import amdsmi
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "thermal"
R9700_CRIT = {"hotspot_c": 110.0, "mem_temp_c": 108.0}


class _Limits(dict):
    """thermal.* from thresholds.yaml for the R9700, read on first use (the data files are staged
    by tests/conftest.py's session fixture, after collection)."""

    def __getitem__(self, key: str) -> float:
        if not self:
            r9700 = thresholds.resolve(["AMD Radeon AI PRO R9700"], ["1002"])
            self.update({k: float(r9700.get(f"thermal.{k}")) for k in thermal.KEYS})
        return super().__getitem__(key)


LIMITS = _Limits()


def series(name: str) -> thermal.Series:
    """A fixture's `amd-smi metric --json` snapshots as the sample rows the agent's sampler hands
    the judge (kernels/sampler.py: t, temp_c, hotspot_c, mem_temp_c, power_w, fan_rpm)."""
    document = json.loads((FIXTURES / f"metric-series-{name}.json").read_text().split("\n", 1)[1])
    rows = []
    for k, snapshot in enumerate(document["snapshots"]):
        report = amdsmi.parse_json(json.dumps(snapshot), f"amd-smi metric #{k}")
        card = next((g for g in report.gpus if g.index == 0), None)
        row = {"t": k * document["interval_s"]}
        if card is not None:
            row.update(
                temp_c=card.temperature_edge_c, hotspot_c=card.temperature_hotspot_c,
                mem_temp_c=card.temperature_mem_c, power_w=card.power_w, fan_rpm=card.fan_rpm,
            )  # fmt: skip
        rows.append(row)
    return thermal.Series.from_samples(rows, ("temp_c", "hotspot_c", "mem_temp_c", "power_w", "fan_rpm"))


def verdicts(s: thermal.Series) -> dict[str, str]:
    out = {"fan": thermal.fan(s, LIMITS).status, "sensors": thermal.sensors(s, LIMITS).status}
    for sensor, crit in R9700_CRIT.items():
        out[sensor] = thermal.limit(s, sensor, crit, LIMITS).status
    return out


def test_a_healthy_card_is_flagged_by_nothing():
    assert verdicts(series("healthy")) == {
        "fan": PASS,
        "sensors": PASS,
        "hotspot_c": PASS,
        "mem_temp_c": PASS,
    }


def test_a_fan_that_never_spins_while_the_card_heats_is_a_stall_and_the_heat_is_flagged_too():
    s = series("stalled-fan")

    fan = thermal.fan(s, LIMITS)
    assert fan.status == FAIL
    assert fan.reason == "fan at 0 rpm for the whole load while the hotspot rose from 46 to 109 C"
    assert fan.code == "FAN_STALLED" and "stop using the card" in fan.hint
    assert verdicts(s) == {"fan": FAIL, "sensors": PASS, "hotspot_c": FAIL, "mem_temp_c": WARN}


def test_frozen_temperatures_make_the_card_thermally_blind_never_a_pass():
    s = series("stale-sensors")

    blind = thermal.sensors(s, LIMITS)
    assert blind.status == FAIL
    assert blind.code == "THERMALLY_BLIND"
    assert blind.reason.startswith("no temperature reading moved under load")
    assert "edge stuck at 35" in blind.reason and "hotspot stuck at 38" in blind.reason
    assert "memory" not in blind.reason  # N/A throughout: a sensor the card does not have, not a stuck one
    # The limits are not judged on frozen readings (a stuck 38 C must not pass a card), and the
    # fan, which plainly speeds up under load, is judged without them.
    untrusted = blind.evidence["untrusted"]
    assert untrusted == ["hotspot_c", "temp_c"]
    assert thermal.limit(s, "hotspot_c", 110.0, LIMITS, untrusted=untrusted).status == INCONCLUSIVE
    assert thermal.fan(s, LIMITS, untrusted).status == PASS


def test_a_still_fan_beside_a_stuck_temperature_is_not_called_healthy():
    samples = [{"t": k, "hotspot_c": 38.0, "fan_rpm": 0} for k in range(40)]

    assert thermal.fan(thermal.Series.from_samples(samples), LIMITS, ["hotspot_c"]).status == INCONCLUSIVE


def test_one_stale_sensor_beside_live_ones_is_inconclusive_naming_it():
    samples = [{"t": k, "hotspot_c": 50 + k / 2, "temp_c": 45 + k / 3, "mem_temp_c": 60.0} for k in range(30)]

    verdict = thermal.sensors(thermal.Series.from_samples(samples), LIMITS)

    assert verdict.status == INCONCLUSIVE
    assert verdict.reason == "not every reading can be trusted: memory stuck at 60"


def test_read_errors_count_against_a_sensor():
    samples = [{"t": k / 10, "hotspot_c": 50 + k / 20, "temp_c": 40 + k / 30} for k in range(200)]
    samples[7]["errors"] = ["hotspot_c"]

    verdict = thermal.sensors(thermal.Series.from_samples(samples), LIMITS)

    assert verdict.status == INCONCLUSIVE and "hotspot (1 read errors)" in verdict.reason


def test_too_short_a_load_cannot_tell_stuck_from_steady():
    samples = [{"t": k, "hotspot_c": 50.0} for k in range(5)]

    assert thermal.sensors(thermal.Series.from_samples(samples), LIMITS).status == INCONCLUSIVE


def test_a_card_without_a_fan_reading_is_skipped_not_passed():
    samples = [{"t": k, "hotspot_c": 50.0 + k} for k in range(30)]

    assert thermal.fan(thermal.Series.from_samples(samples), LIMITS).status == SKIP


def test_a_fan_in_zero_rpm_mode_on_a_cool_card_is_fine():
    samples = [{"t": k, "hotspot_c": 40.0 + k / 10, "fan_rpm": 0} for k in range(30)]

    assert thermal.fan(thermal.Series.from_samples(samples), LIMITS).status == PASS


def test_a_fan_that_slows_while_the_card_heats_warns():
    samples = [{"t": k, "hotspot_c": 50.0 + k / 2, "fan_rpm": 3000 - 40 * k} for k in range(40)]

    assert thermal.fan(thermal.Series.from_samples(samples), LIMITS).status == WARN


@pytest.mark.parametrize(
    ("peak", "slope", "status"),
    [(80, 0.0, PASS), (96, 0.0, WARN), (106, 0.0, FAIL), (88, 12.0, WARN)],
    ids=["cool", "within-15C", "within-5C", "still-climbing-fast"],
)
def test_the_hotspot_against_its_critical_limit(peak, slope, status):
    """Watched for 5 minutes, 88 C rising 12 C/min reaches 110 C in under 2: not levelling off."""
    samples = [{"t": k, "hotspot_c": peak - slope * (299 - k) / 60} for k in range(300)]

    assert thermal.limit(thermal.Series.from_samples(samples), "hotspot_c", 110.0, LIMITS).status == status


def test_a_temperature_without_a_known_limit_is_skipped():
    samples = [{"t": k, "temp_c": 50.0} for k in range(30)]

    assert thermal.limit(thermal.Series.from_samples(samples), "temp_c", None, LIMITS).status == SKIP


def test_a_steep_first_minute_is_not_extrapolated_past_what_was_watched():
    """The H200 of docs/benchmarks.md: 43 -> 61 C in a 60 s GEMM phase, 12 C/min at the end, far
    from its 95 C shutdown limit. Three minutes of straight line from one minute of data would
    call a healthy card overheating."""
    samples = [{"t": k, "temp_c": 43 + 18 * k / 60} for k in range(61)]

    verdict = thermal.limit(thermal.Series.from_samples(samples), "temp_c", 95.0, LIMITS)

    assert verdict.status == PASS and "still rising" in verdict.reason
