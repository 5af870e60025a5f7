"""PCIe AER counters on each GPU's path (r9700ctl/agent/aer_counters.py, parsers/aer.py), on fake sysfs trees.

The trees are what the kernel shows: R9700s behind their on-card switch, each on a root port,
with aer_dev_* files holding "<name> <count>" lines and a TOTAL_ERR_* line
(Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats). Counters are changed between two
snapshots as a load step would change them. What breaks if these fail: errors the root port
counted for a card (the ABI says they may land there, not on the card) go unseen, or a healthy
run is called faulty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_fake_node import r9700_node

from r9700ctl.agent import aer_counters as aer
from r9700ctl.agent.parsers import aer as aer_parser
from r9700ctl.agent.result import FAIL, PASS, WARN

GPU0 = "0000:12:00.0"  # first R9700 of r9700_node: root port 0000:00:01.1, card switch 10 -> 11
ROOT0 = "0000:00:01.1"


@pytest.fixture
def node(tmp_path: Path):
    node = r9700_node(tmp_path, 2)
    for bdf in (ROOT0, "0000:10:00.0", "0000:11:00.0", GPU0):
        node.set_aer(bdf)
    node.add_slot("3", "0000:10:00.0")
    return node


def test_the_path_runs_from_the_root_port_through_the_cards_switch_to_the_gpu(node):
    roles = [(d["address"], d["role"]) for d in aer.describe_path(node.root, GPU0)]

    assert roles == [
        (ROOT0, "root port (the card's slot)"),
        ("0000:10:00.0", "card's own switch port"),
        ("0000:11:00.0", "card's own switch port"),
        (GPU0, "GPU"),
    ]


def test_no_new_error_during_a_step_passes(node):
    before = aer.snapshot(node.root, [GPU0])
    after = aer.snapshot(node.root, [GPU0])

    verdict = aer.judge(GPU0, aer.increases(before, after), seconds=20)

    assert verdict.status == PASS


def test_corrected_errors_at_the_slot_port_warn_naming_the_port_and_the_slot(node):
    """The card's own counters stay 0; the root port counts 4 receiver errors during the step."""
    node.set_aer(ROOT0, correctable={"RxErr": 1})
    before = aer.snapshot(node.root, [GPU0])
    node.set_aer(ROOT0, correctable={"RxErr": 5})

    found = aer.increases(before, aer.snapshot(node.root, [GPU0]))
    verdict = aer.judge(
        GPU0,
        found,
        60,
        aer.roles(node.root, GPU0),
        aer.slot_name(node.root, GPU0),
        during=" during compute.gemm",
    )

    assert verdict.status == WARN
    assert verdict.summary == (
        f"{GPU0} (slot 3): 4 correctable at root port (the card's slot) {ROOT0} (RxErr 4) during compute.gemm"
    )
    assert "reseat the card" in verdict.hint and "riser" in verdict.hint


def test_many_corrected_errors_per_minute_fail(node):
    """33 in 60 s is above DCGM's 32/min (480 per 15 minutes)."""
    before = aer.snapshot(node.root, [GPU0])
    node.set_aer(GPU0, correctable={"BadTLP": 20, "BadDLLP": 13})

    found = aer.increases(before, aer.snapshot(node.root, [GPU0]))
    verdict = aer.judge(GPU0, found, 60, aer.roles(node.root, GPU0), fail_per_min=32)

    assert verdict.status == FAIL
    assert "33 correctable at GPU" in verdict.summary and "= 33/min" in verdict.summary


def test_one_uncorrectable_error_fails(node):
    before = aer.snapshot(node.root, [GPU0])
    node.set_aer("0000:10:00.0", nonfatal={"CmpltTO": 1})

    found = aer.increases(before, aer.snapshot(node.root, [GPU0]))
    verdict = aer.judge(GPU0, found, 60, aer.roles(node.root, GPU0), fail_per_min=32)

    assert verdict.status == FAIL
    assert "1 nonfatal at card's own switch port 0000:10:00.0 (CmpltTO 1)" in verdict.summary
    assert verdict.hint.startswith("uncorrectable PCIe errors")


def test_errors_of_another_gpu_are_not_this_ones(node):
    other = "0000:22:00.0"
    node.set_aer(other)
    before = aer.snapshot(node.root, [GPU0, other])
    node.set_aer(other, fatal={"SDES": 1})
    found = aer.increases(before, aer.snapshot(node.root, [GPU0, other]))

    assert aer.judge(GPU0, found, 60).status == PASS
    assert aer.judge(other, found, 60).status == FAIL


def test_a_counter_that_went_down_counts_from_zero(node):
    """A driver reload or a hot reset clears the counters: what is there now is new."""
    node.set_aer(GPU0, correctable={"RxErr": 50})
    before = aer.snapshot(node.root, [GPU0])
    node.set_aer(GPU0, correctable={"RxErr": 2})

    (found,) = aer.increases(before, aer.snapshot(node.root, [GPU0]))

    assert (found.kind, found.delta, found.errors) == ("correctable", 2, {"RxErr": 2})


def test_a_gpu_without_aer_files_on_its_path_is_reported_unreadable(tmp_path):
    node = r9700_node(tmp_path, 1)

    shot = aer.snapshot(node.root, [GPU0])

    assert shot.unreadable == [GPU0]


# -- the bundle's aer.txt ----------------------------------------------------------------------------


def test_the_bundles_grep_output_gives_each_devices_counters_and_its_path():
    """`grep -H .` of the aer_dev_* files, as collect records them; names with spaces as in the ABI."""
    text = "\n".join(
        [
            "/sys/devices/pci0000:00/0000:00:01.1/aer_dev_correctable:Receiver Error 2",
            "/sys/devices/pci0000:00/0000:00:01.1/aer_dev_correctable:Bad TLP 0",
            "/sys/devices/pci0000:00/0000:00:01.1/aer_dev_correctable:TOTAL_ERR_COR 2",
            "/sys/devices/pci0000:00/0000:00:01.1/0000:10:00.0/0000:11:00.0/0000:12:00.0/aer_dev_fatal:"
            "TOTAL_ERR_FATAL 0",
            "grep: /sys/devices/platform/x/aer_dev_fatal: Permission denied",
        ]
    )

    report = aer_parser.parse(text, "aer.txt")

    root, gpu = report.devices["0000:00:01.1"], report.devices[GPU0]
    assert (
        root.path == []
        and root.total("correctable") == 2
        and root.errors("correctable") == {"Receiver Error": 2}
    )
    assert gpu.path == ["0000:00:01.1", "0000:10:00.0", "0000:11:00.0"] and gpu.total("fatal") == 0
    assert gpu.total("correctable") is None  # not read: unknown, not zero
    assert report.skipped_lines == ["grep: /sys/devices/platform/x/aer_dev_fatal: Permission denied"]


def test_an_aer_txt_without_counters_is_unreadable_not_clean():
    assert aer_parser.parse("nothing here\n", "aer.txt").error.startswith("could not read aer.txt")


def test_an_empty_aer_txt_is_an_answer_no_counters_not_a_damaged_file():
    """A machine whose devices expose no AER statistics records an empty aer.txt."""
    report = aer_parser.parse("", "aer.txt")

    assert (report.error, report.devices) == (None, {})
