"""The config-level checks (inventory, driver, platform, pcie) on fake node trees.

Each test builds the node the way the kernel would show it, runs the real check, and asserts
the verdict and the hint an operator would act on. Kernel-log inputs are real recordings.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agent_fake_node import GIB, FakeNode, r9700_node

from r9700ctl.agent import environment, gpus, levels, sysfs
from r9700ctl.agent.checks import driver, inventory, pcie, platform
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.datafiles import gpu_models
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN
from r9700ctl.agent.sysfs import Link
from r9700ctl.agent.thresholds import resolve

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl/data/recorded"


def make_ctx(
    root: Path,
    *,
    probe: dict | None = None,
    expected: int | None = None,
    variables: dict | None = None,
    state_dir: Path | None = None,
) -> AgentContext:
    found = gpus.discover(root, probe or {}, use_tools=False)
    thresholds = resolve([g.model for g in found.gpus], [g.vendor for g in found.gpus])
    env = environment.capture(root, probe, environ=variables or {})
    if probe and probe.get("rocm"):
        env["rocm"] = probe["rocm"]
    ids = {g.pci_id for g in found.gpus}
    return AgentContext(
        level="config",
        gpus=found.gpus,
        thresholds=thresholds,
        params=levels.params_for("config"),
        root=root,
        expected_gpus=expected,
        environment=env,
        discovery=found,
        state_dir=state_dir,
        model_spec=gpu_models().get(ids.pop(), {}) if len(ids) == 1 else {},
    )


def by_id(results, check_id, subject="node"):
    matches = [r for r in results if r.id == check_id and r.subject == subject]
    assert len(matches) == 1, [(r.id, r.subject) for r in results]
    return matches[0]


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """A PATH with only the fake tools a test writes (so the host's real dmesg never leaks in)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def write(name: str, script: str) -> None:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)

    return write


# --- inventory ------------------------------------------------------------------------


def test_all_expected_gpus_pass_and_the_inventory_is_remembered(tmp_path):
    r9700_node(tmp_path / "root", 4)
    state = tmp_path / "state"
    state.mkdir()
    results = inventory.run(make_ctx(tmp_path / "root", expected=4, state_dir=state))
    count = by_id(results, "inventory.count")
    assert (count.status, count.value, count.threshold) == (PASS, 4, "== 4")
    assert by_id(results, "inventory.uniform").status == PASS
    assert by_id(results, "inventory.vram", "gpu0").status == PASS
    assert "0000:42:00.0" in (state / inventory.INVENTORY_FILE).read_text()


def test_a_card_that_vanished_since_the_last_run_is_named_by_its_address(tmp_path):
    """C1: FAIL GPU_MISSING naming which BDF is missing compared with the last inventory."""
    state = tmp_path / "state"
    state.mkdir()
    r9700_node(tmp_path / "before", 4)
    inventory.run(make_ctx(tmp_path / "before", expected=4, state_dir=state))
    r9700_node(tmp_path / "after", 3)  # the fourth card (0000:42:00.0) fell off the bus
    count = by_id(inventory.run(make_ctx(tmp_path / "after", expected=4, state_dir=state)), "inventory.count")
    assert count.status == FAIL
    assert count.value == 3
    assert "1 of 4 GPU(s) missing (missing since the last run: 0000:42:00.0)" in count.hint
    assert "reseat" in count.hint


def test_no_gpu_on_a_config_run_is_a_failure_with_the_next_step(tmp_path):
    FakeNode(tmp_path)
    [count] = inventory.run(make_ctx(tmp_path))
    assert (count.status, count.value) == (FAIL, 0)
    assert "no AMD or NVIDIA GPU on the PCI bus" in count.hint


def test_torch_seeing_fewer_gpus_than_the_bus_fails_and_visible_devices_only_warns(tmp_path):
    r9700_node(tmp_path, 2)
    probe = {
        "importable": True,
        "torch": "2.9.1",
        "available": True,
        "device_count": 1,
        "devices": [
            {"index": 0, "name": "x", "total_memory": 1, "major": 12, "minor": 0, "pci": "0000:12:00.0"}
        ],
    }
    seen = by_id(inventory.run(make_ctx(tmp_path, probe=probe)), "inventory.torch")
    assert seen.status == FAIL
    assert "torch sees 1 of 2 GPUs" in seen.hint
    hidden = by_id(
        inventory.run(make_ctx(tmp_path, probe=probe, variables={"HIP_VISIBLE_DEVICES": "0"})),
        "inventory.torch",
    )
    assert hidden.status == WARN
    assert "HIP_VISIBLE_DEVICES" in hidden.hint


def test_torch_not_installed_is_a_skip_with_the_install_hint(tmp_path):
    r9700_node(tmp_path, 1)
    probe = {"importable": False, "error": "ModuleNotFoundError: No module named 'torch'"}
    seen = by_id(inventory.run(make_ctx(tmp_path, probe=probe)), "inventory.torch")
    assert seen.status == SKIP
    assert "install PyTorch for ROCm" in seen.hint


def test_a_vbios_mismatch_warns(tmp_path):
    node = r9700_node(tmp_path, 2)
    (node.path_of("0000:22:00.0") / "vbios_version").write_text("113-APM7551-101\n")
    uniform = by_id(inventory.run(make_ctx(tmp_path)), "inventory.uniform")
    assert uniform.status == WARN
    assert "VBIOS differs" in uniform.hint


def test_a_healthy_r9700_reporting_30576_mib_passes(tmp_path):
    """Bug pinned: healthy R9700s report 30576 MiB (ROCm/ROCm#5832), below the old 0.95 x 32 GiB
    floor, so every healthy card was warned about its memory."""
    r9700_node(tmp_path, 1)
    vram = by_id(inventory.run(make_ctx(tmp_path)), "inventory.vram", "gpu0")
    assert (vram.status, vram.value) == (PASS, 30576.0)
    assert (
        "30576 MiB, what healthy cards report (inventory.vram_healthy_mib from thresholds.yaml"
        in vram.threshold
    )


def test_a_card_reporting_half_its_memory_warns(tmp_path):
    node = r9700_node(tmp_path, 1)
    (node.path_of("0000:12:00.0") / "mem_info_vram_total").write_text(f"{16 * GIB}\n")
    vram = by_id(inventory.run(make_ctx(tmp_path)), "inventory.vram", "gpu0")
    assert (vram.status, vram.value) == (WARN, 16384.0)
    assert "healthy cards of this model report 30576" in vram.hint


# --- driver --------------------------------------------------------------------------


def test_a_healthy_amd_driver_layer_passes(tmp_path, tools):
    r9700_node(tmp_path, 2)
    tools("dmesg", "exit 0\n")
    results = driver.run(make_ctx(tmp_path))
    assert {r.status for r in results} == {PASS}, [(r.id, r.subject, r.status, r.hint) for r in results]
    assert by_id(results, "driver.module").evidence["version"] == "6.12.12"


def test_an_unloaded_module_and_missing_kfd_fail_with_the_fix(tmp_path, tools):
    node = FakeNode(tmp_path)
    node.add_r9700(0x10, node.add_root_port("0000:00:01.1"), driver="")
    tools("dmesg", "exit 0\n")
    results = driver.run(make_ctx(tmp_path))
    module = by_id(results, "driver.module")
    assert module.status == FAIL and "sudo modprobe amdgpu" in module.hint and "mokutil" in module.hint
    assert by_id(results, "driver.bound", "gpu0").status == FAIL
    kfd = by_id(results, "driver.access")
    assert kfd.status == FAIL and "install amdgpu-dkms" in kfd.hint


def test_device_nodes_this_user_cannot_open_are_restricted_not_missing(tmp_path):
    """A user outside the render group sees /dev/kfd: that is WARN with the group fix, not FAIL."""
    r9700_node(tmp_path, 1)
    ctx = make_ctx(tmp_path)
    results = driver._access_results(ctx, access=lambda path, mode: False)
    kfd = by_id(results, "driver.access")
    assert (kfd.status, kfd.value) == (WARN, "restricted")
    assert "usermod -aG render,video" in kfd.hint
    assert by_id(results, "driver.access", "gpu0").value == "restricted"
    assert driver.device_access(tmp_path / "dev/kfd") == "ok"
    assert driver.device_access(tmp_path / "dev/nothing") == "missing"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may open any file")
def test_a_real_unreadable_device_node_is_restricted(tmp_path):
    node = tmp_path / "kfd"
    node.write_text("")
    node.chmod(0)
    assert driver.device_access(node) == "restricted"


def test_a_failed_gpu_init_in_the_kernel_log_fails(tmp_path, tools):
    """Real recording: ROCm/ROCm#5706, an R9700 whose init failed (probe ... failed with error -22)."""
    r9700_node(tmp_path, 1)
    tools("dmesg", f"exec /bin/cat '{RECORDED / 'r9700-vm-initfail/dmesg.txt'}'\n")
    log = by_id(driver.run(make_ctx(tmp_path)), "driver.dmesg")
    assert log.status == FAIL
    assert "init_failed" in log.hint and "probe_failed" in log.hint
    assert any("probe of 0000:01:00.0 failed" in line for line in log.evidence["lines"])


def test_page_faults_in_the_kernel_log_warn_as_the_manifest_judges_them(tmp_path, tools):
    """Real recording: ROCm/ROCm#5814, gfxhub page faults on an RX 9070 XT.

    Issue 20: the agent failed page faults and firmware lines while doctor --bundle warned on the
    same lines; one judge (rules/kernel_log.py, the manifest's severities) now decides for both: a
    page fault is a program's bad address unless a reset or MES failure follows (then those FAIL)."""
    r9700_node(tmp_path, 1)
    tools("dmesg", f"exec /bin/cat '{RECORDED / 'rx9070xt-igpu/dmesg.txt'}'\n")
    log = by_id(driver.run(make_ctx(tmp_path)), "driver.dmesg")
    assert log.status == WARN and "page_fault" in log.hint
    assert log.code == "KERNEL_LOG_PAGE_FAULT"


def test_an_unreadable_kernel_log_is_a_skip_with_the_reason(tmp_path, tools):
    r9700_node(tmp_path, 1)
    tools("dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    log = by_id(driver.run(make_ctx(tmp_path)), "driver.dmesg")
    assert log.status == SKIP
    assert "Operation not permitted" in log.hint and "dmesg_restrict" in log.hint


def test_a_cross_family_hsa_override_on_an_r9700_fails(tmp_path, tools):
    """9.4.2 is gfx942 (MI300, docs/hardware.md); on gfx1201 it has crashed the driver (rocm-systems#3531)."""
    r9700_node(tmp_path, 1)
    tools("dmesg", "exit 0\n")
    results = driver.run(make_ctx(tmp_path, variables={"HSA_OVERRIDE_GFX_VERSION": "9.4.2"}))
    override = by_id(results, "driver.hsa_override")
    assert override.status == FAIL
    assert "rocm-systems#3531" in override.hint
    same = by_id(
        driver.run(make_ctx(tmp_path, variables={"HSA_OVERRIDE_GFX_VERSION": "12.0.1"})),
        "driver.hsa_override",
    )
    assert same.status == WARN and "does nothing here" in same.hint


def test_a_torch_build_without_gfx1201_kernels_fails(tmp_path, tools):
    r9700_node(tmp_path, 1)
    tools("dmesg", "exit 0\n")
    probe = {
        "importable": True,
        "available": True,
        "hip": "6.2",
        "device_count": 1,
        "devices": [],
        "arch_list": ["gfx900", "gfx942", "gfx1100"],
    }
    arch = by_id(driver.run(make_ctx(tmp_path, probe=probe)), "driver.torch_arch")
    assert arch.status == FAIL
    assert "no gfx1201 kernels" in arch.hint


def test_rocm_6_3_cannot_drive_an_r9700(tmp_path, tools):
    """gfx1201 is supported from ROCm 6.4.1 (docs/hardware.md); the article's 6.3.2 cannot drive an R9700."""
    r9700_node(tmp_path, 1)
    tools("dmesg", "exit 0\n")
    rocm = by_id(driver.run(make_ctx(tmp_path, probe={"rocm": "6.3.2-66"})), "driver.rocm")
    assert rocm.status == FAIL
    assert "does not support gfx1201" in rocm.hint and "6.4.1" in rocm.hint
    ok = by_id(driver.run(make_ctx(tmp_path, probe={"rocm": "7.1.1-38"})), "driver.rocm")
    assert ok.status == PASS


# --- platform -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "cmdline", "status", "mode"),
    [
        pytest.param("identity", "iommu=pt", PASS, "passthrough", id="passthrough"),
        pytest.param("DMA-FQ", "quiet", WARN, "translated", id="translated"),
        pytest.param(None, "quiet", PASS, "off", id="no-iommu"),
    ],
)
def test_iommu_mode_comes_from_the_gpus_iommu_group(tmp_path, domain, cmdline, status, mode):
    node = r9700_node(tmp_path, 2)
    (tmp_path / "proc/cmdline").write_text(cmdline + "\n")
    if domain:
        for group, bdf in enumerate(["0000:12:00.0", "0000:22:00.0"]):
            node.set_iommu_group(bdf, group + 10, domain)
    iommu = by_id(platform.run(make_ctx(tmp_path)), "platform.iommu")
    assert (iommu.status, iommu.value) == (status, mode)
    if status == WARN:
        assert "add iommu=pt" in iommu.hint


def _two_cards_behind_a_switch(tmp_path: Path, control: int | None, readable: bool = True) -> FakeNode:
    node = FakeNode(tmp_path)
    root_port = node.add_root_port("0000:00:01.1")
    upstream = node.add_switch_port("0000:05:00.0", root_port)
    for i, (dsp, bus) in enumerate((("0000:06:00.0", 0x10), ("0000:06:01.0", 0x20))):
        node.add_switch_port(dsp, upstream)
        node.set_acs(dsp, control, readable=readable)
        node.add_r9700(bus, dsp, render_minor=128 + i)
    node.load_module("amdgpu")
    node.add_dev("dev/kfd")
    return node


def test_acs_redirect_on_a_shared_switch_warns_naming_the_bridges(tmp_path):
    """ACS ReqRedir/CmpltRedir send peer traffic up through the root complex (docs/hardware.md)."""
    _two_cards_behind_a_switch(tmp_path, control=0x001D)
    acs = by_id(platform.run(make_ctx(tmp_path)), "platform.acs")
    assert acs.status == WARN
    assert "0000:06:00.0, 0000:06:01.0" in acs.hint and "gpu0 <-> gpu1" in acs.hint
    assert acs.code == "ACS_REDIRECT"
    assert "setpci" in acs.hint and "pci=noacs" in acs.hint


def test_acs_off_on_the_shared_switch_passes(tmp_path):
    _two_cards_behind_a_switch(tmp_path, control=0x0000)
    assert by_id(platform.run(make_ctx(tmp_path)), "platform.acs").status == PASS


def test_acs_that_needs_root_to_read_is_skipped_with_the_reason(tmp_path):
    _two_cards_behind_a_switch(tmp_path, control=None, readable=False)
    acs = by_id(platform.run(make_ctx(tmp_path)), "platform.acs")
    assert acs.status == SKIP and "needs root" in acs.hint


def test_cards_on_separate_root_ports_are_not_judged_on_acs(tmp_path):
    node = r9700_node(tmp_path, 2)
    node.set_acs("0000:00:01.1", 0x001D)
    acs = by_id(platform.run(make_ctx(tmp_path)), "platform.acs")
    assert acs.status == PASS
    assert "own root port" in acs.evidence["note"]


def test_a_small_bar_fails_and_a_large_one_passes(tmp_path):
    """CONFIG_HSA_AMD_P2P: P2P only with a BAR exposing the whole VRAM."""
    node = FakeNode(tmp_path)
    node.add_r9700(0x10, node.add_root_port("0000:00:01.1"), bar_bytes=256 * 2**20)
    node.add_r9700(0x20, node.add_root_port("0000:00:02.1"), render_minor=129)
    results = platform.run(make_ctx(tmp_path))
    small = by_id(results, "platform.bar", "gpu0")
    assert (small.status, small.value) == (FAIL, 0.25)
    assert "Resizable BAR" in small.hint
    assert by_id(results, "platform.bar", "gpu1").status == PASS


def test_nvidia_bar_is_reported_not_judged(tmp_path):
    node = FakeNode(tmp_path)
    node.add_nvidia("0000:01:00.0", node.add_root_port("0000:00:01.0"), bar1_bytes=64 * GIB)
    probe = {
        "importable": True,
        "available": True,
        "cuda": "13.0",
        "device_count": 1,
        "devices": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "total_memory": 150_000_000_000,
                "major": 9,
                "minor": 0,
                "pci": "0000:01:00.0",
            }
        ],
    }
    ctx = make_ctx(tmp_path, probe=probe)
    assert ctx.model == "NVIDIA H200"
    bar = by_id(platform.run(ctx), "platform.bar", "gpu0")
    assert bar.status == SKIP and bar.threshold == "reported only"
    assert "not judged for NVIDIA H200" in bar.hint


def test_topology_maps_gpus_to_numa_nodes_and_root_ports(tmp_path):
    r9700_node(tmp_path, 4)
    topo = by_id(platform.run(make_ctx(tmp_path)), "platform.topology")
    assert topo.status == SKIP  # reported only: nothing to judge, never an unjudged PASS
    assert topo.evidence["numa_nodes"] == [0, 1]
    assert topo.evidence["gpus"]["gpu2"]["root_port"] == "0000:00:03.1"
    assert "across sockets" in topo.hint


# --- pcie ------------------------------------------------------------------------------


def test_a_link_at_gen5_x16_passes(tmp_path):
    r9700_node(tmp_path, 1)
    [link] = pcie.run(make_ctx(tmp_path))
    assert (link.status, link.value) == (PASS, "Gen5 x16")
    assert link.threshold == ">= Gen5 x16 (what both the card and its slot support)"


def test_an_idle_downtrained_link_is_only_noted_at_config_level(tmp_path):
    """Idle GPUs drop link speed (an idle H200 reports Gen1): no verdict without load."""
    node = FakeNode(tmp_path)
    node.add_r9700(0x10, node.add_root_port("0000:00:01.1"), link_cur=("2.5 GT/s PCIe", 16))
    [link] = pcie.run(make_ctx(tmp_path))
    assert link.status == PASS
    assert "idle" in link.hint and "under load" in link.hint


def test_an_r9700_in_a_gen4_slot_is_judged_against_gen4_with_the_platform_note(tmp_path):
    """Bug pinned: every R9700 was held to Gen5, so healthy cards in Gen4 servers FAILed."""
    node = FakeNode(tmp_path)
    port = node.add_root_port("0000:00:01.1", maxi=("16.0 GT/s PCIe", 16))
    node.add_r9700(0x10, port, link_cur=("16.0 GT/s PCIe", 16))
    [link] = pcie.run(make_ctx(tmp_path))
    assert link.status == PASS
    assert link.threshold.startswith(">= Gen4 x16")
    assert "the platform limits this card to Gen4 x16" in link.hint
    under_load = pcie.judge_link(
        sysfs.read_link(tmp_path, "0000:12:00.0"), 32.0, 16, under_load=True, idle_status=PASS
    )
    assert under_load.status == PASS


def test_a_card_trained_below_what_its_gen4_slot_supports_fails_under_load(tmp_path):
    node = FakeNode(tmp_path)
    port = node.add_root_port("0000:00:01.1", maxi=("16.0 GT/s PCIe", 16))
    node.add_r9700(0x10, port, link_cur=("8.0 GT/s PCIe", 16))
    link = sysfs.read_link(tmp_path, "0000:12:00.0")
    verdict = pcie.judge_link(link, 32.0, 16, under_load=True, idle_status=PASS)
    assert verdict.status == FAIL
    assert verdict.reason.startswith(
        "link trained at Gen3 x16, below the Gen4 x16 both the card and its slot"
    )


def test_a_link_below_its_maximum_under_load_fails_naming_the_slot():
    """The measurement checks call this after re-reading the link during a copy."""
    link = Link(
        cur_speed_gts=16.0,
        cur_width=8,
        max_speed_gts=32.0,
        max_width=16,
        at="0000:10:00.0",
        slot_port="0000:00:01.1",
        slot_max_speed_gts=32.0,
        slot_max_width=16,
    )
    verdict = pcie.judge_link(link, 32.0, 16, under_load=True, idle_status=PASS)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("link trained at Gen4 x8, below the Gen5 x16 both the card and its slot")
    assert "0000:00:01.1" in verdict.reason
    healthy = Link(32.0, 16, 32.0, 16, "0000:10:00.0", slot_max_speed_gts=32.0, slot_max_width=16)
    assert pcie.judge_link(healthy, 32.0, 16, under_load=True, idle_status=PASS).status == PASS
    unreadable = pcie.judge_link(Link(), 32.0, 16, under_load=True, idle_status=PASS)
    assert unreadable.status == INCONCLUSIVE


def test_without_a_readable_slot_only_a_link_at_the_cards_maximum_is_judged():
    """In a VM there is no port above the card: at its maximum both ends evidently support it (PASS);
    below it a slower slot cannot be told from a downtrained link (INCONCLUSIVE, not FAIL)."""
    at_max = Link(32.0, 16, 32.0, 16, "0000:00:06.0")
    assert pcie.judge_link(at_max, 32.0, 16, under_load=True, idle_status=PASS).status == PASS
    below = Link(16.0, 16, 32.0, 16, "0000:00:06.0")
    verdict = pcie.judge_link(below, 32.0, 16, under_load=True, idle_status=PASS)
    assert verdict.status == INCONCLUSIVE
    assert "slot's capability is not readable" in verdict.reason


def test_a_card_whose_own_maximum_is_below_its_models_warns():
    gen4_card = Link(
        16.0,
        16,
        16.0,
        16,
        "0000:10:00.0",
        slot_port="0000:00:01.1",
        slot_max_speed_gts=32.0,
        slot_max_width=16,
    )
    verdict = pcie.judge_link(gen4_card, 32.0, 16, under_load=True, idle_status=PASS)
    assert verdict.status == WARN
    assert "below its model's Gen5 x16" in verdict.reason
