"""One judge per fact (r9700ctl/agent/rules): IOMMU mode, large BAR, ACS redirect, link training and
the kernel log's trouble, each a pure rule the agent, doctor --bundle and preflight's P2P decision
all call.

Issue 20: IOMMU, BAR, ACS and link were judged twice (agent/checks/platform.py and
bundle/rules_hardware.py) and a third time for the P2P decision (p2p.py), with different answers:
a 256 MiB BAR FAILed in validate and WARNed in doctor; the agent failed page faults the bundle
warned about, and missed smu_busy, smu_hang, reset_failed and bus_lost. These tables pin each
rule once; the "both sides" tests pin that the agent and the bundle now agree on the same facts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r9700ctl import p2p_policy as p2p
from r9700ctl.agent.parsers import dmesg
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN
from r9700ctl.agent.rules import acs, bar, iommu, kernel_log
from r9700ctl.bundle import diagnose_bundle
from r9700ctl.bundle import severity as severity_of
from r9700ctl.manifest import load

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
GIB = 2**30


F = iommu.IommuFacts


@pytest.mark.parametrize(
    ("facts", "expected", "status", "mode"),
    [
        pytest.param(F(gpus=2, group_types={"gpu0": "identity"}), True, PASS, "passthrough", id="identity"),
        pytest.param(F(gpus=2, group_types={"gpu0": "DMA-FQ"}), True, WARN, "translated", id="dma-fq"),
        pytest.param(F(gpus=1, group_types={"gpu0": "DMA"}), True, SKIP, "translated", id="one-gpu-note"),
        pytest.param(F(gpus=2, group_types={"gpu0": "DMA"}), False, PASS, "translated", id="not-expected"),
        pytest.param(F(gpus=2, units=()), True, PASS, "off", id="no-iommu-unit"),
        pytest.param(F(gpus=2, disabled_param=True), True, PASS, "off", id="iommu=off"),
        pytest.param(F(gpus=2, passthrough_param=True), True, PASS, "passthrough (cmdline)", id="iommu=pt"),
        pytest.param(F(gpus=2, units=("ivhd0",)), True, WARN, "unknown", id="unit-no-param"),
        pytest.param(F(gpus=3), True, WARN, "unknown", id="bundle-cmdline-only"),
        # "blocked" and "unknown" say nothing of passthrough (they passed as it once): other facts decide.
        pytest.param(F(gpus=2, group_types={"gpu0": "blocked"}), True, WARN, "unknown", id="blocked-type"),
        pytest.param(
            F(gpus=2, passthrough_param=True, group_types={"gpu0": "unknown"}),
            True,
            PASS,
            "passthrough (cmdline)",
            id="unknown-type-iommu=pt",
        ),
    ],
)
def test_the_iommu_rule(facts, expected, status, mode):
    verdict = iommu.judge(facts, expected=expected)
    assert (verdict.status, verdict.mode) == (status, mode)
    assert verdict.code == ("" if verdict.reason == "" else iommu.CODE)


@pytest.mark.parametrize(
    ("bar_bytes", "vram", "fraction", "status"),
    [
        pytest.param(32 * GIB, 30576 * 2**20, 1.0, PASS, id="32G-bar-r9700"),
        pytest.param(256 * 2**20, 30576 * 2**20, 1.0, FAIL, id="256M-bar"),
        pytest.param(None, 30576 * 2**20, 1.0, SKIP, id="bar-unknown"),
        pytest.param(32 * GIB, None, 1.0, SKIP, id="vram-unknown"),
    ],
)
def test_the_bar_rule(bar_bytes, vram, fraction, status):
    verdict = bar.judge(bar_bytes, vram, fraction)
    assert verdict.status == status
    assert verdict.code == {PASS: "", FAIL: bar.CODE, SKIP: bar.UNKNOWN_CODE}[status]


SWITCH = ["0000:00:01.1", "0000:05:00.0"]  # a root port, then a switch's upstream port
SHARED = {"a": [*SWITCH, "0000:06:00.0", "0000:10:00.0"], "b": [*SWITCH, "0000:06:01.0", "0000:20:00.0"]}
OWN_ROOT_PORTS = {"a": ["0000:00:01.1", "0000:10:00.0"], "b": ["0000:00:02.1", "0000:20:00.0"]}
BOTH = {"0000:06:00.0", "0000:06:01.0"}


@pytest.mark.parametrize(
    ("paths", "redirecting", "noacs", "p2p_off", "status", "code"),
    [
        pytest.param(SHARED, BOTH, False, False, WARN, acs.CODE, id="shared-switch-redirects"),
        pytest.param(SHARED, {"0000:06:00.0"}, False, True, SKIP, acs.CODE, id="p2p-off-a-note"),
        pytest.param(SHARED, set(), False, False, PASS, "", id="shared-switch-clear"),
        pytest.param(OWN_ROOT_PORTS, {"0000:00:01.1"}, False, False, PASS, "", id="root-ports-not-judged"),
        pytest.param(SHARED, {"0000:06:00.0"}, True, False, PASS, "", id="pci=noacs"),
        pytest.param({"a": OWN_ROOT_PORTS["a"]}, set(), False, False, SKIP, acs.NOT_APPLICABLE, id="one-gpu"),
    ],
)
def test_the_acs_rule(paths, redirecting, noacs, p2p_off, status, code):
    states = {
        port: acs.PortAcs(("ReqRedir",) if port in redirecting else ())
        for path in paths.values()
        for port in path[:-1]
    }
    verdict = acs.judge(paths, states, noacs_param=noacs, p2p_off=p2p_off)
    assert (verdict.status, verdict.code) == (status, code)


def test_an_unreadable_port_between_gpus_is_skipped_not_passed():
    states = {"0000:06:00.0": acs.PortAcs(readable=False), "0000:06:01.0": acs.PortAcs()}
    verdict = acs.judge(SHARED, states)
    assert (verdict.status, verdict.code) == (SKIP, acs.UNREADABLE_CODE)


def test_the_p2p_decision_finds_acs_redirect_with_the_same_port_rule():
    """p2p.py's ports_between is the ACS rule's: preflight's P2P decision and the checks agree."""
    assert p2p.ports_between is acs.ports_between


def test_every_kernel_log_kind_has_one_severity_and_one_code():
    """The agent's own list of failing kinds (DMESG_FAIL_KINDS) missed smu_busy, smu_hang,
    reset_failed and bus_lost, which doctor judged from the manifest; now both judge by it."""
    signatures = load().raw["kernel_log_signatures"]
    assert {kind for kind, _ in dmesg.PATTERNS} == set(signatures)
    for kind, signature in signatures.items():
        assert signature["severity"] in kernel_log.SEVERITIES
        assert signature["code"] == f"KERNEL_LOG_{kind.upper()}"
    found = dmesg.parse(
        "[ 1.0] amdgpu 0000:03:00.0: amdgpu: SMU: I'm not done with your previous command\n"
        "[ 2.0] amdgpu 0000:03:00.0: amdgpu: device lost from bus!\n"
        "[ 3.0] amdgpu 0000:03:00.0: [gfxhub] page fault (src_id:0 ring:24 vmid:3)\n",
        "dmesg",
    ).findings
    verdicts = kernel_log.judge(found, signatures)
    assert [(v.kind, v.status) for v in verdicts] == [
        ("bus_lost", FAIL),
        ("page_fault", WARN),
        ("smu_busy", FAIL),
    ]
    assert kernel_log.worst(verdicts).code == "KERNEL_LOG_BUS_LOST"


# ---------------------------------------------------------------- the agent and the bundle agree


def _bundle(tmp_path: Path, recorded: str) -> Path:
    target = tmp_path / recorded
    shutil.copytree(RECORDED / recorded, target)
    return target


def test_a_256m_bar_fails_in_doctor_as_in_validate(tmp_path):
    """The bundle warned on a small BAR while the agent failed it (docs/validation.md C3: FAIL)."""
    bundle = _bundle(tmp_path, "r9700-1x-gigabyte")
    lspci = bundle / "lspci.txt"
    lspci.write_text(lspci.read_text().replace("[size=32G]", "[size=256M]"))
    (finding,) = [f for f in diagnose_bundle(bundle).findings if f.id == "pcie.small_bar"]
    assert (finding.status, finding.code) == (FAIL, bar.CODE)
    assert severity_of(finding) == "FAIL"


def test_missing_iommu_pt_on_one_gpu_is_a_note_in_doctor_as_in_validate(tmp_path):
    """RCCL and peer-to-peer need two GPUs: with one, a translating IOMMU is a note (SKIP, shown as
    INFO) on both sides; the agent warned on any GPU count before."""
    bundle = _bundle(tmp_path, "r9700-1x")
    (bundle / "cmdline.txt").write_text("BOOT_IMAGE=/vmlinuz-6.8.0-90-generic root=/dev/sda1 ro quiet\n")
    (finding,) = [f for f in diagnose_bundle(bundle).findings if f.id == "kernel.iommu_not_passthrough"]
    assert (finding.status, finding.code, severity_of(finding)) == (SKIP, iommu.CODE, "INFO")
    assert finding.detail.startswith("iommu=pt is missing from the kernel command line")
