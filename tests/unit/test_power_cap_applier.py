"""The boot unit's applier (r9700-power-cap: r9700ctl/agent/power_cap.py) on fake sysfs trees.

It runs as the unit runs it, a real child process, against a root built in tmp_path with
amdgpu's hwmon attributes (power1_cap, _min, _max, _default in microwatts). What breaks if
these fail: a second provision would report "changed" forever, or a cap outside the card's
range would be written and clamped silently by the driver.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_stage import installed_as

from r9700ctl.agent import power_budget as power

APPLIER = installed_as("r9700-power-cap")  # the node program under that name, as r9700_power installs it
GPU = "0000:03:00.0"
UW = 1_000_000


def card(root: Path, address: str = GPU, cap: int = 300, low: int = 210, high: int = 300) -> Path:
    """One amdgpu card's hwmon directory, as /sys/bus/pci/devices/<address>/hwmon/hwmon3."""
    hwmon = root / "sys/bus/pci/devices" / address / "hwmon" / "hwmon3"
    hwmon.mkdir(parents=True)
    for name, watts in (("power1_cap", cap), ("power1_cap_min", low), ("power1_cap_max", high)):
        (hwmon / name).write_text(f"{watts * UW}\n")
    (hwmon / "power1_cap_default").write_text(f"{high * UW}\n")
    return hwmon


def policy(root: Path, caps: dict[str, float]) -> Path:
    path = root / power.POLICY_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(power.Policy(caps).to_json())
    return path


def run(root: Path, action: str, *extra: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, str(APPLIER), action, "--root", str(root), "--policy", str(root / power.POLICY_PATH),
         "--json", *extra],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_apply_writes_a_differing_cap_and_a_second_apply_changes_nothing(tmp_path):
    hwmon = card(tmp_path)
    policy(tmp_path, {GPU: 250})

    rc, first, _ = run(tmp_path, "apply")
    assert (rc, first["changed"]) == (0, [GPU])
    assert (hwmon / "power1_cap").read_text().strip() == str(250 * UW)

    rc, second, _ = run(tmp_path, "apply")
    assert (rc, second["changed"], second["ok"]) == (0, [], [GPU])


def test_a_cap_outside_the_cards_range_is_refused_and_not_written(tmp_path):
    hwmon = card(tmp_path, low=210, high=300)
    policy(tmp_path, {GPU: 150})

    rc, summary, stderr = run(tmp_path, "apply")

    assert rc == 1
    assert "150 W is outside the 210-300 W this card accepts" in summary["failed"][GPU]
    assert "r9700-power-cap: 0000:03:00.0: 150 W" in stderr
    assert (hwmon / "power1_cap").read_text().strip() == str(300 * UW)


def test_a_card_the_driver_never_registered_fails_after_the_wait(tmp_path):
    policy(tmp_path, {GPU: 250})

    rc, summary, _ = run(tmp_path, "apply", "--wait", "0")

    assert rc == 1
    assert "no amdgpu hwmon power1_cap" in summary["failed"][GPU]


def test_check_reports_a_cap_that_is_not_in_force_without_writing(tmp_path):
    hwmon = card(tmp_path, cap=300)
    policy(tmp_path, {GPU: 250})

    rc, summary, _ = run(tmp_path, "check")

    assert rc == 1 and "cap is 300 W, policy says 250 W" in summary["failed"][GPU]
    assert (hwmon / "power1_cap").read_text().strip() == str(300 * UW)


def test_restore_puts_the_default_back_once(tmp_path):
    hwmon = card(tmp_path, cap=250, high=300)
    policy(tmp_path, {GPU: 250})

    assert run(tmp_path, "restore")[1]["restored"] == [GPU]
    assert (hwmon / "power1_cap").read_text().strip() == str(300 * UW)
    assert run(tmp_path, "restore")[1]["restored"] == []


def test_every_card_is_handled_even_when_one_fails(tmp_path):
    card(tmp_path, GPU)
    other = card(tmp_path, "0000:43:00.0")
    policy(tmp_path, {GPU: 400, "0000:43:00.0": 250})

    rc, summary, _ = run(tmp_path, "apply")

    assert rc == 1 and list(summary["failed"]) == [GPU] and summary["changed"] == ["0000:43:00.0"]
    assert (other / "power1_cap").read_text().strip() == str(250 * UW)


@pytest.mark.parametrize("text", ["{", '{"caps_w": {"0000:03:00.0": "lots"}}', "[]"])
def test_an_unreadable_policy_is_exit_64(tmp_path, text):
    path = tmp_path / power.POLICY_PATH
    path.parent.mkdir(parents=True)
    path.write_text(text)

    rc, _, stderr = run(tmp_path, "apply")

    assert rc == 64 and "cannot read" in stderr
