"""The HTML report, read as text and opened in a real browser (Debian's headless Chromium).

The fleet: node1 with a P2P pair at a third of the others and GPU 2's host->GPU 30% below its
history (a planted slow GPU), node2 healthy; both with three earlier runs in the history, so
each figure has a sparkline. The browser must render every chart (an <svg> with a size and
drawn paths), load nothing from the network and log no error.
R9700CTL_SCREENSHOT=docs/images/report.png also writes the screenshot the README shows.
"""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path

import pytest
from chromium import binary, open_page
from history_reports import fleet, four_gpus, recorded, slow_gpu, with_multi_gpu_figures

from r9700ctl.agent.report import verdict
from r9700ctl.history.queries import figure_trends
from r9700ctl.history.record import record
from r9700ctl.history.runs import HistoryPlan
from r9700ctl.history.store import open_history
from r9700ctl.report.formats import render_html

CHARTS = ("p2p-matrix", "bandwidth-size", "scaling", "load-timeline")


def node(name: str, *, sick: bool) -> dict:
    report = with_multi_gpu_figures(four_gpus(recorded(), name), slow_pair=(1, 2) if sick else None)
    if sick:
        report = slow_gpu(report, "gpu2", 0.7, "hostbw.h2d")
    report.update(verdict([r["status"] for r in report["results"]]))
    return report


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[str, Path]:
    """The report of today's run, after three healthy runs in the history, compared with 'last'."""
    work = tmp_path_factory.mktemp("report")
    database = work / "history.db"
    with open_history(database) as history:
        for day in ("01", "02", "03"):
            healthy = {name: node(name, sick=False) for name in ("node1", "node2")}
            for report in healthy.values():
                report["started"] = f"2026-11-{day}T10:00:00+0000"
            record(history, fleet(healthy, f"2026-11-{day}T10:00:00+00:00"), scope="inventory")
    today = {"node1": node("node1", sick=True), "node2": node("node2", sick=False)}
    plan = HistoryPlan(compare_with="last", path=database)
    plan.after_run(today, lambda: fleet(today), scope="inventory", source="")
    document = fleet(today)
    with open_history(database) as history:
        trends = figure_trends(history, today)
    text = render_html(document, trends=trends)
    path = work / "report.html"
    path.write_text(text)
    return text, path


def test_the_fleet_summary_comes_first_worst_node_first_with_version_level_and_thresholds(page):
    text, _path = page
    summary = text.index('id="fleet"')
    assert summary < text.index('id="node-node1"') < text.index('id="node-node2"')
    nodes_table = text[text.index('id="nodes"') : text.index("</table>", text.index('id="nodes"'))]
    assert nodes_table.index("node1") < nodes_table.index("node2")
    assert '<td class="status FAIL">FAIL</td>' in nodes_table
    assert "r9700ctl 0.1.0 (r9700ctl.validate-fleet/1)" in text
    assert "<tr><td>level</td><td>standard</td></tr>" in text
    assert "NVIDIA H200: thresholds for this model" in nodes_table


def test_the_page_says_why_the_fleet_comparison_did_not_run(page):
    text, _path = page
    assert '<p class="note" id="fleet-comparison">no fleet comparison: 2 node(s)' in text


def test_hints_are_text_and_the_environment_is_tables_never_python_reprs(page):
    text, _path = page
    assert "fell since the baseline" in text  # the regression's hint, as a table cell
    assert "PEER: this pair is slower than the node&#39;s other pairs" in text
    for repr_marker in ("{&#39;", "[&#39;", "{'", "['", "None</td>", "True</td>"):
        assert repr_marker not in text
    assert "<caption><strong>Operating system</strong></caption>" in text
    assert "<td>PRETTY_NAME</td><td>Ubuntu 24.04.3 LTS</td>" in text
    assert "<td>PyTorch GPU targets</td><td>sm_75, sm_80, sm_86, sm_90, sm_100, sm_120</td>" in text
    assert "<td>memory</td><td>125.8 GiB</td>" in text


def test_the_page_is_self_contained(page):
    text, _path = page
    assert "<script" not in text
    for attribute in ('src="http', 'href="http', "url(http", "@import"):
        assert attribute not in text


def test_each_node_has_its_charts_and_figures_their_sparklines(page):
    text, _path = page
    section = text[text.index('id="node-node1"') : text.index('id="node-node2"')]
    for chart in CHARTS:
        assert f'data-chart="{chart}"' in section
    assert section.count('<td class="trend"><svg') > 20


@pytest.fixture(scope="module")
def browser(page):
    if binary() is None:
        pytest.skip("chromium (Debian package) is not installed: scripts/setup.sh --test installs it")
    _text, path = page
    script = """JSON.stringify({
      charts: [...document.querySelectorAll('figure.chart')].map(f => {
        const svg = f.querySelector('svg');
        const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
        return {node: f.closest('section').id, chart: f.dataset.chart, width: box.width,
                height: box.height, paths: svg ? svg.querySelectorAll('path, use').length : 0,
                texts: svg ? svg.querySelectorAll('text').length : 0};
      }),
      sparklines: [...document.querySelectorAll('td.trend svg')].filter(s => s.getClientRects().length)
                   .map(s => s.getBoundingClientRect().width),
      title: document.title
    })"""
    return open_page(path, script, width=1280, height=2600)


def test_chromium_renders_every_chart_with_no_console_error_and_no_network(browser):
    import json

    assert browser.errors == []
    found = json.loads(browser.value)
    assert found["title"] == "r9700ctl validate: FAIL"
    charts = {(c["node"], c["chart"]): c for c in found["charts"]}
    assert set(charts) == {(f"node-{n}", chart) for n in ("node1", "node2") for chart in CHARTS}
    for key, chart in charts.items():
        assert chart["width"] > 200 and chart["height"] > 100, key
        assert chart["paths"] > 5 and chart["texts"] > 3, key
    assert len(found["sparklines"]) >= 2 and min(found["sparklines"]) > 40  # the visible ones (not passed-in)


def test_the_screenshot_shows_a_drawn_page(browser):
    from PIL import Image

    image = Image.open(io.BytesIO(browser.screenshot)).convert("RGB")
    assert image.width == 1280 and image.height > 1000
    colours = image.resize((128, 170)).getcolors(maxcolors=1 << 16)
    assert colours is not None and len(colours) > 50  # text, tables and charts, not a blank page
    target = os.environ.get("R9700CTL_SCREENSHOT")
    if target:
        Path(target).write_bytes(browser.screenshot)


def test_a_node_without_a_report_is_shown_with_its_reason(tmp_path):
    document = fleet({"node1": node("node1", sick=False)})
    document["nodes"].append({"host": "ghost", "status": "UNREACHABLE", "report": None, "error": "timed out"})
    text = render_html(copy.deepcopy(document))
    assert text.index('id="node-ghost"') < text.index('id="node-node1"')  # ERROR sorts before PASS
    assert "UNREACHABLE: timed out" in text


def test_a_document_that_judged_nothing_is_not_shown_as_passed():
    """No status and no node: nothing was judged, so the page never says PASS (issue 9 item 7)."""
    from r9700ctl.report.html import render

    page = render({"schema": "r9700ctl.validate-fleet/1", "nodes": []})
    assert "<title>r9700ctl validate: INCONCLUSIVE</title>" in page
