"""Power caps (r9700_power): the policy file, the boot unit and its enablement, the caps in force."""

from __future__ import annotations

import json

import pytest

POLICY = "/etc/r9700ctl/power.json"
UNIT = "/etc/systemd/system/r9700-power-cap.service"
WANTS = "/etc/systemd/system/multi-user.target.wants/r9700-power-cap.service"
APPLIER = "/usr/local/sbin/r9700-power-cap"


def _caps_wanted(node) -> bool:
    return node.var("r9700_power_cap_w") is not None or bool(node.var("r9700_power_cap_w_by_gpu"))


def _policy(host) -> dict:
    return json.loads(host.file(POLICY).content_string)


def test_the_policy_file_exists_exactly_when_caps_or_psus_are_set(host, node):
    wanted = _caps_wanted(node) or bool(node.var("r9700_psus"))
    assert host.file(POLICY).exists == wanted
    if wanted:
        assert _policy(host)["schema"] == "r9700ctl.power/1"


def test_the_boot_unit_is_installed_and_enabled_when_caps_are_set(host, node):
    """The wants link is what `systemctl enable` makes; image builds and the lab get it too."""
    if not _caps_wanted(node):
        assert not host.file(UNIT).exists and not host.file(WANTS).exists
        return
    unit = host.file(UNIT)
    assert unit.exists and "Type=oneshot" in unit.content_string
    assert host.file(WANTS).is_symlink and host.file(WANTS).linked_to == UNIT
    assert host.file(APPLIER).exists and host.file(APPLIER).mode & 0o111


@pytest.mark.runtime
def test_every_cap_of_the_policy_is_in_force(host, node):
    if not node.runtime:
        pytest.skip("runtime steps are off on this node (no systemd: image build or lab)")
    if not _caps_wanted(node):
        pytest.skip("no power cap is configured for this host")
    with host.sudo():
        checked = host.run(f"{APPLIER} check")
    assert checked.rc == 0, checked.stdout + checked.stderr
