"""Power caps and PSU budgets (r9700ctl/agent/power_budget.py): the arithmetic and its messages.

The same model refuses an overcommitted PSU in preflight (before anything changes on the
node), validates caps against the card's own range in the r9700_power role, and judges the
measured draw in the agent, so its numbers and sentences are pinned here once.
"""

from __future__ import annotations

import pytest

from r9700ctl.agent import power_budget as power
from r9700ctl.agent.result import FAIL, PASS, WARN

GPU = ["0000:03:00.0", "0000:23:00.0", "0000:43:00.0", "0000:63:00.0"]


@pytest.mark.parametrize(
    ("watts", "host_w", "cap", "status", "words"),
    [
        # 4 x 250 + 350 = 1350 <= 1600 x 0.9 = 1440: 90 W of headroom below the margin.
        (1600, 350, 250, PASS, "1350 W"),
        # 4 x 300 + 300 = 1500: above 1440 (inside the 10% margin), below the 1600 W rating.
        (1600, 300, 300, WARN, "inside its 10% safety margin by 60 W (100 W left)"),
        # 4 x 300 + 550 = 1750 > 1600: overcommitted by 150 W.
        (1600, 550, 300, FAIL, "over its rating by 150 W"),
    ],
    ids=["fits", "inside-margin", "over-rating"],
)
def test_a_psu_is_judged_on_its_gpus_at_their_caps_plus_its_host_share(watts, host_w, cap, status, words):
    psu = power.Psu("psu1", watts, tuple(GPU), host_w)

    line = power.budget_line(psu, dict.fromkeys(GPU, cap), margin=0.10)

    assert line.status == status
    assert words in line.detail
    assert line.demand_w == len(GPU) * cap + host_w


def test_the_refusal_names_the_psu_its_load_and_the_cap_that_would_fit():
    """The fix must be actionable: (1600 x 0.9 - 550) / 4 = 222.5 -> at most 222 W per GPU."""
    line = power.budget_line(power.Psu("psu1", 1600, tuple(GPU), 550), dict.fromkeys(GPU, 300), 0.10)

    assert line.detail == (
        "PSU psu1 (1600 W) would carry 1750 W: 4 GPU(s) at their caps (1200 W) + host 550 W; "
        "over its rating by 150 W"
    )
    assert line.fix.startswith("cap its 4 GPU(s) at <= 222 W each (r9700_power_cap_w)")


def test_a_gpu_of_unknown_draw_is_a_warning_not_a_pass():
    """Pins "never PASS what was not judged": an unknown card's draw makes the budget unknown."""
    line = power.budget_line(power.Psu("psu1", 1600, (GPU[0], GPU[1])), {GPU[0]: 300, GPU[1]: None}, 0.1)

    assert line.status == WARN
    assert line.demand_w is None
    assert GPU[1] in line.detail and "cannot be checked" in line.detail


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"psu1": {"watts": 0, "gpus": []}}, "r9700_psus.psu1.watts must be the PSU's rating"),
        ({"psu1": {"watts": 1600, "gpus": "03:00.0"}}, "r9700_psus.psu1.gpus must be a list"),
        ({"psu1": {"watts": 1600, "gpus": ["3:0.0"]}}, "'3:0.0' is not a PCI address"),
        ({"psu1": {"watts": 1600, "volts": 12}}, "unknown key(s) volts"),
        (
            {"a": {"watts": 1600, "gpus": ["03:00.0"]}, "b": {"watts": 1600, "gpus": ["0000:03:00.0"]}},
            "0000:03:00.0 is already fed by r9700_psus.a",
        ),
        ("1600", "r9700_psus must map each PSU's name"),
    ],
    ids=["zero-watts", "gpus-not-a-list", "bad-address", "unknown-key", "fed-twice", "not-a-map"],
)
def test_a_malformed_psu_map_is_named_precisely(value, problem):
    _, problems = power.parse_psus(value)

    assert any(problem in p for p in problems), problems


def test_short_addresses_get_the_default_pci_domain():
    psus, problems = power.parse_psus({"psu1": {"watts": 1200, "gpus": ["03:00.0"], "host_w": 200}})

    assert problems == []
    assert psus == [power.Psu("psu1", 1200.0, ("0000:03:00.0",), 200.0)]


def test_per_gpu_caps_override_the_node_cap_and_must_name_a_gpu_of_the_node():
    node_cap, by_gpu, problems = power.parse_caps(250, {"03:00.0": 225, "0000:99:00.0": 200})
    plan, missing = power.plan_caps(node_cap, by_gpu, GPU[:2])

    assert problems == []
    assert plan == {"0000:03:00.0": 225.0, "0000:23:00.0": 250.0}
    assert missing == [
        "r9700_power_cap_w_by_gpu names 0000:99:00.0, which is not a GPU of this node "
        "(GPUs: 0000:03:00.0, 0000:23:00.0)"
    ]


@pytest.mark.parametrize("cap", [-5, 0, "lots", True, 250.5])
def test_a_cap_that_is_not_positive_watts_is_refused(cap):
    _, _, problems = power.parse_caps(cap, None)

    assert problems and "r9700_power_cap_w must be whole watts" in problems[0]


def test_a_cap_outside_the_cards_own_range_is_refused_with_the_range():
    """Range from `amd-smi static --limit` of the recorded RX 6600: 94-100 W."""
    ranges = {"0000:0b:00.0": power.CapRange("0000:0b:00.0", 94.0, 100.0, 100.0)}

    assert power.check_caps({"0000:0b:00.0": 95.0}, ranges, "amd-smi static") == []
    (problem,) = power.check_caps({"0000:0b:00.0": 250.0}, ranges, "amd-smi static")
    assert problem == (
        "0000:0b:00.0: 250 W is outside the 94-100 W this card accepts (amd-smi static); "
        "choose a cap in that range"
    )


def test_a_cap_for_a_card_without_a_readable_range_is_refused():
    (problem,) = power.check_caps({"0000:03:00.0": 250.0}, {}, "amd-smi static")

    assert "reports no power-cap range" in problem


def test_the_policy_file_round_trips_and_a_damaged_one_is_reported(tmp_path):
    policy = power.Policy({"0000:03:00.0": 250.0}, (power.Psu("psu1", 1600, ("0000:03:00.0",), 350),), 0.15)
    path = tmp_path / power.POLICY_PATH
    path.parent.mkdir(parents=True)
    path.write_text(policy.to_json())

    assert power.load_policy(tmp_path) == (policy, "")
    assert power.load_policy(tmp_path / "nowhere") == (None, "")
    path.write_text("{")
    loaded, reason = power.load_policy(tmp_path)
    assert loaded is None and "power.json" in reason
