"""Validate reports as HTML, Prometheus textfile and JUnit XML (r9700ctl.report.formats).

The renderers are pure functions over the validate report dict (one node's or the fleet's); the
CLI test runs the real agent on this machine and checks that all three files are written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from r9700ctl.cli import cli
from r9700ctl.report.formats import (
    ReportFormatError,
    nodes_of,
    render_html,
    render_junit,
    render_prometheus,
)

SCRIPT_HINT = "<script>alert(1)</script> reseat the card"
BUSY_HINT = "GPU busy: pid 4242 (python3 train.py): its figures are INCONCLUSIVE"


def result(check: str, subject: str, status: str, value=None, unit: str = "", hint: str = "") -> dict:
    return {
        "id": check,
        "subject": subject,
        "status": status,
        "metric": check.split(".")[-1] if value is not None else "",
        "value": value,
        "unit": unit,
        "threshold": ">= 48.0 GB/s (FAIL below)" if value is not None else "",
        "hint": hint,
        "evidence": {},
    }


def agent_report(node: str, results: list[dict], status: str) -> dict:
    return {
        "schema": "r9700ctl.validate/1",
        "node": node,
        "level": "quick",
        "started": "2026-12-02T13:13:14+00:00",
        "duration_s": 12.5,
        "environment": {"kernel": "6.8.0-generic", "rocm": "6.4.1"},
        "gpus": [],
        "results": results,
        "status": status,
        "exit_code": {"PASS": 0, "WARN": 1, "FAIL": 2}.get(status, 3),
    }


@pytest.fixture
def fleet() -> dict:
    node1 = agent_report(
        "node01",
        [
            result("hostbw.h2d", "gpu0", "PASS", 52.1, "GB/s"),
            result("hostbw.d2h", "gpu0", "WARN", 45.0, "GB/s", "link trained at Gen4?"),
            result("gemm.bf16", "gpu0", "FAIL", 20.5, "TFLOPS", SCRIPT_HINT),
        ],
        "FAIL",
    )
    node2 = agent_report(
        "node02",
        [
            result("p2p.bw", "gpu0->gpu1", "SKIP", hint="one GPU only"),
            result("allreduce.bw", "node", "ERROR", hint="step timed out"),
            result("platform.iommu", "node", "PASS", "pt", ""),
            result("hostbw.h2d", "gpu1", "INCONCLUSIVE", 20.0, "GB/s", BUSY_HINT),
        ],
        "ERROR",
    )
    return {
        "schema": "r9700ctl.validate-fleet/1",
        "level": "quick",
        "started": "2026-12-02T13:13:00+00:00",
        "status": "FAIL",
        "exit_code": 3,
        "nodes": [
            {"host": "node02", "status": "ERROR", "report": node2},
            {"host": "node01", "status": "FAIL", "report": node1},
            {"host": "node03", "status": "UNREACHABLE", "error": "ssh: connection refused", "report": None},
        ],
        "fleet": {"results": [], "compared_metrics": 0, "note": ""},
        "notes": [],
    }


def test_both_schemas_normalise_to_nodes_worst_first(fleet):
    nodes = nodes_of(fleet)
    assert [n.node for n in nodes] == ["node01", "node02", "node03"]
    assert [r["status"] for r in nodes[0].results] == ["FAIL", "WARN", "PASS"]
    assert nodes[2].results[0]["hint"] == "UNREACHABLE: ssh: connection refused"
    single = nodes_of(fleet["nodes"][1]["report"])
    assert [n.node for n in single] == ["node01"]


def test_an_unknown_document_is_refused():
    with pytest.raises(ReportFormatError):
        nodes_of({"schema": "r9700ctl.provision/1"})


def test_html_escapes_a_hint_with_a_script_tag_and_shows_every_status(fleet):
    """Hints carry tool output; unescaped they would run as script in whoever opens the page."""
    page = render_html(fleet)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; reseat the card" in page
    for status in ("PASS", "WARN", "FAIL", "SKIP", "ERROR", "INCONCLUSIVE"):
        assert f'<td class="status {status}">{status}</td>' in page
    assert "r9700ctl.validate-fleet/1" in page
    assert "20.5 TFLOPS" in page
    assert "6.4.1" in page  # the environment
    assert page.index("node01") < page.index("node02")  # worst first
    assert "http" not in page.replace("http-equiv", "")  # no external assets


def test_prometheus_textfile_parses_and_carries_values_and_statuses(fleet):
    text = render_prometheus(fleet)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    values = {
        (s.labels["node"], s.labels["check"], s.labels["subject"], s.labels["unit"]): s.value
        for s in families["r9700_check_value"].samples
    }
    assert values[("node01", "gemm.bf16", "gpu0", "TFLOPS")] == 20.5
    assert values[("node01", "hostbw.h2d", "gpu0", "GB/s")] == 52.1
    assert not any(key[1] == "platform.iommu" for key in values)  # a string value is no figure
    statuses = {
        (s.labels["node"], s.labels["check"]): s.value for s in families["r9700_check_status"].samples
    }
    assert statuses[("node01", "hostbw.h2d")] == 0
    assert statuses[("node01", "hostbw.d2h")] == 1
    assert statuses[("node01", "gemm.bf16")] == 2
    assert statuses[("node02", "allreduce.bw")] == 3
    assert statuses[("node02", "p2p.bw")] == -1
    assert statuses[("node02", "hostbw.h2d")] == 4  # INCONCLUSIVE: its own value, as its exit code
    assert statuses[("node03", "node.report")] == 3
    assert "-1 SKIP" in families["r9700_check_status"].documentation
    assert "4 INCONCLUSIVE" in families["r9700_check_status"].documentation
    stamps = {s.labels["node"]: s.value for s in families["r9700_last_run_timestamp_seconds"].samples}
    assert stamps["node01"] == 1796217194.0


def test_junit_xml_has_a_suite_per_node_with_the_right_counts(fleet):
    root = ET.fromstring(render_junit(fleet).encode())
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"node01", "node02", "node03"}
    counts = {
        name: (
            len(s.findall("testcase")),
            len(s.findall("testcase/failure")),
            len(s.findall("testcase/error")),
            len(s.findall("testcase/skipped")),
        )
        for name, s in suites.items()
    }
    assert counts == {"node01": (3, 1, 0, 0), "node02": (4, 0, 1, 2), "node03": (1, 0, 1, 0)}
    assert suites["node01"].get("failures") == "1"
    assert suites["node02"].get("errors") == "1" and suites["node02"].get("skipped") == "2"
    # INCONCLUSIVE is skipped (nothing broke, nothing was judged) with its type and the reason.
    busy = suites["node02"].find("testcase[@classname='hostbw.h2d']/skipped")
    assert busy is not None and busy.get("type") == "INCONCLUSIVE"
    assert busy.get("message") == f"INCONCLUSIVE: {BUSY_HINT}"
    failure = suites["node01"].find("testcase[@classname='gemm.bf16']")
    assert failure is not None and failure.get("name") == "gpu0"
    assert failure.find("failure").get("message") == SCRIPT_HINT


def test_validate_local_writes_html_prom_and_junit_even_when_the_agent_fails(tmp_path, monkeypatch):
    """The agent exits 2 on a GPU-less machine; the reports must still be written (then they matter)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--local",
            "--level",
            "config",
            "--journal-dir",
            "j",
            "--html",
            "a.html",
            "--prom",
            "a.prom",
            "--junit",
            "a.xml",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1, 2, 3, 4), result.output
    assert "r9700ctl validate: node " in result.output
    page = (tmp_path / "a.html").read_text()
    assert "r9700ctl.validate/1" in page and "inventory.count" in page
    families = {f.name for f in text_string_to_metric_families((tmp_path / "a.prom").read_text())}
    assert "r9700_check_status" in families
    root = ET.parse(tmp_path / "a.xml").getroot()
    assert any(c.get("classname") == "inventory.count" for c in root.iter("testcase"))
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_output_in_a_missing_directory_is_one_line_and_exit_64(tmp_path):
    """Checked before the agent starts: a long run must not end in 'no such directory'."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "r9700ctl",
            "validate",
            "--local",
            "--html",
            str(tmp_path / "nodir" / "a.html"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 64
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {tmp_path / 'nodir' / 'a.html'}: --html: directory {tmp_path / 'nodir'} does not exist "
        "(create the directory first or give another path)\n"
    )


def test_the_reason_code_leads_junit_and_labels_prometheus(fleet):
    """Issue 20: a verdict's code is in the table, the JSON, JUnit and Prometheus: CI filters and
    alerts key on it. A node that gave no report has one too (NODE_UNREACHABLE)."""
    node1 = fleet["nodes"][1]["report"]
    node1["results"][1]["code"] = "HOSTBW_SLOW_LINK"
    root = ET.fromstring(render_junit(fleet).encode())
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    failure = suites["node01"].find("testcase[@classname='hostbw.d2h']")
    assert "code: HOSTBW_SLOW_LINK" in failure.find("system-out").text
    unreachable = suites["node03"].find("testcase[@classname='node.report']/error")
    assert unreachable.get("message") == "NODE_UNREACHABLE: UNREACHABLE: ssh: connection refused"
    families = {f.name: f for f in text_string_to_metric_families(render_prometheus(fleet))}
    codes = {
        (s.labels["node"], s.labels["check"]): s.labels["code"]
        for s in families["r9700_check_status"].samples
    }
    assert codes[("node01", "hostbw.d2h")] == "HOSTBW_SLOW_LINK"
    assert codes[("node01", "hostbw.h2d")] == ""  # a PASS names no code
    assert codes[("node03", "node.report")] == "NODE_UNREACHABLE"
