"""Fleet judging (r9700ctl.fleet): each node's weakest figure against the fleet median, robust z."""

from __future__ import annotations

import dataclasses

import pytest

from r9700ctl import agentpack
from r9700ctl.agent.stats import MAD_TO_SIGMA
from r9700ctl.fleet import judge_fleet as judge_with
from r9700ctl.fleet import limits, node_figures, subject_kind

RULE = limits(agentpack.data_document("thresholds"))  # the shipped thresholds.yaml


def judge_fleet(reports: dict[str, dict]):
    return judge_with(reports, RULE)


def result(check: str, subject: str, value: float, unit: str, metric: str = "bandwidth") -> dict:
    return {"id": check, "subject": subject, "status": "PASS", "metric": metric, "value": value, "unit": unit}


def reports(values: dict[str, float], check: str = "hostbw.h2d", unit: str = "GB/s") -> dict[str, dict]:
    return {node: {"results": [result(check, "gpu0", value, unit)]} for node, value in values.items()}


def planted(outlier: float, unit: str = "GB/s") -> dict[str, dict]:
    """Five nodes: median 50, MAD 1 (so one sigma is 1.4826), node5 at `outlier`."""
    return reports({"node1": 49.0, "node2": 50.0, "node3": 51.0, "node4": 50.0, "node5": outlier}, unit=unit)


def verdicts(judgement) -> dict[str, str]:
    return {r.evidence["node"]: r.status for r in judgement.results}


def test_an_inconclusive_figure_is_left_out_of_the_fleet_comparison():
    """A busy GPU's 300 TFLOPS says nothing about the card: it is not a fleet outlier."""
    fleet = planted(20.0)
    fleet["node5"]["results"][0]["status"] = "INCONCLUSIVE"
    assert "node5" not in verdicts(judge_fleet(fleet))


@pytest.mark.parametrize(
    ("outlier", "status"),
    [
        pytest.param(50.0 - 2.9 * MAD_TO_SIGMA, "PASS", id="z=-2.9"),
        pytest.param(50.0 - 3.5 * MAD_TO_SIGMA, "WARN", id="z=-3.5"),
        pytest.param(50.0 - 5.5 * MAD_TO_SIGMA, "FAIL", id="z=-5.5"),
    ],
)
def test_a_slow_node_among_five_is_warned_past_z_3_and_failed_past_z_5(outlier, status):
    """The MAD barely moves with one outlier among five, so z is where the thresholds put it."""
    judgement = judge_fleet(planted(outlier))

    assert verdicts(judgement)["node5"] == status
    assert {n: s for n, s in verdicts(judgement).items() if n != "node5"} == dict.fromkeys(
        ["node1", "node2", "node3", "node4"], "PASS"
    )
    node5 = next(r for r in judgement.results if r.evidence["node"] == "node5")
    assert node5.id == "fleet.hostbw.h2d" and node5.subject == "node5:gpu0"
    assert (node5.code == "FLEET_OUTLIER") == (status != "PASS")
    assert ("vs fleet median" in node5.hint) == (status != "PASS")


def test_a_fast_node_is_not_an_outlier_when_higher_is_better():
    """Only the bad direction counts: a node far above the median is not a finding."""
    assert verdicts(judge_fleet(planted(80.0)))["node5"] == "PASS"


def test_for_latency_higher_is_the_bad_direction():
    slow = judge_fleet(planted(50.0 + 6 * MAD_TO_SIGMA, unit="ms"))
    fast = judge_fleet(planted(50.0 - 6 * MAD_TO_SIGMA, unit="ms"))

    assert verdicts(slow)["node5"] == "FAIL"
    assert verdicts(fast)["node5"] == "PASS"


def test_fewer_than_three_nodes_give_no_verdict_and_say_so_once():
    judgement = judge_fleet(reports({"node1": 10.0, "node2": 50.0}))

    assert judgement.results == [] and judgement.compared == 0
    assert judgement.note == "no fleet comparison: 2 node(s) with a report, it needs at least 3"


def test_identical_figures_give_no_verdict():
    """MAD 0 would divide by zero: no spread means nothing to call an outlier."""
    judgement = judge_fleet(reports({"node1": 50.0, "node2": 50.0, "node3": 50.0}))

    assert judgement.results == []
    assert "MAD 0" in judgement.note


def test_a_node_is_judged_by_its_weakest_gpu():
    node = {
        "results": [
            result("hostbw.h2d", "gpu0", 50.0, "GB/s"),
            result("hostbw.h2d", "gpu1", 20.0, "GB/s"),
            result("p2p.bandwidth", "gpu0->gpu1", 30.0, "GB/s"),
            result("pcie.link", "gpu0", 32.0, "GT/s"),  # no direction known: not compared
            result("compute.gemm", "gpu0", float("nan"), "TFLOPS"),
            result("inventory.count", "node", True, "x"),  # a bool is not a figure
        ]
    }

    figures = {(k.check, k.subject_kind): v for k, v in node_figures(node).items()}

    assert figures == {
        ("hostbw.h2d", "gpu"): (20.0, "gpu1"),
        ("p2p.bandwidth", "gpu->gpu"): (30.0, "gpu0->gpu1"),
    }


def test_subject_kinds_drop_gpu_indices_only():
    assert subject_kind("gpu3") == "gpu"
    assert subject_kind("gpu0->gpu7") == "gpu->gpu"
    assert subject_kind("n=4 p2p") == "n=4 p2p"


def test_a_metric_on_only_some_nodes_is_compared_where_three_have_it():
    fleet = planted(50.0 - 6 * MAD_TO_SIGMA)
    fleet["node1"]["results"].append(result("collective.allreduce", "node", 10.0, "GB/s", "busbw"))

    judgement = judge_fleet(fleet)

    assert judgement.compared == 1
    assert {r.id for r in judgement.results} == {"fleet.hostbw.h2d"}


def test_the_fleet_rule_comes_from_thresholds_yaml_and_a_missing_key_is_an_error():
    """Bug class pinned: WARN_Z, FAIL_Z and MIN_NODES lived in fleet.py beside thresholds.yaml."""
    assert (RULE.warn_z, RULE.fail_z, RULE.min_nodes) == (3.0, 5.0, 3)
    stricter = judge_with(planted(50.0 - 2.5 * MAD_TO_SIGMA), dataclasses.replace(RULE, warn_z=2.0))
    assert verdicts(stricter)["node5"] == "WARN" and "WARN > 2" in stricter.results[0].threshold
    document = agentpack.data_document("thresholds")
    del document["models"]["default"]["fleet"]["fail_z"]
    with pytest.raises(ValueError, match=r"models\.default\.fleet lacks fail_z"):
        limits(document)
