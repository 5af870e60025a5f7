"""Baselines and trends from the history, on the agent's recorded H200 reports and edited copies.

The rule itself (three gates, guards) is pinned in test_agent_baseline.py; these tests pin what
the history adds: figures come back from SQLite intact, a saved name or the node's last run is
the reference, GPUs are matched by serial or PCI address (a card that moved is followed), a
planted slow GPU fails on that GPU only, and a node with nothing to compare is INCONCLUSIVE.
"""

from __future__ import annotations

import copy

import pytest
from history_reports import fleet, four_gpus, moved, recorded, slow_gpu

from r9700ctl.errors import BadInput
from r9700ctl.history import compare, queries
from r9700ctl.history.record import gpu_keys, identity_subject, record
from r9700ctl.history.runs import HistoryPlan
from r9700ctl.history.store import open_history


@pytest.fixture
def history(tmp_path):
    with open_history(tmp_path / "history.db") as opened:
        yield opened


def at(report, started):
    out = copy.deepcopy(report)
    out["started"] = started
    return out


def statuses(results):
    return {(r.id, r.subject): r.status for r in results}


def test_gpus_are_named_by_serial_else_pci_address():
    report = four_gpus(recorded())
    report["gpus"][3]["serial"] = "N/A"
    keys = gpu_keys(report)
    assert keys[0] == "sn:1650522000000"
    assert keys[3] == "0000:14:00.0"
    assert identity_subject("gpu0->gpu3", keys) == "sn:1650522000000->0000:14:00.0"
    assert identity_subject("node", keys) == ""


def test_figures_come_back_from_the_database_with_their_windows(history):
    report = recorded()
    run_id = record(history, report, scope="local")
    ref = compare.reference(history, compare.LAST, "vm", level="standard", before_run="")
    assert ref is not None and ref.run_id == run_id
    h2d = next(f for f in ref.figures.values() if f.check == "hostbw.h2d")
    source = next(r for r in report["results"] if r["id"] == "hostbw.h2d")
    assert h2d.samples == tuple(source["evidence"]["windows_gbs"])
    assert h2d.value == source["value"]
    assert ref.environment["torch"] == report["environment"]["torch"]


def test_the_same_node_measured_again_passes_every_figure(history):
    report = four_gpus(recorded())
    record(history, at(report, "2026-12-02T10:00:00+0000"), scope="local")
    now = at(report, "2026-12-03T10:00:00+0000")
    ref = compare.reference(history, compare.LAST, "node1", level="standard", before_run="")
    results = compare.compare_report(now, ref, "node1")
    coverage = results[-1]
    assert coverage.id == "baseline.coverage" and coverage.status == "PASS"
    assert coverage.value == len(results) - 1 >= 4 * 6  # hostbw x2, memory x2, TFLOPS x3 per GPU
    assert {r.status for r in results} == {"PASS"}


def test_a_planted_slow_gpu_fails_on_that_gpu_only(history):
    """GPU 2 lost 30% host<->device bandwidth since the baseline: FAIL there, PASS elsewhere."""
    healthy = four_gpus(recorded())
    record(history, at(healthy, "2026-12-02T10:00:00+0000"), scope="local")
    sick = slow_gpu(at(healthy, "2026-12-03T10:00:00+0000"), "gpu2", 0.7, check_prefix="hostbw.")
    ref = compare.reference(history, compare.LAST, "node1", level="standard", before_run="")
    results = compare.compare_report(sick, ref, "node1")
    failed = sorted((r.id, r.subject) for r in results if r.status == "FAIL")
    assert failed == [("baseline.d2h_pinned_bandwidth", "gpu2"), ("baseline.h2d_pinned_bandwidth", "gpu2")]
    fail = next(r for r in results if r.status == "FAIL")
    assert fail.evidence["gpu"] == "sn:1650522000002"
    assert fail.evidence["baseline_report"]["run_id"] == ref.run_id
    assert "-30.0%" in fail.hint


def test_a_card_that_moved_is_compared_with_itself(history):
    """The slow card (serial ...0002) is torch index 2 in the baseline and index 0 now; the
    comparison follows the serial, so GPU 0's healthy numbers are not held against index 0's."""
    healthy = four_gpus(recorded())
    record(history, at(slow_gpu(healthy, "gpu2", 0.7), "2026-12-02T10:00:00+0000"), scope="local")
    reordered = moved(slow_gpu(healthy, "gpu2", 0.7), [2, 1, 0, 3])
    ref = compare.reference(history, compare.LAST, "node1", level="standard", before_run="")
    results = compare.compare_report(at(reordered, "2026-12-03T10:00:00+0000"), ref, "node1")
    assert {r.status for r in results} == {"PASS"}
    by_subject = {r.evidence.get("gpu") for r in results if r.subject == "gpu0"}
    assert by_subject == {"sn:1650522000002"}


def test_a_saved_baseline_is_the_reference_not_the_last_run(history):
    healthy = four_gpus(recorded())
    golden = record(history, at(healthy, "2026-12-01T10:00:00+0000"), scope="local")
    compare.save(history, "golden", golden, {"node1": "PASS"})
    record(history, at(slow_gpu(healthy, "gpu1", 0.7), "2026-12-02T10:00:00+0000"), scope="local")
    now = at(slow_gpu(healthy, "gpu1", 0.7), "2026-12-03T10:00:00+0000")
    against_last = compare.compare_report(
        now, compare.reference(history, compare.LAST, "node1", level="standard", before_run=""), "node1"
    )
    against_golden = compare.compare_report(
        now, compare.reference(history, "golden", "node1", level="standard", before_run=""), "node1"
    )
    assert {r.status for r in against_last} == {"PASS"}
    assert {(r.subject, r.status) for r in against_golden if r.status != "PASS"} == {("gpu1", "FAIL")}


def test_a_failed_node_is_not_saved_as_a_baseline(history):
    run_id = record(history, recorded(), scope="local")
    saved, refused = compare.save(history, "golden", run_id, {"node1": "PASS", "node2": "FAIL"})
    assert saved == ["node1"] and refused == ["node2 (FAIL)"]
    assert compare.names(history) == {"golden": ["node1"]}


def test_compare_with_an_unknown_name_is_bad_input_before_the_run(tmp_path):
    plan = HistoryPlan(compare_with="golden", path=tmp_path / "history.db")
    with pytest.raises(BadInput) as caught:
        plan.check()
    assert "--compare golden: no baseline of that name in the history (saved: none saved yet)" in str(
        caught.value
    )


@pytest.mark.parametrize("name", ["", "last", "a b", "x" * 65, "../etc"])
def test_a_baseline_name_must_be_plain(name):
    with pytest.raises(BadInput):
        compare.check_name(name)


def test_the_fleet_flow_compares_each_node_records_and_saves(tmp_path):
    """Through HistoryPlan, as `validate INVENTORY --compare golden --save-baseline golden` runs it."""
    path = tmp_path / "history.db"
    healthy = {"node1": four_gpus(recorded(), "node1"), "node2": four_gpus(recorded(), "node2")}
    first = HistoryPlan(save_as="golden", path=path)
    first.check()
    nodes = copy.deepcopy(healthy)
    day1 = "2026-12-02T10:00:00+00:00"
    assert first.after_run(nodes, lambda: fleet(nodes, day1), scope="inventory", source="") == {}
    assert first.notes[-1] == "history: baseline 'golden' saved for node1, node2"

    second = HistoryPlan(compare_with="golden", path=path)
    second.check()
    nodes = {
        "node1": slow_gpu(healthy["node1"], "gpu3", 0.6, "compute."),
        "node2": copy.deepcopy(healthy["node2"]),
    }
    day2 = "2026-12-03T10:00:00+00:00"
    comparisons = second.after_run(nodes, lambda: fleet(nodes, day2), scope="inventory", source="")
    assert {r.status for r in comparisons["node2"]} == {"PASS"}
    assert {(r.subject, r.status) for r in comparisons["node1"] if r.status != "PASS"} == {("gpu3", "FAIL")}
    assert nodes["node1"]["status"] == "FAIL" and nodes["node1"]["exit_code"] == 2
    assert nodes["node2"]["status"] == "PASS"

    with open_history(path) as history:
        runs = queries.list_runs(history)
        # Newest first; the second run was recorded with its comparison's verdict.
        assert [(r.started, r.status) for r in runs] == [
            ("2026-12-03T10:00:00Z", "FAIL"),
            ("2026-12-02T10:00:00Z", "PASS"),
        ]
        series = queries.trend(history, "compute.tflops_bf16", node="node1")
        slow = next(s for s in series if s.gpu == "sn:1650522000003")
        assert slow.change == pytest.approx(-0.4)
        steady = next(s for s in series if s.gpu == "sn:1650522000000")
        assert steady.change == pytest.approx(0.0)


def test_a_node_without_a_reference_is_inconclusive_never_a_pass(tmp_path):
    plan = HistoryPlan(compare_with="last", path=tmp_path / "history.db")
    plan.check()
    nodes = {"node1": four_gpus(recorded())}
    comparisons = plan.after_run(nodes, lambda: nodes["node1"], scope="local", source="")
    [only] = comparisons["node1"]
    assert (only.id, only.status) == ("baseline.coverage", "INCONCLUSIVE")
    assert only.hint == "no earlier run of node1 with figures in the history: nothing was compared"
    assert nodes["node1"]["exit_code"] == 4  # INCONCLUSIVE: its own exit code (issue 10)


def test_a_damaged_history_never_blocks_the_run_and_the_comparison_says_so(tmp_path):
    path = tmp_path / "history.db"
    path.write_bytes(b"garbage" * 1000)
    plan = HistoryPlan(compare_with="golden", save_as="next", path=path)
    plan.check()  # no exception: the run goes on
    nodes = {"node1": four_gpus(recorded())}
    comparisons = plan.after_run(nodes, lambda: nodes["node1"], scope="local", source="")
    [only] = comparisons["node1"]
    assert only.status == "INCONCLUSIVE" and "the history could not be read" in only.hint
    assert len(plan.notes) == 1
    assert plan.notes[0].startswith(f"history: not used: {path}: the history database is damaged")
    assert plan.run_id is None


def test_trend_of_an_unknown_check_names_the_known_ones(history):
    record(history, recorded("quick.json"), scope="local")
    with pytest.raises(BadInput) as caught:
        queries.trend(history, "hostbw.h3d")
    assert "--check hostbw.h3d: nothing recorded (checks: " in str(caught.value)
    assert "hostbw.h2d" in str(caught.value)
