"""validate --cluster's schedule: every pair once, in rounds where no node meets two partners."""

from itertools import combinations

import pytest

from r9700ctl.cluster.plan import Measure, disjoint_rounds, pair_key, pair_plans, rounds


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_rounds_cover_every_pair_exactly_once_and_no_node_twice_in_a_round(count):
    """The issue's promise: disjoint pairs in round-robin rounds, n-1 rounds covering every pair."""
    nodes = [f"node{i}" for i in range(1, count + 1)]
    schedule = rounds(nodes)
    seen = [pair_key(a, b) for pairs in schedule for a, b in pairs]
    assert sorted(seen) == sorted(pair_key(a, b) for a, b in combinations(nodes, 2))
    for pairs in schedule:
        members = [n for pair in pairs for n in pair]
        assert len(members) == len(set(members))
    assert len(schedule) == (count - 1 if count % 2 == 0 else count)


def test_retests_are_grouped_into_rounds_of_disjoint_pairs():
    schedule = disjoint_rounds([("a", "b"), ("a", "c"), ("d", "e"), ("b", "c")])
    assert schedule == [[("a", "b"), ("d", "e")], [("a", "c")], [("b", "c")]]


def test_each_node_gets_its_role_partner_and_the_smaller_mtu_of_the_pair():
    plans = pair_plans(
        [[("n1", "n2")]], {"n1": "10.0.0.1", "n2": "10.0.0.2"}, {"n1": 9000, "n2": 1500}, Measure()
    )
    assert plans["n1"]["rounds"] == [{"role": "server", "partner": "n2", "address": "10.0.0.2"}]
    assert plans["n2"]["rounds"] == [{"role": "client", "partner": "n1", "address": "10.0.0.1", "mtu": 1500}]
    assert plans["n2"]["port"] == 29400 and plans["n2"]["address"] == "10.0.0.2"
