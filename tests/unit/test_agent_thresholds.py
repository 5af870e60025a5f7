"""Thresholds per GPU model, one source of truth, and the JSON data files the agent reads.

The controller converts r9700ctl/data/*.yaml to JSON when it packs the agent; the node reads
them with the standard library. thresholds.yaml is the only place a number behind a verdict
lives: keys are checked when the file loads, and the code has no fallback values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from r9700ctl import agentpack
from r9700ctl.agent import checks, datafiles
from r9700ctl.agent.datafiles import DataFileError, gfx_name, gpu_models
from r9700ctl.agent.thresholds import DEFAULT, flatten, resolve
from r9700ctl.errors import BadInput

R9700 = "AMD Radeon AI PRO R9700"
H200 = "NVIDIA H200"
PACKAGE = Path(__file__).resolve().parents[2] / "r9700ctl"


@pytest.mark.parametrize("name", ["manifest", "thresholds"])
def test_the_packed_json_is_exactly_the_yaml_source(name):
    """The node reads what the controller's YAML says, converted by PyYAML on the controller."""
    packed = json.loads((datafiles.DATA_DIR / f"{name}.json").read_text(encoding="utf-8"))
    with open(PACKAGE / "data" / f"{name}.yaml", encoding="utf-8") as fh:
        assert packed == json.loads(json.dumps(yaml.safe_load(fh), default=str))


def test_the_agent_has_no_yaml_reader_of_its_own():
    agent_code = "\n".join(p.read_text(encoding="utf-8") for p in (PACKAGE / "agent").rglob("*.py"))
    assert "import yaml" not in agent_code
    assert "parse_yaml_subset" not in agent_code


def test_an_agent_run_without_packed_data_files_says_how_to_pack(tmp_path, monkeypatch):
    monkeypatch.setattr(datafiles, "DATA_DIR", tmp_path)
    with pytest.raises(DataFileError, match="agentpack"):
        datafiles.load_data("thresholds")


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
    assert resolved.get("inventory.vram_healthy_mib") == 30576
    # Inherited from default: the section lists only what it changes.
    assert resolved.get("platform.bar_min_fraction_of_vram") == 1.0
    assert resolved.origin("pcie.expect_width") == f"thresholds.yaml [{R9700}]"
    assert resolved.origin("hostbw.peer_warn_fraction") == "thresholds.yaml [default]"


def test_null_in_the_models_section_is_reported_only_null_in_default_is_unknown():
    r9700 = resolve([R9700], ["1002"])
    assert r9700.reported_only("compute.peak_tflops_fp32")  # R9700 section: not judged by decision
    unknown = resolve(["AMD Radeon RX 7600"], ["1002"])
    assert unknown.get("compute.peak_tflops_bf16") is None
    assert not unknown.reported_only("compute.peak_tflops_bf16")  # nobody knows a limit


def test_an_unknown_model_gets_the_strictest_default_section():
    """ROCm/cvs rule: an unknown model is never judged leniently."""
    resolved = resolve(["AMD Radeon RX 7600"], ["1002"])
    assert resolved.section == DEFAULT
    assert "strictest" in resolved.reason


def test_mixed_models_use_the_default_section():
    resolved = resolve([R9700, H200], ["1002", "10de"])
    assert resolved.section == DEFAULT
    assert "mixed" in resolved.reason


def test_an_unlisted_nvidia_card_gets_the_generic_nvidia_section():
    resolved = resolve(["NVIDIA L40S"], ["10de"])
    assert resolved.section == "nvidia"
    assert resolved.get("platform.bar_min_fraction_of_vram") is None
    assert "match_vendor" not in resolved.values


def _override(tmp_path: Path, text: str) -> Path:
    source = tmp_path / "site.yaml"
    source.write_text(text)
    return agentpack.convert_thresholds(source, tmp_path / "site.json")


def test_an_overrides_file_wins_over_both_layers_and_is_named_as_the_source(tmp_path):
    converted = _override(
        tmp_path,
        "models:\n  default:\n    inventory:\n      vram_min_fraction_of_healthy: 0.9\n"
        f'  "{R9700}":\n    compute:\n      peak_tflops_bf16: 400\n',
    )
    resolved = resolve([R9700], ["1002"], overrides=converted)
    assert resolved.get("inventory.vram_min_fraction_of_healthy") == 0.9
    assert resolved.get("compute.peak_tflops_bf16") == 400
    assert resolved.origin("compute.peak_tflops_bf16") == f"{tmp_path / 'site.yaml'} [{R9700}]"
    assert "site.yaml" in resolved.reason


def test_a_typo_in_an_overrides_file_is_bad_input_naming_the_key(tmp_path):
    with pytest.raises(BadInput, match=r"hostbw\.warn_fraction_of_lnk"):
        _override(tmp_path, "models:\n  default:\n    hostbw:\n      warn_fraction_of_lnk: 0.5\n")
    with pytest.raises(BadInput, match="models:"):
        _override(tmp_path, "hostbw: 1\n")
    with pytest.raises(BadInput, match=r"site.yaml:\d+: not valid YAML"):
        _override(tmp_path, "models:\n  default: [\n")


def test_a_key_the_checks_read_but_the_file_lacks_stops_the_run_at_load():
    document = {"models": {"default": {"hostbw": {"peer_warn_fraction": 0.9}}}}
    with pytest.raises(DataFileError, match=r"hostbw\.peer_fail_fraction"):
        resolve([R9700], ["1002"], document=document, required={"hostbw.peer_fail_fraction"})
    with pytest.raises(KeyError):
        resolve([R9700], ["1002"], document=document).get("hostbw.nothing")


def test_the_code_reads_thresholds_only_from_the_file_with_no_fallbacks():
    """Bug class pinned: ctx.threshold("hostbw.warn_fraction_of_link", 0.714) kept a second copy of
    every rule in the code. Every key the agent reads is in models.default and declared by its check."""
    checks.load_all()
    known = set(flatten(agentpack.data_document("thresholds")["models"][DEFAULT]))
    declared = checks.threshold_keys(checks.REGISTRY.values())
    read = re.compile(r"threshold(?:_text)?\(\s*f?\"([a-z0-9_.{}]+)\"(\s*,)?")
    for path in (PACKAGE / "agent").rglob("*.py"):
        for key, second_argument in read.findall(path.read_text(encoding="utf-8")):
            assert not second_argument, f"{path.name}: a fallback value for {key}"
            if "{" in key:
                continue
            assert key in known, f"{path.name} reads {key}, which thresholds.yaml lacks"
            if path.parent.name == "checks":
                assert key in declared, f"{path.name} reads {key} without declaring it (register thresholds=)"


def test_the_verdict_rules_take_their_numbers_as_arguments_with_no_defaults():
    """Bug class pinned: judge_against_peers(min_peers=3) and judge_samples(min_samples=5) kept numbers
    of the verdict in the code; the checks now pass judging.min_peers / judging.min_samples."""
    import inspect

    from r9700ctl.agent import judge

    defaults = [
        f"{name}({parameter.name}={parameter.default!r})"
        for name, function in inspect.getmembers(judge, inspect.isfunction)
        if function.__module__ == judge.__name__
        for parameter in inspect.signature(function).parameters.values()
        if isinstance(parameter.default, (int, float)) and not isinstance(parameter.default, bool)
    ]
    assert defaults == []


def test_every_threshold_value_is_commented_with_its_reason():
    """thresholds.yaml promises a source or reason for every value (its header says so): each value
    line has a comment above it, possibly shared by the values listed right under that comment."""
    lines = (PACKAGE / "data" / "thresholds.yaml").read_text(encoding="utf-8").splitlines()
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
