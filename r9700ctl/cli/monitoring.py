"""`r9700ctl monitoring`: what Prometheus and Grafana need to watch the fleet."""

from __future__ import annotations

from pathlib import Path

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.options import group_option, inventory_argument, limit_option
from r9700ctl.cli.output import Output, check_output_path, file_option, write_output


@click.group()
def monitoring() -> None:
    """Prometheus and Grafana for the fleet's GPU verdicts and state.

    \b
    On the nodes, `r9700ctl provision INVENTORY -e r9700_monitoring_enabled=true` installs
    prometheus-node-exporter and the r9700ctl-monitoring timer, which runs the agent's config
    level every r9700_monitoring_interval (default 15min) and writes r9700_* metrics into
    node_exporter's textfile directory: the verdict of every check, PCIe link generation and
    width, temperatures, clocks, power, VRAM, the last run's time, and the latest P2P and
    all-reduce figures of `r9700ctl validate INVENTORY`. Details: docs/monitoring.md.

    \b
    Grafana dashboard: templates/grafana/r9700-fleet.json (import it; pick the Prometheus
    data source that scrapes the configuration below).

    \b
    Examples:
      r9700ctl provision inventory.ini -e r9700_monitoring_enabled=true
      r9700ctl monitoring scrape-config inventory.ini > prometheus.yml
    """


@monitoring.command("scrape-config")
@inventory_argument
@group_option
@limit_option
@click.option("--job-name", default="r9700", show_default=True, help="Prometheus job name.")
@click.option(
    "--interval",
    default="60s",
    show_default=True,
    help="Scrape interval (a Prometheus duration: 15s, 1m). The metrics change every timer run.",
)
@file_option("--output", "-o", help="Write to PATH (atomically) instead of stdout.")
@click.pass_obj
def scrape_config(
    app: Application,
    inventory: Path,
    group: str,
    limit: str | None,
    job_name: str,
    interval: str,
    output: Path | None,
) -> None:
    """Print a Prometheus scrape configuration for the node_exporters of INVENTORY's nodes.

    \b
    One target per node: its ansible_host and r9700_monitoring_node_exporter_port
    (default 9100), labelled instance=<inventory name>. The output is a whole
    prometheus.yml; its scrape_configs entry can go into an existing one.

    \b
    Examples:
      r9700ctl monitoring scrape-config inventory.ini > prometheus.yml
      r9700ctl monitoring scrape-config inventory.ini --interval 30s -o /etc/prometheus/r9700.yml
      promtool check config prometheus.yml

    \b
    Exit codes: 0 printed; 64 bad inventory or option (nothing was contacted).
    """
    from r9700ctl.monitoring.scrape import for_inventory

    out = Output(app, None)
    if output is not None:
        check_output_path("--output", output)
    text = for_inventory(inventory, group, limit=limit, job=job_name, interval=interval)
    if output is None:
        out.echo(text, nl=False)
    else:
        write_output("--output", output, text)
    out.finish(None)
