"""Monitoring end to end on lab nodes: role, timer job, node_exporter, a real Prometheus.

`r9700ctl provision --tags r9700_monitoring -e r9700_monitoring_enabled=true` installs Debian's
prometheus-node-exporter and python3-prometheus-client and writes the units (the lab has no
init system: the role writes every file and starts nothing, as in an image build). The test
then does what systemd would: runs the service's ExecStart with its Environment= lines, and
starts node_exporter inside each node's namespace with the ARGS the role wrote. A real
Prometheus (Debian's package) on the lab host scrapes both nodes with the configuration
`r9700ctl monitoring scrape-config` prints, and the test reads the r9700_* metrics of both
nodes, and runs every Grafana panel's query, through Prometheus's HTTP API.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from child_process import r9700ctl

REPO = Path(__file__).resolve().parents[2]
UNIT = "/etc/systemd/system/r9700ctl-monitoring.service"
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def monitored(make_lab_module, tmp_path_factory):
    """Two lab nodes provisioned with the monitoring role twice (the second run must change nothing)."""
    lab = make_lab_module(nodes=2)
    work = tmp_path_factory.mktemp("monitoring")
    runs = []
    for name in ("first", "second"):
        done = r9700ctl(
            "provision",
            str(lab.inventory),
            "--tags",
            "r9700_monitoring",
            "-e",
            "r9700_monitoring_enabled=true",
            "-e",
            "r9700_monitoring_interval=5min",
            "--json",
            str(work / f"{name}.json"),
            home=work / "state",
            columns=160,
            timeout=1200,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        runs.append(json.loads((work / f"{name}.json").read_text()))
    return lab, work, runs


def test_a_second_provision_changes_nothing(monitored):
    _lab, _work, (first, second) = monitored
    assert any(host["changed"] > 0 for host in first["hosts"])
    assert {host["host"]: host["changed"] for host in second["hosts"]} == {"node1": 0, "node2": 0}


def test_the_units_say_what_runs_and_how_often(monitored):
    lab, _work, _runs = monitored
    for name, _address in lab.nodes:
        timer = lab.ssh(name, "cat /etc/systemd/system/r9700ctl-monitoring.timer").stdout
        assert "OnUnitActiveSec=5min" in timer and "Unit=r9700ctl-monitoring.service" in timer
        service = lab.ssh(name, f"cat {UNIT}").stdout
        assert f"--node {name} --textfile /var/lib/prometheus/node-exporter/r9700.prom" in service
        args = lab.ssh(name, "cat /etc/default/prometheus-node-exporter").stdout
        textfile_dir = "/var/lib/prometheus/node-exporter"
        assert f'ARGS="--web.listen-address=:9100 --collector.textfile.directory={textfile_dir}"' in args


def exec_start(unit_text: str) -> str:
    """The service's command as systemd would run it: Environment= lines, then ExecStart=."""
    env = [line.split("=", 1)[1] for line in unit_text.splitlines() if line.startswith("Environment=")]
    command = next(line.split("=", 1)[1] for line in unit_text.splitlines() if line.startswith("ExecStart="))
    return "env " + " ".join(shlex.quote(e) for e in env) + " " + command


@pytest.fixture(scope="module")
def exporting(monitored):
    """The timer's job run once on each node, and node_exporter started in each node's namespace."""
    lab, work, _runs = monitored
    for name, _address in lab.nodes:
        unit = lab.ssh(name, f"cat {UNIT}").stdout
        done = lab.ssh(name, f"sudo {exec_start(unit)}")
        assert done.returncode == 0, done.stdout + done.stderr
        start = (
            "sudo sh -c '. /etc/default/prometheus-node-exporter; "
            "setsid -f /usr/bin/prometheus-node-exporter $ARGS "
            ">/var/log/r9700ctl-test-node-exporter.log 2>&1 </dev/null'"
        )
        assert lab.ssh(name, start).returncode == 0
    return lab, work


def test_the_timer_job_writes_the_textfile_readable_by_node_exporter(exporting):
    lab, _work = exporting
    for name, _address in lab.nodes:
        listing = lab.ssh(name, "stat -c '%U %a' /var/lib/prometheus/node-exporter/r9700.prom").stdout.split()
        assert listing == ["root", "644"]
        text = lab.ssh(name, "cat /var/lib/prometheus/node-exporter/r9700.prom").stdout
        assert f'r9700_node_status{{level="config",node="{name}"}}' in text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def query(port: int, expr: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def prometheus(exporting):
    """Debian's Prometheus on the lab host, scraping both nodes with the generated configuration."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus (Debian package) is not installed: scripts/setup.sh --test installs it")
    lab, work = exporting
    config = work / "prometheus.yml"
    done = r9700ctl("monitoring", "scrape-config", str(lab.inventory), "--interval", "1s", "-o", str(config),
                    home=work, columns=160, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "prometheus.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 90
        nodes: set[str] = set()
        while time.monotonic() < deadline and nodes != {"node1", "node2"}:
            time.sleep(1)
            try:
                result = query(port, "r9700_node_status")["data"]["result"]
            except OSError:
                continue
            nodes = {r["metric"]["node"] for r in result}
        yield lab, port, nodes
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_prometheus_reads_the_r9700_metrics_of_both_nodes(prometheus):
    _lab, port, nodes = prometheus
    assert nodes == {"node1", "node2"}
    up = query(port, 'up{job="r9700"}')["data"]["result"]
    assert {r["metric"]["instance"]: r["value"][1] for r in up} == {"node1": "1", "node2": "1"}
    checks = query(port, 'r9700_check_status{check="inventory.count"}')["data"]["result"]
    assert {(r["metric"]["node"], r["metric"]["instance"]) for r in checks} == {
        ("node1", "node1"),
        ("node2", "node2"),
    }
    runs = query(port, "time() - r9700_last_run_timestamp_seconds")["data"]["result"]
    assert len(runs) == 2 and all(0 <= float(r["value"][1]) < 900 for r in runs)


def test_every_dashboard_query_is_valid_promql_for_this_prometheus(prometheus):
    _lab, port, _nodes = prometheus
    dashboard = json.loads((REPO / "templates/grafana/r9700-fleet.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$node", ".*")
            answer = query(port, expr)
            assert answer["status"] == "success", (panel["title"], expr, answer)
    verdicts = query(port, 'max by (node, level) (r9700_node_status{node=~".*"})')["data"]["result"]
    assert {r["metric"]["node"] for r in verdicts} == {"node1", "node2"}
