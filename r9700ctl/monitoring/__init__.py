"""Monitoring: r9700_* metrics for Prometheus (node_exporter's textfile collector), scrape config.

`metrics` is the one definition of every metric name (validate --prom, the node timer and the
Grafana dashboard all go through it); `node` is the timer's entry point ON a node (standard
library + prometheus_client, shipped with the agent by the r9700_monitoring role); `scrape`
prints a Prometheus scrape configuration for an inventory. Kept free of imports here: the
node side has neither Ansible nor rich.
"""

# What the r9700_monitoring role ships besides the agent (paths under the package).
NODE_FILES = ("monitoring/__init__.py", "monitoring/metrics.py", "monitoring/node.py")
