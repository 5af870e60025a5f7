"""r9700_power and the PSU budget against a real lab node: real SSH, real Ansible, the lab's mirror.

The node's stand-in amd-smi replays `amd-smi static --json` recorded on a real card (scenario
rx6600-1x: an RX 6600 at 0000:0b:00.0 whose power cap may range 94-100 W), so the range check
runs on a real tool output. Lab nodes run no systemd: the unit is written and enabled (the
wants link `systemctl enable` makes) and no cap is set now, exactly as in an image build.
The first `provision --tags r9700_repos,r9700_rocm,r9700_power` installs amd-smi with the
product's own roles; later runs need only r9700_power. Preflight (tagged always) runs first
every time.
"""

from __future__ import annotations

import json

import pytest
from test_roles import hosts, provision

pytestmark = pytest.mark.timeout(900)
TAGS = ("--tags", "r9700_repos,r9700_rocm,r9700_power")
# amd-smi is installed by then; preflight runs always (its apt refresh is not needed again).
AGAIN = ("--tags", "r9700_power", "-e", "r9700_preflight_apt_update=false")
UNIT = "/etc/systemd/system/r9700-power-cap.service"
WANTS = "/etc/systemd/system/multi-user.target.wants/r9700-power-cap.service"


def cap_vars(cap: int, psus: dict | None = None) -> str:
    return json.dumps({"r9700_power_cap_w": cap, "r9700_psus": psus or {}})


@pytest.fixture(scope="module")
def node(make_lab_module, tmp_path_factory):
    """One node replaying the RX 6600 recording, provisioned once with a 95 W cap and a PSU map."""
    lab = make_lab_module(nodes=1, gpus=1, recorded="rx6600-1x")
    psus = {"psu1": {"watts": 850, "gpus": ["0000:03:00.0"], "host_w": 250}}
    out, report = provision(lab.inventory, tmp_path_factory.mktemp("power"), *TAGS, "-e", cap_vars(95, psus))
    return lab, out, report


def test_a_cap_in_the_cards_range_gets_the_policy_applier_and_an_enabled_unit(node):
    lab, out, report = node

    assert out.returncode == 0, out.stdout + out.stderr
    assert hosts(report)["node1"]["status"] == "CHANGED"
    policy = json.loads(lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout)
    assert policy["caps_w"] == {"0000:0b:00.0": 95.0}
    assert policy["psus"] == [{"name": "psu1", "watts": 850.0, "gpus": ["0000:03:00.0"], "host_w": 250.0}]
    assert lab.ssh("node1", f"readlink {WANTS}").stdout.strip() == UNIT
    unit = lab.ssh("node1", f"cat {UNIT}").stdout
    assert "ExecStart=/usr/bin/python3 /usr/local/sbin/r9700-power-cap apply" in unit
    # The applier runs on the node's own Python: it answers, and finds no amdgpu card in the lab.
    checked = lab.ssh("node1", "sudo /usr/local/sbin/r9700-power-cap check --json")
    assert checked.returncode == 1 and "no amdgpu hwmon power1_cap" in checked.stdout


def test_a_second_run_changes_nothing(node, tmp_path):
    lab, _, _ = node
    psus = {"psu1": {"watts": 850, "gpus": ["0000:03:00.0"], "host_w": 250}}

    out, report = provision(lab.inventory, tmp_path, *AGAIN, "-e", cap_vars(95, psus))

    assert out.returncode == 0, out.stdout + out.stderr
    result = hosts(report)["node1"]
    assert (result["status"], result["changed"], result["failed"]) == ("OK", 0, 0), result


def test_a_cap_outside_the_cards_range_is_refused_naming_the_card_and_its_range(node, tmp_path):
    lab, _, _ = node
    before = lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout

    out, report = provision(lab.inventory, tmp_path, *AGAIN, "-e", cap_vars(250))

    assert out.returncode == 2, out.stdout + out.stderr
    message = hosts(report)["node1"]["failed_tasks"][0]["message"]
    assert "node1: power caps refused, no cap changed: 0000:0b:00.0: 250 W is outside the 94-100 W" in message
    assert lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout == before


def test_an_overcommitted_psu_is_refused_by_preflight_before_anything_changes(node, tmp_path):
    lab, _, _ = node
    before = lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout
    psus = {"psu1": {"watts": 300, "gpus": ["0000:03:00.0"], "host_w": 250}}

    out, report = provision(lab.inventory, tmp_path, *AGAIN, "-e", cap_vars(95, psus))

    assert out.returncode == 2, out.stdout + out.stderr
    message = hosts(report)["node1"]["failed_tasks"][0]["message"]
    assert message.startswith("node1: preflight refused, nothing changed: PSU psu1 (300 W) would carry 345 W")
    assert "over its rating by 45 W" in message
    assert lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout == before


def test_taking_the_caps_out_removes_the_unit_and_keeps_the_psu_map(node, tmp_path):
    lab, _, _ = node
    psus = {"psu1": {"watts": 850, "gpus": ["0000:03:00.0"], "host_w": 250}}
    extra = json.dumps({"r9700_psus": psus})

    out, _ = provision(lab.inventory, tmp_path, *AGAIN, "-e", extra)

    assert out.returncode == 0, out.stdout + out.stderr
    assert lab.ssh("node1", f"test ! -e {UNIT} && test ! -L {WANTS}").returncode == 0
    assert json.loads(lab.ssh("node1", "cat /etc/r9700ctl/power.json").stdout)["caps_w"] == {}
