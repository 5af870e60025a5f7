"""THE environment list (r9700ctl/envlist.py): one list per node, every value checked by one rule.

Issue 9: `r9700_env_extra: {HSA_OVERRIDE_GFX_VERSION: "9.4.2"}` on a gfx1201 node slipped past the
check that refuses `r9700_hsa_override_gfx_version: 9.4.2`; the article's NCCL values were
node-wide defaults. These tests pin that each governed variable meets its knob's rule whichever
knob carries it, and that the defaults carry only what a source shows right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_preflight import MANIFEST, check, facts, judge, r9700

from r9700ctl import envlist
from r9700ctl.agent.result import FAIL, PASS, WARN

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "r9700_env" / "defaults" / "main.yml"


def listed(verdict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in verdict.resolved.environment}


def test_the_judges_defaults_are_the_roles_defaults():
    """One truth: EnvKnobs() must read like roles/r9700_env/defaults/main.yml."""
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    knobs, problems = envlist.EnvKnobs.from_vars(defaults)
    assert problems == [] and knobs == envlist.EnvKnobs()


def test_an_hsa_override_in_env_extra_is_refused_with_the_overrides_own_message():
    by_knob = check(judge(facts(), hsa_override_gfx_version="9.4.2"), "hsa.override")
    by_env = check(judge(facts(), env_extra={"HSA_OVERRIDE_GFX_VERSION": "9.4.2"}), "hsa.override")
    assert by_knob.status == by_env.status == FAIL
    assert by_env.detail == by_knob.detail
    assert by_env.detail.startswith("cross-family HSA override refused: 9.4.2 is gfx942 (CDNA3)")
    assert by_env.hint.startswith("remove HSA_OVERRIDE_GFX_VERSION from r9700_env_extra")
    assert by_knob.hint.startswith("remove r9700_hsa_override_gfx_version")


@pytest.mark.parametrize("knob", ["env", "env_extra"])
def test_an_hsa_override_of_the_gpus_own_family_in_either_dict_is_accepted_and_listed(knob):
    verdict = judge(facts(), **{knob: {"HSA_OVERRIDE_GFX_VERSION": "12.0.1"}})
    assert check(verdict, "hsa.override").status == WARN
    assert listed(verdict)["HSA_OVERRIDE_GFX_VERSION"] == "12.0.1"
    assert verdict.resolved.hsa_override_gfx_version == "12.0.1"


def test_two_different_hsa_overrides_are_refused():
    verdict = judge(
        facts(), hsa_override_gfx_version="12.0.1", env_extra={"HSA_OVERRIDE_GFX_VERSION": "12.0.0"}
    )
    assert check(verdict, "hsa.override").status == FAIL


def test_defaults_hold_no_article_values():
    """NCCL_MIN_NCHANNELS=4 (MI300X tuning) and NCCL_P2P_DISABLE=0 (a no-op) are opt-in only."""
    values = listed(judge(facts()))
    assert "NCCL_MIN_NCHANNELS" not in values and values.get("NCCL_P2P_DISABLE") != "0"


@pytest.mark.parametrize(
    ("extra", "p2p_mode"),
    [
        ({"HSA_FORCE_FINE_GRAIN_PCIE": "1"}, "on"),
        ({"NCCL_P2P_DISABLE": "0"}, "on"),
        ({"NCCL_P2P_DISABLE": "1"}, "off"),
    ],
    ids=["fine-grain-1", "p2p-disable-0", "p2p-disable-1"],
)
def test_a_p2p_variable_in_env_extra_is_judged_like_r9700_p2p(extra, p2p_mode):
    """Without P2P facts (BAR, IOMMU, ACS unknown), asking for P2P is refused either way."""
    by_env = check(judge(facts(), env_extra=extra), "p2p.policy")
    by_knob = check(judge(facts(), p2p=p2p_mode), "p2p.policy")
    assert by_env.status == by_knob.status == (FAIL if p2p_mode == "on" else PASS)
    if by_env.status == FAIL:  # the refusal reads the same; only the fix names the knob
        assert by_env.detail == by_knob.detail


def test_p2p_asked_both_ways_is_refused():
    verdict = judge(facts(), p2p="off", env_extra={"HSA_FORCE_FINE_GRAIN_PCIE": "1"})
    assert "P2P asked both on and off" in check(verdict, "p2p.policy").detail


def test_p2p_on_without_the_facts_is_a_loud_warning_with_allow_unsupported():
    verdict = judge(facts(), p2p="on", allow_unsupported=True)
    c = check(verdict, "p2p.policy")
    assert c.status == WARN and c.detail.startswith("FORCED by r9700_allow_unsupported")
    assert listed(verdict)["HSA_FORCE_FINE_GRAIN_PCIE"] == "1"


def test_auto_without_facts_decides_off_with_the_reason_recorded():
    """Two cards: no known issue of 4x R9700 decides before the missing facts do."""
    verdict = judge(facts(gpus=r9700(2)))
    # and the default workaround of a known issue of the R9700s (ROCm/rocm-systems#2209)
    assert listed(verdict) == {"NCCL_P2P_DISABLE": "1", "HSA_ENABLE_IPC_MODE_LEGACY": "0"}
    assert verdict.resolved.p2p["state"] == "off"
    assert verdict.resolved.p2p["reason"].startswith("off: no BAR, IOMMU or ACS facts for 0000:03:00.0")


@pytest.mark.parametrize("value", ["yes", "auto", "0,x"])
def test_a_rocr_visible_devices_that_is_no_device_list_is_refused_from_either_knob(value):
    by_knob = judge(facts(), rocr_visible_devices=value)
    by_env = judge(facts(), env_extra={"ROCR_VISIBLE_DEVICES": value})
    if value == "auto":  # the knob's own keyword; only the variable must be a list
        assert by_knob.ok
        assert not by_env.ok
        return
    assert not by_knob.ok and not by_env.ok


def test_a_rule_adds_entries_with_a_reason_and_a_user_null_removes_one(monkeypatch):
    """The seam for known-issue workarounds: a rule in RULES, overridable by name."""

    def workaround(target):
        return [envlist.EnvEntry("NCCL_PROTO", "Simple", "RCCL hangs on 7.2.x for gfx1201", "known issue")]

    monkeypatch.setattr(envlist, "RULES", [workaround])
    entries = {e["name"]: e for e in judge(facts()).resolved.environment}
    assert entries["NCCL_PROTO"] == {
        "name": "NCCL_PROTO",
        "value": "Simple",
        "reason": "RCCL hangs on 7.2.x for gfx1201",
        "source": "known issue",
    }
    assert "NCCL_PROTO" not in listed(judge(facts(), env_extra={"NCCL_PROTO": None}))


def test_a_bad_r9700_p2p_value_is_a_settings_failure_from_the_roles_argument_spec():
    """The choices come from roles/r9700_env/meta/argument_specs.yml, judged by Ansible's validator."""
    c = check(judge(facts(), p2p="sometimes"), "settings")
    assert c.status == FAIL
    assert c.detail == "r9700_p2p='sometimes' is not one of auto, on, off, true, false"
    assert c.hint.startswith("set r9700_p2p to one of auto, on, off, true, false in the inventory: PCIe")


@pytest.mark.parametrize("text, mode", [("true", "on"), ("false", "off"), ("on", "on"), (True, "on")])
def test_r9700_p2p_from_an_ini_inventory_or_yaml_means_on_and_off(text, mode):
    """INI and -e give the text "true"; YAML gives a boolean: both pass the spec and mean on/off."""
    v = judge(facts(), p2p=text)
    assert [c for c in v.checks if c.id == "settings"] == []
    assert v.resolved.p2p["mode"] == mode


def test_yaml_booleans_for_r9700_p2p_mean_on_and_off():
    assert envlist.EnvKnobs.from_vars({"r9700_p2p": False})[0].p2p == "off"
    assert envlist.EnvKnobs.from_vars({"r9700_p2p": True})[0].p2p == "on"


def test_the_manifest_knows_the_r9700s_vram_the_bar_must_cover():
    assert MANIFEST.gpu("1002:7551").raw["vram_gib"] == 32


@pytest.mark.parametrize("text", ['{"NCCL_DEBUG": "INFO"}', "NCCL_DEBUG=INFO"])
def test_text_from_an_ini_inventory_is_read_as_the_mapping_it_spells(text):
    """JSON or key=value text, as Ansible's own dict type (the role's argument spec) reads it."""
    v = judge(facts(), env_extra=text)
    assert [c for c in v.checks if c.id == "settings"] == []
    assert {"name": "NCCL_DEBUG", "value": "INFO"}.items() <= listed_entry(v, "NCCL_DEBUG").items()


def test_an_env_that_is_no_mapping_is_a_settings_failure():
    c = check(judge(facts(), env_extra=["NCCL_DEBUG"]), "settings")
    assert c.detail == "r9700_env_extra=['NCCL_DEBUG'] is not a mapping of NAME: value"


def listed_entry(verdict, name):
    return next(e for e in verdict.resolved.environment if e["name"] == name)


# -- r9700_p2p: auto weighs the node's known issues (issue 22 item 20) ---------------------------------


def healthy_p2p(addresses: list[str]) -> dict:
    """nodefacts' `p2p` facts where every hardware fact allows P2P: each GPU on its own root port
    (GPUs meet only in the root complex), BAR 32 GiB >= VRAM, IOMMU passthrough."""
    gpus = {}
    for i, address in enumerate(addresses):
        gpus[address] = {
            "bars": [{"index": 0, "size": 32 * 2**30, "memory": True, "prefetch": True, "mem64": True}],
            "vram_bytes": None,
            "iommu_group": str(i),
            "iommu_type": "identity",
            "path": [f"0000:00:0{i + 1}.1", address],
        }
    return {"source": "sysfs", "gpus": gpus, "bridges": {}}


def r9700_node(count: int) -> dict:
    devices = r9700(count)
    return facts("ubuntu-24.04", gpus=devices, p2p=healthy_p2p([d["address"] for d in devices]))


def test_auto_keeps_p2p_off_on_4x_r9700_for_the_known_issues_and_names_the_one_that_decided():
    """Issue 22 item 20: with every hardware fact allowing it, auto turned P2P on for 4x R9700 on ROCm
    7.1.1 while the host hang (ROCm/rocm-systems#11348) and the IPC failure (ROCm/rccl-tests#162)
    apply to exactly that node and name NCCL_P2P_DISABLE=1 as the workaround; doctor then listed
    both as "not in force"."""
    v = judge(r9700_node(4))
    assert v.resolved.rocm_version == "7.1.1"
    assert v.resolved.p2p["state"] == "off"
    assert v.resolved.p2p["reason"].startswith(
        "off: known issue r9700-p2p-host-hang (Direct PCIe P2P during tensor-parallel inference hangs "
        "the whole host on 4x R9700; https://github.com/ROCm/rocm-systems/issues/11348)"
    )
    assert v.resolved.p2p["known_issues"] == ["r9700-p2p-host-hang", "r9700-4x-p2p-ipc-invalid"]
    assert v.resolved.p2p["blockers"] == []  # the hardware would allow it: only the issues decided
    assert listed(v)["NCCL_P2P_DISABLE"] == "1" and "HSA_FORCE_FINE_GRAIN_PCIE" not in listed(v)
    in_force = {k["id"]: k["in_force"] for k in v.resolved.known_issues}
    assert in_force["r9700-p2p-host-hang"] == "in force: NCCL_P2P_DISABLE=1 (through r9700_p2p)"
    assert in_force["r9700-4x-p2p-ipc-invalid"] == "in force: NCCL_P2P_DISABLE=1 (through r9700_p2p)"
    assert check(v, "p2p.policy").status == PASS


def test_two_r9700s_have_none_of_those_issues_and_auto_turns_p2p_on():
    """Both issues need four or more gfx1201 GPUs (min_gpus 4): two cards keep the hardware decision."""
    v = judge(r9700_node(2))
    assert v.resolved.p2p["state"] == "on" and v.resolved.p2p["known_issues"] == []
    assert listed(v)["HSA_FORCE_FINE_GRAIN_PCIE"] == "1"


def test_on_stays_an_explicit_choice_with_a_warning_naming_the_issues():
    v = judge(r9700_node(4), p2p="on")
    assert v.ok and v.resolved.p2p["state"] == "on"
    c = check(v, "p2p.policy")
    assert c.status == WARN
    assert c.detail.startswith(
        "r9700_p2p=on keeps PCIe peer-to-peer on despite known issues r9700-p2p-host-hang, "
        "r9700-4x-p2p-ipc-invalid of this node"
    )
    assert "https://github.com/ROCm/rocm-systems/issues/11348" in c.detail
    assert c.hint == "set r9700_p2p: auto (or off): the issues' workaround is NCCL_P2P_DISABLE=1"
    in_force = {k["id"]: k["in_force"] for k in v.resolved.known_issues}
    assert in_force["r9700-p2p-host-hang"].startswith("not in force: r9700_p2p on: ")


def test_a_skipped_p2p_issue_is_not_weighed_by_auto():
    """r9700_known_issue_workarounds_skip is the way out: the user takes the risk by its id."""
    skip = ["r9700-p2p-host-hang", "r9700-4x-p2p-ipc-invalid"]
    v = judge(r9700_node(4), known_issue_workarounds_skip=skip)
    assert v.resolved.p2p["state"] == "on" and v.resolved.p2p["known_issues"] == []


def test_no_text_calls_hsa_force_fine_grain_pcie_a_p2p_switch():
    """Issue 22 item 9: the variable makes ROCr expose VRAM as a fine-grained pool over PCIe
    (ROCR-Runtime amd_gpu_agent.cpp); docs, hints and comments called it "AMD's switch for PCIe
    peer-to-peer" and doctor said "no peer-to-peer over PCIe" without it."""
    repo = Path(__file__).resolve().parents[2]
    wrong = (
        "AMD's switch for PCIe",
        "switches P2P on",
        "no peer-to-peer over PCIe",
        "switches it on (HSA_FORCE",
    )
    texts = [*repo.glob("r9700ctl/**/*.py"), *repo.glob("roles/**/*.y*ml"), *repo.glob("roles/**/*.md")]
    texts += [*repo.glob("docs/*.md"), repo / "README.md", repo / "inventory/group_vars/all.yml"]
    said = [
        f"{path.relative_to(repo)}: {phrase}"
        for path in texts
        for phrase in wrong
        if phrase in path.read_text()
    ]
    assert said == []


@pytest.mark.parametrize(
    ("value", "seen", "inside"),
    [
        ("1,2,3,4", None, "1,2,3,4"),  # the container sees every GPU: the host's numbers
        ("1,2,3,4", ["b", "c", "d", "e"], "0,1,2,3"),  # the iGPU "a" sorted first and is not seen
        ("0,2", ["b", "c", "d", "e"], "1"),  # index 0 is the iGPU: left out
        ("GPU-4b2c1a9f,3", ["b", "c", "d", "e"], "GPU-4b2c1a9f,2"),  # a UUID names the same GPU
        ("0", ["b", "c", "d", "e"], ""),  # only the unseen iGPU: nothing left
        ("9", ["b"], ""),  # no such host index
    ],
)
def test_container_visible_devices_numbers_the_gpus_the_container_sees(value, seen, inside):
    """Issue 22 item 8: the host's AMD GPUs in PCI order are a (iGPU), b, c, d, e."""
    assert envlist.container_visible_devices(value, ["a", "b", "c", "d", "e"], seen) == inside
