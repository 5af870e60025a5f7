"""Monitoring: the r9700_* metrics, the node timer's job, the scrape config and the dashboard.

The metrics are parsed back with prometheus_client's own parser; the node job runs the real
agent (level config works on any machine); the dashboard is held to the metric names the
exporter writes, so a renamed metric cannot leave a panel silently empty.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from history_reports import REPO, four_gpus, recorded
from prometheus_client.parser import text_string_to_metric_families

from r9700ctl.agent import metrics
from r9700ctl.agent import monitor as node
from r9700ctl.monitoring.scrape import render as render_scrape

DASHBOARD = REPO / "templates" / "grafana" / "r9700-fleet.json"
METRIC_NAME = re.compile(r"\br9700_[a-z0-9_]+\b")


def amd_node() -> dict:
    """The recorded H200 report as a 4-GPU node whose discovery read amdgpu's hwmon and DPM
    files (values of the shape the agent reports for an R9700: the fields, not a recording)."""
    report = four_gpus(recorded())
    for gpu in report["gpus"]:
        gpu.update(
            temps_c={"edge": 41.0, "junction": 45.0, "mem": 50.0},
            clocks_mhz={"sclk": 500.0, "mclk": 96.0},
            power_w=33.0,
            power_cap_w=300.0,
            vram_bytes=34_342_961_152,
        )
    report["gpus"][1]["link"].update(cur_speed_gts=16.0, cur_width=8)
    return report


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family) -> dict:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def test_every_metric_is_written_for_a_gpu_node_with_its_labels():
    found = families(metrics.render(amd_node()))
    assert set(found) == metrics.NAMES
    links = {s.labels["gpu"]: s.value for s in found["r9700_gpu_pcie_link_generation"].samples}
    assert links == {"gpu0": 5, "gpu1": 4, "gpu2": 5, "gpu3": 5}  # 32 GT/s is Gen5, 16 GT/s Gen4
    widths = {s.labels["gpu"]: s.value for s in found["r9700_gpu_pcie_link_width"].samples}
    assert widths["gpu1"] == 8
    temps = {
        (s.labels["gpu"], s.labels["sensor"]): s.value for s in found["r9700_gpu_temperature_celsius"].samples
    }
    assert temps[("gpu2", "junction")] == 45.0
    info = next(s for s in found["r9700_gpu_info"].samples if s.labels["gpu"] == "gpu3")
    assert (info.labels["pci_address"], info.labels["serial"]) == ("0000:14:00.0", "1650522000003")
    status = {
        (s.labels["check"], s.labels["subject"]): s.value
        for s in found["r9700_check_status"].samples
        if s.labels["level"] == "standard"
    }
    assert status[("hostbw.h2d", "gpu2")] == 0 and status[("p2p.bandwidth", "node")] == -1
    values = {
        (s.labels["check"], s.labels["subject"], s.labels["unit"]) for s in found["r9700_check_value"].samples
    }
    assert ("compute.tflops_bf16", "gpu0", "TFLOPS") in values


def test_a_fleet_node_without_a_report_is_an_error_in_the_metrics():
    document = {
        "schema": "r9700ctl.validate-fleet/1",
        "level": "config",
        "started": "2026-12-03T10:00:00+00:00",
        "nodes": [
            {"host": "node1", "status": "PASS", "report": four_gpus(recorded("quick.json"), "node1")},
            {"host": "ghost", "status": "UNREACHABLE", "report": None, "error": "timed out"},
        ],
        "fleet": {"results": []},
    }
    found = families(metrics.render(document))
    status = {s.labels["node"]: s.value for s in found["r9700_node_status"].samples}
    assert status == {"node1": 0, "ghost": 3}
    codes = {s.labels["node"]: s.value for s in found["r9700_last_run_exit_code"].samples}
    assert codes["ghost"] == 3


def test_the_node_job_runs_the_agent_and_adds_the_latest_measured_figures(tmp_path):
    """What the r9700ctl-monitoring service runs, in a child process as systemd would, from the
    archive r9700ctl packs for the node (the agent reads its data files there as JSON)."""
    from r9700ctl.agentpack import stage

    lib = stage(tmp_path / "lib")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "standard.json").write_text(json.dumps(recorded("standard.json")))
    textfile = tmp_path / "textfile" / "r9700.prom"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "r9700ctl.agent.monitor",
            "--node",
            "node7",
            "--textfile",
            str(textfile),
            "--state-dir",
            str(tmp_path / "state"),
            "--reports-dir",
            str(reports),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=lib,
        env={**os.environ, "PYTHONPATH": str(lib)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [p.name for p in textfile.parent.iterdir()] == ["r9700.prom"]  # renamed into place, no leftovers
    found = families(textfile.read_text())
    levels = {(s.labels["node"], s.labels["level"]) for s in found["r9700_node_status"].samples}
    assert levels == {("node7", "config"), ("node7", "standard")}
    config = json.loads((tmp_path / "state" / "last-config.json").read_text())
    codes = {s.labels["level"]: s.value for s in found["r9700_last_run_exit_code"].samples}
    assert codes["config"] == config["exit_code"]
    measured = {
        (s.labels["check"], s.labels["level"])
        for s in found["r9700_check_value"].samples
        if s.labels["node"] == "node7"
    }
    assert ("compute.tflops_bf16", "standard") in measured


def test_the_node_job_writes_an_error_metric_when_the_agent_wrote_no_report(tmp_path, monkeypatch):
    monkeypatch.setattr(node, "run_agent", lambda *a: (None, 124, "the agent ran past 300 s"))
    textfile = tmp_path / "r9700.prom"
    assert node.main(["--node", "n1", "--textfile", str(textfile), "--reports-dir", str(tmp_path)]) == 0
    found = families(textfile.read_text())
    assert samples(found["r9700_node_status"]) == {(("level", "config"), ("node", "n1")): 3.0}
    assert samples(found["r9700_last_run_exit_code"]) == {(("level", "config"), ("node", "n1")): 124.0}
    checks = {s.labels["check"] for s in found["r9700_check_status"].samples}
    assert checks == {"monitoring.agent"}


def test_the_reports_directory_the_timer_reads_is_the_one_validate_keeps():
    defaults = yaml.safe_load((REPO / "roles/r9700_validate/defaults/main.yml").read_text())
    assert Path(defaults["r9700_validate_reports_dir"]) == node.REPORTS_DIR


def dashboard_exprs() -> list[tuple[str, str]]:
    document = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in document["panels"] for target in panel["targets"]]


def test_every_dashboard_query_names_only_metrics_the_exporter_writes():
    exprs = dashboard_exprs()
    assert exprs
    for title, expr in exprs:
        names = set(METRIC_NAME.findall(expr))
        assert names, f"{title}: {expr} names no r9700_ metric"
        assert names <= metrics.NAMES, (
            f"{title}: {sorted(names - metrics.NAMES)} is not written by the exporter"
        )
    node_variable = next(
        v for v in json.loads(DASHBOARD.read_text())["templating"]["list"] if v["name"] == "node"
    )
    assert set(METRIC_NAME.findall(node_variable["definition"])) <= metrics.NAMES


@pytest.mark.parametrize(
    "metric",
    [
        "r9700_gpu_temperature_celsius",
        "r9700_gpu_clock_mhz",
        "r9700_gpu_power_watts",
        "r9700_gpu_pcie_link_generation",
        "r9700_gpu_pcie_link_width",
        "r9700_check_status",
        "r9700_node_status",
    ],
)
def test_the_dashboard_shows_what_issue_12_asks_per_node(metric):
    assert any(metric in expr for _, expr in dashboard_exprs())


def test_the_dashboard_has_panels_for_the_last_p2p_and_all_reduce_figures():
    exprs = " ".join(expr for _, expr in dashboard_exprs())
    assert 'r9700_check_value{node=~"$node", check=~"p2p\\\\..*"}' in exprs
    assert 'r9700_check_value{node=~"$node", check=~"collective\\\\..*"}' in exprs


def test_scrape_config_has_one_target_per_node_named_by_inventory_name(tmp_path):
    from r9700ctl.inventory import load_inventory

    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[r9700_nodes]\n"
        "node1 ansible_host=192.0.2.11\n"
        "node2 ansible_host=2001:db8::12 r9700_monitoring_node_exporter_port=9200\n"
    )
    text = render_scrape(load_inventory(inventory), interval="15s", version="9.9")
    assert text.startswith(
        "# Prometheus scrape configuration for group 'r9700_nodes' of inventory.ini (2 node(s))"
    )
    document = yaml.safe_load(text)
    [job] = document["scrape_configs"]
    assert job["job_name"] == "r9700" and job["scrape_interval"] == "15s"
    assert job["static_configs"] == [
        {"targets": ["192.0.2.11:9100"], "labels": {"instance": "node1"}},
        {"targets": ["[2001:db8::12]:9200"], "labels": {"instance": "node2"}},
    ]


def test_promtool_accepts_the_scrape_config(tmp_path):
    import shutil

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool (Debian package prometheus) is not installed: scripts/setup.sh --test installs it"
        )
    from r9700ctl.inventory import load_inventory

    config = tmp_path / "prometheus.yml"
    config.write_text(render_scrape(load_inventory(REPO / "inventory" / "example.ini")))
    done = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_agent_archive_is_byte_identical_for_the_same_files(tmp_path):
    """A second provision must change nothing on a node: the copied archive may not differ."""
    from r9700ctl.agentpack import pack

    first = pack(tmp_path / "a.tar.gz").read_bytes()
    second = pack(tmp_path / "b.tar.gz").read_bytes()
    assert first == second
    import tarfile

    with tarfile.open(tmp_path / "a.tar.gz") as archive:
        names = archive.getnames()
    assert "r9700ctl/agent/monitor.py" in names and "r9700ctl/agent/__main__.py" in names
    assert "r9700ctl/data/thresholds.json" in names  # the node reads its data as JSON
    assert not any("__pycache__" in n for n in names)


def test_a_bad_interval_is_one_line_and_exit_64(tmp_path):
    from test_cli_validate import r9700ctl

    result = r9700ctl(
        "monitoring", "scrape-config", str(REPO / "inventory/example.ini"), "--interval", "soon"
    )
    assert result.returncode == 64
    assert (
        result.stderr
        == "error: --interval 'soon': not a Prometheus duration above zero (e.g. 15s, 1m or 1h30m)\n"
    )


def test_copy_is_not_mutated():
    report = amd_node()
    before = copy.deepcopy(report)
    metrics.render(report)
    assert report == before
