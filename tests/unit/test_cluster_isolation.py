"""Isolation: blame a node only with two good partners; two nodes failing only together are a link."""

import pytest

from r9700ctl.cluster.isolation import isolate, results
from r9700ctl.cluster.plan import rounds


def outcomes(nodes, bad_nodes=(), bad_links=()):
    """Every pair of a full round-robin, failed when it touches a bad node or is a bad link."""
    failed = {}
    for pairs in rounds(nodes):
        for a, b in pairs:
            key = tuple(sorted((a, b)))
            failed[key] = a in bad_nodes or b in bad_nodes or key in bad_links
    return failed


def test_a_node_failing_with_two_good_partners_is_blamed_and_nobody_else():
    nodes = ["node1", "node2", "node3"]
    found = isolate(nodes, outcomes(nodes, bad_nodes={"node3"}))
    assert found.blamed_nodes == {"node3": ["node1", "node2"]}
    assert not found.blamed_links and not found.undecided and not found.retests


def test_in_four_nodes_one_slow_node_is_named_and_no_other():
    """The issue's lab promise: in a 4-node cluster with one slow node, isolation names that node only."""
    nodes = [f"node{i}" for i in range(1, 5)]
    found = isolate(nodes, outcomes(nodes, bad_nodes={"node2"}))
    assert list(found.blamed_nodes) == ["node2"]
    assert not found.blamed_links and not found.undecided


def test_two_nodes_failing_only_with_each_other_point_to_their_link():
    nodes = ["a", "b", "c", "d"]
    found = isolate(nodes, outcomes(nodes, bad_links={("a", "c")}))
    assert found.blamed_links == [("a", "c")] and not found.blamed_nodes
    (verdict,) = [r for r in results(found, "network", {}) if r.status == "FAIL"]
    assert verdict.code == "CLUSTER_LINK_BLAMED" and verdict.subject == "a<->c"


def test_with_two_nodes_a_failure_is_undecided_never_pinned_on_one():
    """Bug it guards: with no third node, blaming either side would be a guess (INCONCLUSIVE)."""
    found = isolate(["a", "b"], {("a", "b"): True})
    assert found.undecided == [("a", "b")] and not found.blamed_nodes and not found.retests
    (verdict,) = results(found, "network", {})
    assert verdict.status == "INCONCLUSIVE" and verdict.code == "CLUSTER_ISOLATION_UNDECIDED"


def test_a_failed_pair_without_enough_good_partners_asks_for_retests_with_good_nodes():
    """Pairwise-once schedules (phase 4): a failed pair's members are retested against passed nodes."""
    found = isolate(["a", "b", "c", "d"], {("a", "b"): True, ("c", "d"): False})
    assert found.undecided == [("a", "b")]
    assert found.retests == [("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")]


def test_a_node_that_passed_once_is_never_blamed():
    """cluster-health-scanner's rule: a node that passed once is not failed later."""
    found = isolate(["a", "b", "c", "d"], {("a", "b"): False, ("a", "c"): True, ("a", "d"): True})
    assert "a" not in found.blamed_nodes


@pytest.mark.parametrize("count", [3, 4, 6])
def test_every_pair_failing_blames_no_node_and_says_undecided(count):
    nodes = [f"n{i}" for i in range(count)]
    found = isolate(nodes, {k: True for k in outcomes(nodes)})
    assert not found.blamed_nodes and len(found.undecided) == count * (count - 1) // 2


def test_no_failure_is_one_pass_naming_the_phase():
    nodes = ["a", "b", "c"]
    (verdict,) = results(isolate(nodes, outcomes(nodes)), "network", {})
    assert verdict.status == "PASS" and "network" in verdict.hint
