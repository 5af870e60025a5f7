"""dkms status parser on real outputs in both formats dkms has printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from r9700ctl.agent.parsers import dkms

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures" / "dkms"


def test_the_new_slash_format_of_an_r9700_node_gives_amdgpu_for_both_kernels():
    """Pins ROCm/ROCm#5706: amdgpu 6.16.6 installed for 6.8.0-88 and -90, original modules kept."""
    status = dkms.parse_file(RECORDED / "r9700-2x" / "dkms-status.txt")

    assert status.error is None
    assert [(e.module, e.version, e.kernel, e.arch, e.state, e.format) for e in status.entries] == [
        ("amdgpu", "6.16.6-2255209.24.04", "6.8.0-88-generic", "x86_64", "installed", "new"),
        ("amdgpu", "6.16.6-2255209.24.04", "6.8.0-90-generic", "x86_64", "installed", "new"),
    ]
    (running,) = status.for_kernel("6.8.0-90-generic")
    assert running.original_module_exists and running.healthy
    assert running.line == 3  # after the source line and the first entry


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "old-format-installed.txt", ("amdgpu", "2.2-31", "4.15.0-46-generic", "installed"), id="installed"
        ),
        pytest.param("old-format-built.txt", ("amdgpu", "2.0-89", "4.15.0-43-generic", "built"), id="built"),
        pytest.param(
            "old-format-original-module.txt",
            ("amdgpu", "1.9-211.el7", "3.10.0-862.11.6.el7.x86_64", "installed"),
            id="original-module",
        ),
    ],
)
def test_the_old_comma_format_is_read_the_same_way(name, expected):
    """Pins dkms 2.x output from ROCm issues #739, #691 and #557."""
    (entry,) = dkms.parse_file(FIXTURES / name).entries

    assert (entry.module, entry.version, entry.kernel, entry.state) == expected
    assert entry.format == "old"


def test_built_but_not_installed_is_not_healthy():
    (entry,) = dkms.parse_file(FIXTURES / "old-format-built.txt").entries

    assert entry.healthy is False


def test_original_module_remark_in_old_spelling_is_recognised():
    (entry,) = dkms.parse_file(FIXTURES / "old-format-original-module.txt").entries

    assert entry.notes == ["original_module exists"]
    assert entry.original_module_exists is True


def test_a_diff_between_built_and_installed_module_is_a_warning_not_health():
    """Pins the dkms remark "(WARNING! Diff between built and installed module!)"."""
    (entry,) = dkms.parse_file(FIXTURES / "diff-built-installed.txt").entries

    assert (entry.module, entry.state) == ("i915-sriov-dkms", "installed")
    assert entry.diff_built_installed is True
    assert entry.healthy is False


def test_two_kernels_give_two_entries_and_for_kernel_picks_one():
    status = dkms.parse_file(FIXTURES / "new-format-two-kernels.txt")

    assert [e.kernel for e in status.entries] == ["6.17.0-5-generic", "6.17.0-8-generic"]
    assert status.for_kernel("6.17.0-8-generic")[0].version == "6.16.6-2255209.24.04"
    assert status.for_kernel("6.8.0-45-generic") == []


@pytest.mark.parametrize(
    ("line", "state", "kernel"),
    [
        pytest.param("amdgpu/6.8.5-2009582.22.04: added", "added", None, id="added-no-kernel"),
        pytest.param(
            "amdgpu/6.3.6, 6.2.0-26-generic, x86_64: broken", "broken", "6.2.0-26-generic", id="broken"
        ),
    ],
)
def test_added_and_broken_states_are_entries(line, state, kernel):
    (entry,) = dkms.parse(line).entries

    assert (entry.state, entry.kernel, entry.healthy) == (state, kernel, False)


def test_no_module_at_all_is_an_empty_status_not_an_error():
    status = dkms.parse("", "dkms-status.txt")

    assert (status.entries, status.error) == ([], None)


def test_dkms_error_lines_are_kept_for_evidence():
    status = dkms.parse("Error! Could not locate dkms.conf file.\n", "dkms-status.txt")

    assert status.error is None
    assert status.other_lines == [(1, "Error! Could not locate dkms.conf file.")]
