"""`--baseline PREVIOUS.json`: the CVS 3-gate comparison of a run with an earlier report.

What these pin, and why without a GPU: the statistics are pure functions (tables below), so a
wrong tier, a missing guard or a lost gate shows here on any machine; the end-to-end test runs
the real collective check twice on the CPU (gloo ranks spawned by the agent's own launcher),
the second time with a planted slowdown, and the comparison must flag it. Bad baseline files
are bad input: one line, exit 64, nothing measured.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from agent_fake_node import agent_environment, r9700_node, run_agent
from click.testing import CliRunner

from r9700ctl.agent import baseline, levels, report, thresholds
from r9700ctl.agent.baseline import INCONCLUSIVE, PASS, REGRESSION, Figure
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.gpus import GpuInfo
from r9700ctl.cli import cli

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
R9700 = "AMD Radeon AI PRO R9700"


def shipped(**changes) -> dict:
    """The comparison's config from the shipped thresholds.yaml (the one source), with changes."""
    values = thresholds.resolve([R9700], ["1002"]).values
    return {**baseline.config_from_thresholds(values), **changes}


@functools.cache
def cfg() -> dict:
    """The shipped config (built on first use: tests/conftest.py stages the data files)."""
    return shipped()


# --- tiny builders -----------------------------------------------------------------------------


def windows(median: float, spread: float = 0.002, n: int = 5) -> tuple[float, ...]:
    """n windows around `median`, +-spread (relative), median exactly `median`."""
    half = n // 2
    return tuple(median * (1 + spread * (k - half) / max(half, 1)) for k in range(n))


def busbw(
    size_mib: float, median: float, spread: float = 0.002, n: int = 5, subject: str = "p2p_on"
) -> Figure:
    size = int(size_mib * MiB)
    return Figure(
        "collective.allreduce",
        subject,
        f"busbw_{baseline.size_label(size)}",
        "busbw",
        median,
        "GB/s",
        windows(median, spread, n),
        size,
    )


def bandwidth(median: float, spread: float = 0.002, n: int = 5) -> Figure:
    return Figure(
        "hostbw.h2d", "gpu0", "h2d_pinned_bandwidth", "bandwidth", median, "GB/s", windows(median, spread, n)
    )


# --- pure functions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "tier"),
    [
        pytest.param(64 * 1024, "small", id="64KiB"),
        pytest.param(1 * MiB, "small", id="1MiB-inclusive"),
        pytest.param(1 * MiB + 1, "mid", id="just-above-1MiB"),
        pytest.param(64 * MiB, "mid", id="64MiB-inclusive"),
        pytest.param(256 * MiB, "large", id="256MiB"),
    ],
)
def test_message_sizes_fall_into_the_cvs_tiers(size, tier):
    """Tier bounds are inclusive (ROCm/cvs): 1 MiB is small, 64 MiB is mid."""
    assert baseline.size_tier(size, cfg()) == tier


@pytest.mark.parametrize(
    ("tier", "limit"),
    [
        pytest.param("small", 0.20, id="small"),
        pytest.param("mid", 0.15, id="mid"),
        pytest.param("large", 0.075, id="large"),
        pytest.param("bandwidth", 0.075, id="bandwidth"),
        pytest.param("tflops", 0.075, id="tflops"),
        pytest.param("something-new", 0.075, id="unknown-gets-the-tightest"),
    ],
)
def test_each_tier_allows_its_documented_drop(tier, limit):
    """An unknown kind of figure must get the tightest limit, never a lenient default."""
    assert baseline.threshold_for(tier, cfg()) == pytest.approx(limit)


def test_the_comparison_is_configured_from_thresholds_yaml_only():
    """thresholds.yaml is the one place operators tune: no defaults in the code, a missing key is an
    error (the runner refuses to start without one of baseline.REQUIRED_KEYS)."""
    values = thresholds.resolve([R9700], ["1002"]).values
    assert set(values) >= baseline.REQUIRED_KEYS
    tuned = baseline.config_from_thresholds({**values, "baseline.busbw_large_drop": 0.2})
    assert tuned["drop"]["large"] == 0.2
    assert tuned["drop"]["mid"] == 0.15
    assert tuned["small_max_bytes"] == 1 * MiB and tuned["current_percentile"] == 75
    with pytest.raises(KeyError):
        baseline.config_from_thresholds({k: v for k, v in values.items() if k != "baseline.tflops_drop"})


@pytest.mark.parametrize(
    ("reference", "current", "verdict", "reason_part"),
    [
        pytest.param(busbw(256, 40.0), busbw(256, 36.0), REGRESSION, "40 -> 36", id="large-10pct-drop"),
        pytest.param(busbw(256, 40.0), busbw(256, 38.0), PASS, "-5.0%", id="large-5pct-within"),
        pytest.param(busbw(1, 4.0), busbw(1, 3.4), PASS, "limit 20.0%", id="small-15pct-within"),
        pytest.param(busbw(1, 4.0), busbw(1, 2.8), REGRESSION, "-30.0%", id="small-30pct-drop"),
        pytest.param(busbw(16, 10.0), busbw(16, 8.0), REGRESSION, "limit 15.0%", id="mid-20pct-drop"),
        pytest.param(bandwidth(55.0), bandwidth(50.0), REGRESSION, "55 -> 50", id="bandwidth-9pct-drop"),
        pytest.param(bandwidth(55.0), bandwidth(60.0), PASS, "+9.1%", id="faster-is-never-a-regression"),
        pytest.param(
            bandwidth(55.0, spread=0.15),
            bandwidth(50.0),
            PASS,
            "(2 x baseline CV)",
            id="noisy-baseline-widens",
        ),
        pytest.param(
            bandwidth(55.0, n=2),
            bandwidth(40.0),
            INCONCLUSIVE,
            "2 window(s) in the baseline and 5 now; need >= 3",
            id="too-few-windows",
        ),
        pytest.param(
            busbw(256, 0.3),
            busbw(256, 0.1),
            INCONCLUSIVE,
            "baseline median 0.3 GB/s is below the large floor 0.5 GB/s",
            id="baseline-below-floor",
        ),
        pytest.param(
            busbw(256, 40.0),
            busbw(256, 0.2),
            INCONCLUSIVE,
            "this run's median 0.2 GB/s is below the large floor 0.5 GB/s: nothing was measured",
            id="measured-nothing",
        ),
    ],
)
def test_one_figure_against_its_baseline(reference, current, verdict, reason_part):
    """Gates 1 and 2 with their guards; the reason carries the numbers a reader needs."""
    comparison = baseline.compare_figure(reference, current, cfg())
    assert comparison.verdict == verdict, comparison.reason
    assert reason_part in comparison.reason


def test_a_drop_with_overlapping_windows_is_not_confirmed():
    """Gate 2: one slow run whose windows overlap the baseline's is noise, not a regression."""
    reference = Figure("hostbw.h2d", "gpu0", "m", "bandwidth", 55.0, "GB/s", (50.0, 54.0, 55.0, 56.0, 60.0))
    current = Figure("hostbw.h2d", "gpu0", "m", "bandwidth", 45.0, "GB/s", (40.0, 44.0, 45.0, 55.0, 58.0))
    comparison = baseline.compare_figure(reference, current, shipped(noise_factor=0))
    assert comparison.gates == {"drop": True, "separation": False}
    assert comparison.verdict == PASS


@pytest.mark.parametrize(
    ("currents", "confirmed"),
    [
        pytest.param([40, 40, 40, 30], [], id="isolated-largest-size"),
        pytest.param([40, 40, 30, 30], ["busbw_256MiB", "busbw_1024MiB"], id="two-adjacent-sizes"),
        pytest.param([30, 40, 30, 40], [], id="two-sizes-not-adjacent"),
    ],
)
def test_busbw_regressions_must_span_adjacent_sizes(currents, confirmed):
    """Gate 3 (ROCm/cvs adjacency): noise hits one size, a real regression a band of sizes."""
    sizes = [64, 128, 256, 1024]
    before = {f.key: f for f in (busbw(s, 40.0) for s in sizes)}
    now = {f.key: f for f in (busbw(s, float(v)) for s, v in zip(sizes, currents, strict=True))}
    comparisons = baseline.compare(before, now, cfg())
    assert [c.current.metric for c in comparisons if c.verdict == REGRESSION] == confirmed
    isolated = [c for c in comparisons if c.gates.get("adjacency") is False]
    assert all("isolated size" in c.reason for c in isolated)


def test_a_one_size_sweep_needs_no_neighbour():
    """quick measures 256 MiB only: adjacency cannot apply, the drop alone (plus gate 2) decides."""
    comparisons = baseline.compare(
        {busbw(256, 40.0).key: busbw(256, 40.0)}, {busbw(256, 30.0).key: busbw(256, 30.0)}, cfg()
    )
    assert [c.verdict for c in comparisons] == [REGRESSION]


def _result(
    id_: str, subject: str, metric: str, value, unit: str, evidence: dict, status: str = "PASS"
) -> dict:
    return {
        "id": id_,
        "subject": subject,
        "status": status,
        "metric": metric,
        "value": value,
        "unit": unit,
        "threshold": "",
        "hint": "",
        "evidence": evidence,
    }


def test_figures_are_read_from_every_kind_of_result_and_garbage_is_skipped():
    """Each check keeps its samples under its own key; a bool, string or NaN is never a figure."""
    results = [
        _result(
            "collective.allreduce",
            "p2p_on",
            "busbw_256MiB",
            30.0,
            "GB/s",
            {
                "sizes": [
                    {"size_bytes": MiB, "busbw_gbs": 3.0, "windows_busbw_gbs": [3.0, 3.1, 2.9]},
                    {"size_bytes": 256 * MiB, "busbw_gbs": 30.0, "windows_busbw_gbs": [30, 31, "x"]},
                ]
            },
        ),
        _result(
            "hostbw.h2d", "gpu0", "h2d_pinned_bandwidth", 55.0, "GB/s", {"windows_gbs": [55, 55.1, None]}
        ),
        _result(
            "compute.tflops_bf16", "gpu0", "gemm_bf16_tflops", 650.0, "TFLOPS", {"windows_tflops": [650, 651]}
        ),
        _result(
            "scaling.tp",
            "n=2 p2p_on",
            "speedup",
            1.8,
            "x",
            {"table": [{"n": 1, "step_ms": 10.0}], "repeats": [{"step_ms": 5.0}, {"step_ms": 6.0}]},
        ),
        _result(
            "p2p.bandwidth",
            "gpu0->gpu1",
            "p2p_unidirectional_bandwidth",
            50.0,
            "GB/s",
            {"unidirectional_windows_gbs": [50.0, 50.2, 49.9]},
        ),
        _result("stability.latency", "node", "p99_over_p50", 1.02, "ratio", {}),
        _result("hostbw.d2h", "gpu0", "d2h_pinned_bandwidth", True, "GB/s", {}),
        _result("memory.copy", "gpu0", "copy_bandwidth", float("nan"), "GB/s", {}),
        _result("p2p.bandwidth", "node", "", None, "", {"gpus": 1}, status="SKIP"),
        _result("hostbw.h2d", "gpu1", "timeout", 61.0, "GB/s", {}, status="ERROR"),
    ]
    found = baseline.figures(results)
    assert sorted(found) == sorted(
        [
            ("collective.allreduce", "p2p_on", "busbw_1MiB"),
            ("collective.allreduce", "p2p_on", "busbw_256MiB"),
            ("hostbw.h2d", "gpu0", "h2d_pinned_bandwidth"),
            ("compute.tflops_bf16", "gpu0", "gemm_bf16_tflops"),
            ("scaling.tp", "n=2 p2p_on", "speedup"),
            ("p2p.bandwidth", "gpu0->gpu1", "p2p_unidirectional_bandwidth"),
        ]
    )
    # P2P keeps its windows under its own key: without them every P2P comparison was INCONCLUSIVE.
    assert found[("p2p.bandwidth", "gpu0->gpu1", "p2p_unidirectional_bandwidth")].samples == (
        50.0,
        50.2,
        49.9,
    )
    assert found[("collective.allreduce", "p2p_on", "busbw_256MiB")].samples == (30.0, 31.0)
    assert found[("hostbw.h2d", "gpu0", "h2d_pinned_bandwidth")].samples == (55.0, 55.1)
    assert found[("scaling.tp", "n=2 p2p_on", "speedup")].samples == pytest.approx((2.0, 10 / 6))


def test_environment_differences_name_the_p2p_settings_first():
    """A baseline taken with P2P on, a run under NCCL_P2P_DISABLE=1: that is the line to read first."""
    before = {"variables": {"NCCL_DEBUG": "WARN"}, "torch": "2.11.0", "nccl": "2.28.3"}
    now = {"variables": {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}, "torch": "2.11.0", "nccl": "2.29.1"}
    assert baseline.environment_differences(before, now) == [
        "NCCL_P2P_DISABLE unset -> 1",
        "NCCL_DEBUG WARN -> INFO",
        "nccl 2.28.3 -> 2.29.1",
    ]


def _doc(
    results: list[dict], variables: dict | None = None, model: str = R9700, level: str = "quick"
) -> dict:
    return {
        "schema": "r9700ctl.validate/1",
        "node": "node07",
        "level": level,
        "started": "2026-12-01T10:00:00+0000",
        "environment": {"variables": variables or {}, "torch": "2.11.0"},
        "gpus": [{"index": 0, "model": model}],
        "results": results,
    }


def _busbw_result(medians: dict[int, float]) -> dict:
    rows = [
        {"size_bytes": s * MiB, "busbw_gbs": m, "windows_busbw_gbs": list(windows(m))}
        for s, m in medians.items()
    ]
    return _result("collective.allreduce", "p2p_on", "busbw", max(medians.values()), "GB/s", {"sizes": rows})


def test_a_p2p_off_run_against_a_p2p_on_baseline_fails_and_names_the_setting():
    """The planted fault of issue 6: the hint must point at NCCL_P2P_DISABLE, with the numbers."""
    before = _doc([_busbw_result({64: 300.0, 256: 350.0, 1024: 360.0})])
    now = [_busbw_result({64: 20.0, 256: 21.0, 1024: 21.0})]
    results = baseline.baseline_results(
        before,
        now,
        {"variables": {"NCCL_P2P_DISABLE": "1"}, "torch": "2.11.0"},
        cfg(),
        source_path="before.json",
    )
    by_metric = {r.metric: r for r in results}
    assert [by_metric[m].status for m in ("busbw_64MiB", "busbw_256MiB", "busbw_1024MiB")] == ["FAIL"] * 3
    hint = by_metric["busbw_256MiB"].hint
    assert "350 -> 21 GB/s (-94.0%)" in hint
    assert "likely cause: the environment differs from the baseline's (NCCL_P2P_DISABLE unset -> 1)" in hint
    assert by_metric["busbw_256MiB"].id == "baseline.busbw_256MiB"
    assert by_metric["busbw_256MiB"].subject == "p2p_on"
    coverage = by_metric["figures_compared"]
    assert (coverage.id, coverage.status, coverage.value) == ("baseline.coverage", "PASS", 3)


def test_a_report_compared_with_itself_passes_every_figure():
    """Zero drop is a PASS on every figure, and nothing is missing."""
    doc = _doc([_busbw_result({64: 300.0, 256: 350.0})])
    results = baseline.baseline_results(doc, doc["results"], doc["environment"], cfg())
    assert {r.status for r in results} == {"PASS"}
    assert results[-1].hint == ""


def test_nothing_in_common_is_inconclusive_not_a_quiet_pass():
    """A config-level run against a quick baseline compared nothing: that must not read as PASS."""
    doc = _doc([_busbw_result({256: 350.0})])
    results = baseline.baseline_results(doc, [], doc["environment"], cfg(), level="config")
    assert [(r.id, r.status, r.value) for r in results] == [("baseline.coverage", "INCONCLUSIVE", 0)]
    assert "its level quick, this run config" in results[0].hint
    assert "1 baseline figure(s) not measured now" in results[0].hint


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("{not json", "before.json:1:2: not JSON (Expecting property name", id="garbage"),
        pytest.param("[1, 2]", "JSON, but a list rather than a validate report", id="a-list"),
        pytest.param(
            '{"schema": "r9700ctl.doctor/1"}', "a 'r9700ctl.doctor/1' document, not a validate", id="other"
        ),
        pytest.param(
            '{"schema": "r9700ctl.validate/2", "results": []}', "schema r9700ctl.validate/2 is not", id="v2"
        ),
        pytest.param(
            '{"schema": "r9700ctl.validate/1"}', "the report has no 'results' list", id="no-results"
        ),
        pytest.param(
            '{"schema": "r9700ctl.validate/1", "results": [{"id": "x"}]}',
            "results[0] has no string 'id' and 'subject'",
            id="result-without-subject",
        ),
    ],
)
def test_unusable_baseline_files_are_refused_with_one_line(tmp_path, content, message):
    path = tmp_path / "before.json"
    path.write_text(content)
    with pytest.raises(baseline.BaselineError) as caught:
        baseline.load(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"--baseline {path}")
    assert "\n" not in str(caught.value)


def test_a_missing_baseline_file_says_what_to_give():
    with pytest.raises(
        baseline.BaselineError, match="no such file \\(give the --json report of an earlier run"
    ):
        baseline.load(Path("/nonexistent/before.json"))


def test_a_baseline_of_another_gpu_model_is_refused():
    """H200 figures against an R9700 node compare nothing meaningful: refuse, do not judge."""
    line = baseline.model_mismatch(_doc([], model="NVIDIA H200"), [R9700])
    assert line == (
        "--baseline: measured on NVIDIA H200, this node has AMD Radeon AI PRO R9700: figures of different "
        "GPU models are not comparable; give a report of this node's model"
    )
    assert baseline.model_mismatch(_doc([]), [R9700]) == ""


# --- end to end: the real collective check twice on the CPU ------------------------------------


@dataclass
class GlooContext(AgentContext):
    """The agent's context with every rank step on gloo: the collective check's real path on a CPU."""

    def run_ranks(self, step_id, world_size, fn, *args, timeout_s, backend="nccl", env=None, gpus=None):  # type: ignore[override]
        return super().run_ranks(step_id, world_size, fn, *args, timeout_s=timeout_s, backend="gloo", env=env)


def _collective_report(tmp_path: Path, name: str) -> Path:
    """Run checks.collective on two gloo ranks (4 and 16 MiB, 3 windows), write its report, return the path.

    Not smaller: 1 MiB all-reduces on gloo are noisy enough on a loaded machine that a slowed
    run's windows can overlap the baseline's."""
    from r9700ctl.agent.checks import collective

    params = {
        **levels.params_for("quick"),
        "collective.sizes_mib": "4,16",
        "collective.windows": 3,
        "collective.p2p_off": False,
    }
    gpus = [GpuInfo(index=i, vendor="1002", model=R9700) for i in (0, 1)]
    ctx = GlooContext(
        level="quick", gpus=gpus, thresholds=thresholds.resolve([R9700], ["1002"]), params=params
    )
    results = collective.run(ctx)
    doc = report.build(
        node="cpu-node",
        level="quick",
        started="2026-12-02T10:00:00+0000",
        duration_s=1.0,
        environment={"variables": {}},
        gpus=[g.to_dict() for g in gpus],
        results=results,
    )
    path = tmp_path / f"{name}.json"
    report.write_json(path, doc)
    return path


def test_a_planted_allreduce_slowdown_is_flagged_against_the_previous_run(tmp_path, monkeypatch):
    """Two real runs of the collective check; in the second every timed all-reduce lasts 5x as long.

    The bug this pins: a comparison that silently compares nothing (wrong keys, lost samples,
    floors too high for small sizes) passes every slowed run; here both sizes must FAIL.
    """
    pytest.importorskip("torch")
    monkeypatch.delenv("R9700CTL_TEST_ALLREDUCE_SLOWDOWN", raising=False)
    before = baseline.load(_collective_report(tmp_path, "before"))
    statuses = {r["status"] for r in before["results"]}
    assert "ERROR" not in statuses, before["results"]
    monkeypatch.setenv("R9700CTL_TEST_ALLREDUCE_SLOWDOWN", "5")
    after = baseline.load(_collective_report(tmp_path, "after"))
    rows = after["results"][0]["evidence"]["sizes"]
    assert [r["wrong"] for r in rows] == [0, 0]

    config = baseline.config_from_thresholds(thresholds.resolve([R9700], ["1002"]).values)
    # The floors are for GPUs (0.05 GB/s mid tier); gloo on a loaded CI machine crawls below them
    # once slowed 5x, and this test is about the three gates, not the floors.
    config["floor"] = dict.fromkeys(config["floor"], 0.0)
    results = baseline.baseline_results(before, after["results"], after["environment"], config)
    by_metric = {r.metric: r for r in results}
    for metric in ("busbw_4MiB", "busbw_16MiB"):
        flagged = by_metric[metric]
        assert flagged.status == "FAIL", flagged.hint
        assert flagged.evidence["gates"] == {"drop": True, "separation": True, "adjacency": True}
        assert flagged.evidence["baseline"]["windows"] == 3
        assert "fell since the baseline" in flagged.hint
    assert by_metric["figures_compared"].value == 2

    same = baseline.baseline_results(before, before["results"], before["environment"], config)
    assert {r.status for r in same} == {"PASS"}


# --- the command lines -------------------------------------------------------------------------


@pytest.fixture
def agent_env(tmp_path):
    return agent_environment(tmp_path)


_agent = run_agent


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("garbage", "not JSON (Expecting value)", id="garbage"),
        pytest.param('{"schema": "r9700ctl.doctor/1"}', "not a validate report", id="another-report"),
        pytest.param(
            json.dumps(_doc([], model="NVIDIA H200")), "measured on NVIDIA H200, this node", id="model"
        ),
    ],
)
def test_the_agent_refuses_a_bad_baseline_with_one_line_and_exit_64(tmp_path, agent_env, content, message):
    root = tmp_path / "root"
    r9700_node(root, 2)
    path = tmp_path / "before.json"
    path.write_text(content)
    out = tmp_path / "now.json"
    result = _agent(
        agent_env,
        "--root",
        str(root),
        "--journal-dir",
        str(tmp_path / "j"),
        "--json",
        str(out),
        "--baseline",
        str(path),
    )
    assert result.returncode == 64, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: --baseline {path}")
    assert message in result.stderr
    assert not out.exists()


def test_the_agent_compares_with_a_baseline_and_reports_what_it_compared(tmp_path, agent_env):
    """config has no figures: the run says so (INCONCLUSIVE, exit 4) and names the baseline in its JSON."""
    root = tmp_path / "root"
    r9700_node(root, 2)
    before = tmp_path / "before.json"
    before.write_text(json.dumps(_doc([_busbw_result({256: 30.0})])))
    out = tmp_path / "now.json"
    result = _agent(
        agent_env,
        "--level",
        "config",
        "--root",
        str(root),
        "--journal-dir",
        str(tmp_path / "j"),
        "--json",
        str(out),
        "--baseline",
        str(before),
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert any(
        line.split()[:4] == ["baseline.coverage", "node", "INCONCLUSIVE", "0"]
        for line in result.stdout.splitlines()
    )
    assert "its level quick, this run config" in " ".join(result.stdout.split())
    doc = json.loads(out.read_text())
    assert doc["baseline"] == {
        "path": str(before),
        "node": "node07",
        "level": "quick",
        "started": "2026-12-01T10:00:00+0000",
    }


def test_validate_local_passes_baseline_to_the_agent_and_keeps_its_one_line_error(tmp_path):
    """`r9700ctl validate --local --baseline` is the agent's option: same check, same exit 64."""
    path = tmp_path / "before.json"
    path.write_text("garbage")
    result = CliRunner().invoke(
        cli,
        ["validate", "--local", "--journal-dir", str(tmp_path / "j"), "--baseline", str(path)],
        catch_exceptions=False,
    )
    assert result.exit_code == 64, result.output
    assert result.output == (
        f"error: --baseline {path}:1:1: not JSON (Expecting value); give the file an earlier run wrote "
        "with --json\n"
    )
