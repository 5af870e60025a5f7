"""A Prometheus scrape configuration for the nodes of an inventory (their node_exporters).

Each node is one static target, `ansible_host:port` (port: the host's
r9700_monitoring_node_exporter_port, else the role's default), with `instance` set to its
inventory name so queries and the Grafana dashboard say node03, not 10.0.0.13:9100. The r9700_*
metrics carry the same name in their own `node` label (the role's r9700_monitoring_node_name).
The document is a whole prometheus.yml (global + scrape_configs); its scrape_configs entry can
also be pasted into an existing one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from r9700ctl.errors import BadInput
from r9700ctl.inventory import Inventory, InventoryHost

PORT_VARIABLE = "r9700_monitoring_node_exporter_port"
DEFAULT_JOB = "r9700"


def for_inventory(
    inventory: Path, group: str, *, limit: str | None = None, job: str = DEFAULT_JOB, interval: str = "60s"
) -> str:
    """`monitoring scrape-config`: the options and the inventory checked (BadInput), then the document."""
    from r9700ctl import __version__
    from r9700ctl.inventory import load_inventory

    if not re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", interval) or not re.search(r"[1-9]", interval):
        raise BadInput(
            what=f"--interval {interval!r}: not a Prometheus duration above zero",
            hint="e.g. 15s, 1m or 1h30m",
        )
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_-]*", job):
        raise BadInput(what=f"--job-name {job!r}: use letters, digits, '_' or '-'")
    checked = load_inventory(inventory, group, limit=limit)
    return render(checked, job=job, interval=interval, version=__version__)


def default_port() -> int:
    """The role's default (roles/r9700_monitoring/defaults/main.yml: the one place it is set)."""
    from r9700ctl.paths import content_dir

    defaults = yaml.safe_load((content_dir("roles") / "r9700_monitoring/defaults/main.yml").read_text())
    return int(defaults[PORT_VARIABLE])


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def port_of(host: InventoryHost, default: int, where: str = "") -> int:
    """The host's node_exporter port as a number. The inventory check has judged a number's range;
    a Jinja template it leaves to Ansible, which this command does not run: refused here."""
    value = host.vars.get(PORT_VARIABLE)
    if value in (None, ""):
        return default
    try:
        return int(str(value))
    except ValueError:
        raise BadInput(
            what=f"{host.name}: {PORT_VARIABLE}={value!r} is not a port number "
            "(scrape-config reads the inventory without templating it)",
            where=where,
            hint=f"set {PORT_VARIABLE} to the port itself, e.g. 9100",
        ) from None


def scrape_config(inventory: Inventory, *, job: str = DEFAULT_JOB, interval: str = "60s") -> dict[str, Any]:
    port = default_port()
    static = [
        {
            "targets": [f"{_bracketed(host.address)}:{port_of(host, port, str(inventory.path))}"],
            "labels": {"instance": host.name},
        }
        for host in inventory.hosts
    ]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": job, "scrape_interval": interval, "static_configs": static}],
    }


def render(inventory: Inventory, *, job: str = DEFAULT_JOB, interval: str = "60s", version: str = "") -> str:
    header = (
        f"# Prometheus scrape configuration for group '{inventory.group}' of {Path(inventory.path).name}"
        f" ({len(inventory.hosts)} node(s)), written by r9700ctl {version}.\n"
        "# node_exporter on each node serves the r9700_* metrics of the r9700ctl-monitoring timer\n"
        "# (provision with r9700_monitoring_enabled: true). Use as prometheus.yml, or copy the\n"
        "# scrape_configs entry into yours. Dashboard: templates/grafana/r9700-fleet.json.\n"
    )
    return header + yaml.safe_dump(scrape_config(inventory, job=job, interval=interval), sort_keys=False)
