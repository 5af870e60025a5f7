"""Bundles as customers really send them: truncated, binary, empty, a directory where a file
should be. The diagnosis never raises; a file it cannot read is the finding
"could not read FILE: reason"; a bad --bundle path is bad input (exit 64)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r9700ctl.bundle import BUNDLE_FILES, diagnose_bundle, diagnose_path
from r9700ctl.bundle import severity as severity_of
from r9700ctl.errors import BadInput

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"
RECORDINGS = sorted(p for p in RECORDED.glob("*/*") if p.is_file())


def ids(report):
    return [f.id for f in report.findings]


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_recording_cut_in_half_never_stops_the_diagnosis(tmp_path, recording):
    """Pins 'truncated files never raise': every rule runs on half of every real file."""
    data = recording.read_bytes()
    (tmp_path / recording.name).write_bytes(data[: len(data) // 2])

    report = diagnose_bundle(tmp_path)

    assert "bundle.rule_error" not in ids(report)
    report.to_dict()  # serialisable too


@pytest.mark.parametrize("name", BUNDLE_FILES)
def test_binary_garbage_in_any_bundle_file_is_a_could_not_read_finding(tmp_path, name):
    (tmp_path / name).write_bytes(b"\x7fELF\x00\x01\x02\xff\xfe" * 50)

    report = diagnose_bundle(tmp_path)

    unreadable = [f for f in report.findings if f.id == "bundle.unreadable"]
    assert [f.detail for f in unreadable] == [
        f"could not read {name}: binary data, not text output of a tool"
    ]
    assert severity_of(unreadable[0]) == "WARN"
    assert "bundle.rule_error" not in ids(report)


@pytest.mark.parametrize(
    "name",
    ["rocminfo.txt", "amd-smi-static.json", "amd-smi.txt", "rocm-smi.json", "lspci.txt", "nvidia-smi.xml"],
)
def test_text_that_is_not_the_tools_output_is_named_unreadable(tmp_path, name):
    (tmp_path / name).write_text("Segmentation fault (core dumped)\n{ this is not it\n")

    report = diagnose_bundle(tmp_path)

    details = [f.detail for f in report.findings if f.id == "bundle.unreadable"]
    assert len(details) == 1 and details[0].startswith(f"could not read {name}: ")


@pytest.mark.parametrize("name", BUNDLE_FILES)
def test_an_empty_file_never_raises(tmp_path, name):
    (tmp_path / name).write_text("")

    report = diagnose_bundle(tmp_path)

    assert "bundle.rule_error" not in ids(report)


def test_a_directory_named_like_a_bundle_file_counts_as_missing(tmp_path):
    shutil.copytree(RECORDED / "r9700-3x", tmp_path / "b")
    (tmp_path / "b" / "dmesg.txt").mkdir()

    report = diagnose_bundle(tmp_path / "b")

    assert "amdgpu errors in the kernel log" in {n.evidence["topic"] for n in report.not_judged}
    assert report.findings == []


def test_a_missing_bundle_path_is_bad_input_naming_the_path(tmp_path):
    with pytest.raises(BadInput) as caught:
        diagnose_path(tmp_path / "nope")

    assert caught.value.exit_code == 64
    assert caught.value.one_line() == (
        f"{tmp_path / 'nope'}: bundle directory not found (give the directory `r9700ctl collect --out` "
        "wrote, or one node's directory in it)"
    )


def test_a_file_given_as_bundle_is_bad_input(tmp_path):
    (tmp_path / "rocminfo.txt").write_text("x")

    with pytest.raises(BadInput, match="--bundle needs a directory, this is a file"):
        diagnose_path(tmp_path / "rocminfo.txt")


def test_a_directory_without_any_bundle_file_is_bad_input(tmp_path):
    (tmp_path / "notes.md").write_text("hello")
    (tmp_path / "sub").mkdir()

    with pytest.raises(BadInput, match="no bundle files here or in its subdirectories"):
        diagnose_path(tmp_path)


def test_a_collect_directory_is_diagnosed_node_by_node(tmp_path):
    """collect --out DIR holds DIR/<host>/; doctor --bundle DIR diagnoses each, sorted by name."""
    shutil.copytree(RECORDED / "r9700-igpu", tmp_path / "node2")
    shutil.copytree(RECORDED / "r9700-3x", tmp_path / "node1")
    (tmp_path / "collect.json").write_text('{"schema": "r9700ctl.collect/1"}')  # collect --json beside them

    fleet = diagnose_path(tmp_path)

    assert [b.node for b in fleet.bundles] == ["node1", "node2"]
    assert [b.status for b in fleet.bundles] == ["INCONCLUSIVE", "WARN"]  # node1: rocminfo.txt alone
    assert fleet.exit_code == 4  # INCONCLUSIVE outranks WARN, as in validate
    document = fleet.to_dict()
    assert document["schema"] == "r9700ctl.doctor/1" and document["mode"] == "bundle"
