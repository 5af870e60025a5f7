"""Thresholds per GPU model, and the YAML reader the agent uses on nodes without PyYAML.

The reader is held equal to yaml.safe_load on the shipped data files: if someone adds YAML the
agent cannot read, this fails here instead of on a customer's node.
"""

from __future__ import annotations

import pytest
import yaml

from r9700ctl.agent.datafiles import DATA_DIR, DataFileError, gfx_name, gpu_models, parse_yaml_subset
from r9700ctl.agent.thresholds import DEFAULT, resolve

R9700 = "AMD Radeon AI PRO R9700"


@pytest.mark.parametrize("name", ["manifest.yaml", "thresholds.yaml"])
def test_the_agents_yaml_reader_reads_the_shipped_files_exactly_as_pyyaml(name):
    """Bug class pinned: a data file edited with YAML the node-side reader misreads."""
    text = (DATA_DIR / name).read_text(encoding="utf-8")
    assert parse_yaml_subset(text, name) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            'a: 1\nb: "x: y # not a comment"\nc: [1, 2.5, "q"]  # comment\n', id="scalars-and-comments"
        ),
        pytest.param(
            "m: {k: v, n: [1, 2]}\nyes_no: [yes, no, on, off, ~, null]\n", id="flow-and-yaml11-bools"
        ),
        pytest.param(
            "v: 6.4.1\nf: 32.0\ni: -3\ns: '1002:7551'\nu: https://a.b/c:d\n", id="strings-like-numbers"
        ),
        pytest.param("l:\n  - a\n  - 'b c'\nm:\n- 1\n- 2\n", id="block-lists"),
        pytest.param("s: >-\n  one\n  two # kept\n\n  three\nt: |\n  x\n  y\nu: 1\n", id="block-scalars"),
        pytest.param("p: [a, b,\n    c]\nq: 2\n", id="flow-over-lines"),
    ],
)
def test_the_subset_reader_agrees_with_pyyaml(text):
    assert parse_yaml_subset(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &x 1\nb: *x\n", "not supported"),
        ("a: 1\n   b: 2\n", "unexpected indentation"),
        ("a: 1\na: 2\n", "duplicate key"),
        ("a: [1, 2\n", r"expected .,. or .\]."),
        ("a:\n\t- 1\n", "tab in indentation"),
    ],
)
def test_yaml_the_reader_cannot_read_is_an_error_with_file_and_line(text, message):
    with pytest.raises(DataFileError, match=message) as info:
        parse_yaml_subset(text, "thresholds.yaml")
    assert str(info.value).startswith("thresholds.yaml:")


def test_kfd_gfx_target_versions_become_llvm_targets():
    assert gfx_name(120001) == "gfx1201"
    assert gfx_name(90402) == "gfx942"
    assert gfx_name(90010) == "gfx90a"
    assert gfx_name(110000) == "gfx1100"


def test_the_manifest_names_the_r9700_by_pci_id():
    assert gpu_models()["1002:7551"]["name"] == R9700


def test_the_r9700_gets_its_own_section_merged_over_the_defaults():
    resolved = resolve([R9700], ["1002"])
    assert resolved.section == R9700
    assert resolved.get("pcie.expect_speed_gts") == 32.0
    assert resolved.get("pcie.expect_width") == 16
    # Inherited from default: the section lists only what it changes.
    assert resolved.get("platform.bar_min_fraction_of_vram") == 1.0


def test_an_unknown_model_gets_the_strictest_default_section():
    """ROCm/cvs rule: an unknown model is never judged leniently."""
    resolved = resolve(["AMD Radeon RX 7600"], ["1002"])
    assert resolved.section == DEFAULT
    assert "strictest" in resolved.reason


def test_mixed_models_use_the_default_section():
    resolved = resolve([R9700, "NVIDIA H200"], ["1002", "10de"])
    assert resolved.section == DEFAULT
    assert "mixed" in resolved.reason


def test_an_unlisted_nvidia_card_gets_the_generic_nvidia_section():
    resolved = resolve(["NVIDIA L40S"], ["10de"])
    assert resolved.section == "nvidia"
    assert resolved.get("platform.bar_min_fraction_of_vram") is None
    assert "match_vendor" not in resolved.values


def test_an_overrides_file_wins_over_both_layers(tmp_path):
    overrides = tmp_path / "site.yaml"
    overrides.write_text(
        "models:\n  default:\n    inventory:\n      vram_min_fraction: 0.9\n"
        f'  "{R9700}":\n    pcie:\n      expect_speed_gts: 16.0\n'
    )
    resolved = resolve([R9700], ["1002"], overrides=overrides)
    assert resolved.get("inventory.vram_min_fraction") == 0.9
    assert resolved.get("pcie.expect_speed_gts") == 16.0
    assert str(overrides) in resolved.reason


def test_every_threshold_value_is_commented_with_its_reason():
    """thresholds.yaml promises a source or reason for every value (STYLE.md rule 11): each value
    line has a comment above it, possibly shared by the values listed right under that comment."""
    lines = (DATA_DIR / "thresholds.yaml").read_text(encoding="utf-8").splitlines()
    uncommented = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        key, sep, value = stripped.partition(":")
        if not sep or not value.strip() or stripped.startswith("#") or line.startswith(("schema", "models")):
            continue
        if key == "match_vendor":
            continue
        indent = len(line) - len(line.lstrip())
        above = index - 1
        while above >= 0:
            previous = lines[above]
            prev_indent = len(previous) - len(previous.lstrip())
            if previous.strip().startswith("#") and prev_indent == indent:
                break
            is_value = bool(previous.strip().partition(":")[2].strip())
            if not previous.strip() or prev_indent != indent or not is_value:
                uncommented.append(f"line {index + 1}: {stripped}")
                break
            above -= 1
    assert uncommented == []
