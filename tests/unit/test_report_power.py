"""The staged power phase and the PCIe errors in the HTML report and the Prometheus metrics.

The node report is built from the power and aer checks' own results on the SYNTHESISED phase of
test_checks_power (two R9700s, a 1200 W PSU with 300 W of host), plus an AER result with errors.
"""

from __future__ import annotations

from pathlib import Path

from test_checks_power import ADDR, ctx, phase, policy

from r9700ctl.agent import metrics
from r9700ctl.agent import power_budget as power
from r9700ctl.agent.checks import power as power_check
from r9700ctl.agent.report import verdict
from r9700ctl.report.formats import render_html

AER_RESULT = {
    "id": "aer",
    "subject": "gpu1",
    "status": "WARN",
    "metric": "new_errors",
    "value": 5,
    "unit": "errors",
    "threshold": "",
    "hint": "0000:04:00.0: 5 correctable at GPU 0000:04:00.0 (BadTLP 5) during compute.gemm; reseat",
    "evidence": {
        "with_errors": [{"step": "compute.gemm", "increases": [{"kind": "correctable", "delta": 5}]}]
    },
}


def node_report(tmp_path: Path) -> dict:
    policy(tmp_path, psus=[power.Psu("psu1", 1200, tuple(ADDR), 300)])
    results = [r.to_dict() for r in power_check.run(ctx(tmp_path, phase()))] + [AER_RESULT]
    report = {
        "schema": "r9700ctl.validate/1",
        "node": "node1",
        "level": "standard",
        "started": "2026-12-02T10:00:00+0000",
        "results": results,
        "gpus": [
            {"index": i, "pci_address": a, "name": "AMD Radeon AI PRO R9700"} for i, a in enumerate(ADDR)
        ],
        "environment": {},
    }
    report.update(verdict([r["status"] for r in results]))
    return report


def test_the_html_report_draws_the_power_phase_and_the_pcie_errors(tmp_path):
    text = render_html(node_report(tmp_path))

    assert 'data-chart="power-phase"' in text and 'data-chart="pcie-errors"' in text
    section = text[text.index('data-chart="power-phase"') :]
    assert "PSU total (W)" in section and "psu1" in section and "fan (rpm)" in section
    assert "sampled at 10 Hz per GPU" in text


def test_the_metrics_carry_the_psu_draw_the_measured_power_and_the_aer_counts(tmp_path):
    text = metrics.render(node_report(tmp_path), now=0)

    assert 'r9700_psu_draw_watts{figure="peak",node="node1",psu="psu1"} 940.0' in text
    assert 'r9700_psu_rating_watts{node="node1",psu="psu1"} 1200.0' in text
    assert 'r9700_gpu_power_measured_watts{figure="peak",gpu="gpu0",node="node1"} 320.0' in text
    assert 'r9700_gpu_pcie_aer_new_errors{gpu="gpu1",kind="correctable",node="node1"} 5.0' in text


def test_the_metrics_carry_the_load_temperatures_and_fan_speeds(tmp_path):
    """The thermal timelines reach Prometheus as the figures a dashboard plots across runs: the
    hottest reading per sensor under load (same sensor names as r9700_gpu_temperature_celsius)
    and the fan at the start, end and top of the GPU's own load step."""
    report = node_report(tmp_path)
    by_id = {(r["id"], r["subject"]): r["evidence"] for r in report["results"]}
    text = metrics.render(report, now=0)

    hotspot = by_id[("power.temp_hotspot", "gpu0")]["max_c"]
    assert (
        f'r9700_gpu_load_temperature_max_celsius{{gpu="gpu0",node="node1",sensor="junction"}} {hotspot:.1f}'
        in text
    )
    fan = by_id[("power.fan", "gpu1")]
    for figure in ("start", "end", "max"):
        value = float(fan[f"rpm_{figure}"])
        assert f'r9700_gpu_load_fan_rpm{{figure="{figure}",gpu="gpu1",node="node1"}} {value}' in text
