"""Cause hints across checks (docs/validation.md, "Cause hints"): pure rules over result lists.

The bug class: a FAIL that names the symptom ("H2D 24 GB/s") but not the cause the same run
already found elsewhere ("link at Gen4 x16"). Rules add the cause; they never change a status.
"""

from __future__ import annotations

from r9700ctl.agent import causes
from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult

# The reason code each check family gives its WARN and FAIL here (data/codes.yaml).
CODES = {
    "compute.link_under_load": "PCIE_LINK_DOWNTRAINED",
    "pcie.link": "PCIE_CARD_BELOW_MODEL",
    "hostbw.h2d": "HOSTBW_BELOW_FLOOR",
    "platform.acs": "ACS_REDIRECT",
    "platform.iommu": "IOMMU_TRANSLATED",
    "platform.bar": "BAR_SMALLER_THAN_VRAM",
    "p2p.bandwidth": "P2P_NOT_EFFECTIVE",
    "collective.allreduce": "ALLREDUCE_BELOW_FLOOR",
    "compute.tflops": "COMPUTE_BELOW_PEERS",
}


def result(check_id: str, subject: str, status: str, value=None, hint: str = "", **evidence) -> CheckResult:
    return CheckResult(
        id=check_id,
        subject=subject,
        status=status,
        value=value,
        hint=hint,
        evidence=dict(evidence),
        code=CODES[check_id],
    )


def test_a_low_link_explains_low_host_bandwidth_on_the_same_gpu():
    results = [
        result("compute.link_under_load", "gpu1", FAIL, "Gen4 x16"),
        result("hostbw.h2d", "gpu1", FAIL, 24.1, "24.1 GB/s is below the FAIL limit"),
        result("hostbw.h2d", "gpu0", PASS, 53.0),
    ]
    causes.apply(results)
    assert results[1].status == FAIL
    assert results[1].hint == (
        "24.1 GB/s is below the FAIL limit; likely cause: link trained at Gen4 x16 "
        "(compute.link_under_load): reseat, riser, bifurcation or BIOS link speed"
    )
    assert results[2].hint == ""


def test_ineffective_p2p_is_blamed_on_acs_iommu_and_small_bar_found_by_the_platform_check():
    results = [
        result("platform.acs", "node", WARN, 2, redirecting={"0000:06:00.0": ["gpu0-gpu1"]}),
        result("platform.iommu", "node", WARN, "translated"),
        result("platform.bar", "gpu1", FAIL, 0.25),
        result(
            "p2p.bandwidth", "gpu0->gpu1", WARN, 12.0, "no faster than a host bounce", p2p_over_bounce=1.02
        ),
        result("p2p.bandwidth", "gpu2->gpu3", PASS, 40.0, p2p_over_bounce=2.1),
    ]
    causes.apply(results)
    hint = results[3].hint
    assert "ACS redirect on 0000:06:00.0 (platform.acs: ACS_REDIRECT)" in hint
    assert "IOMMU not in passthrough (platform.iommu: IOMMU_TRANSLATED)" in hint
    assert "BAR smaller than VRAM on gpu1 (platform.bar: BAR_SMALLER_THAN_VRAM)" in hint
    assert len(results[3].evidence["causes"]) == 3
    assert results[4].hint == ""


def test_low_all_reduce_with_healthy_p2p_points_at_rccl_settings():
    results = [
        result("p2p.bandwidth", "gpu0->gpu1", PASS, 40.0),
        result("collective.allreduce", "node", WARN, 9.0, "busbw low"),
    ]
    causes.apply(results)
    assert "RCCL not using P2P" in results[1].hint and "NCCL_P2P_LEVEL" in results[1].hint


def test_the_outlier_with_the_odd_vbios_gets_the_firmware_cause():
    results = [result("compute.tflops", "gpu2", FAIL, 60.0), result("compute.tflops", "gpu0", PASS, 95.0)]
    causes.apply(results, vbios={"gpu0": "113-A", "gpu1": "113-A", "gpu2": "113-B"})
    assert "firmware mismatch: gpu2 runs VBIOS 113-B, the others 113-A" in results[0].hint


def test_only_cross_socket_pairs_low_is_called_expected():
    numa = {"gpu0": 0, "gpu1": 0, "gpu2": 1, "gpu3": 1}
    results = [
        result("p2p.bandwidth", "gpu0->gpu1", PASS, 40.0),
        result("p2p.bandwidth", "gpu2->gpu3", PASS, 40.0),
        result("p2p.bandwidth", "gpu1->gpu2", WARN, 18.0, "below node median"),
    ]
    causes.apply(results, numa=numa)
    assert "crosses sockets" in results[2].hint
    assert results[2].status == WARN


def test_rules_never_add_the_same_cause_twice():
    results = [
        result("pcie.link", "gpu0", WARN, "Gen4 x16"),
        result("hostbw.h2d", "gpu0", WARN, 30.0),
    ]
    causes.apply(results)
    causes.apply(results)
    assert results[1].hint.count("likely cause") == 1
