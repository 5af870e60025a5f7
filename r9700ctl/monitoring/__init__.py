"""Monitoring, the controller's side: `scrape` prints a Prometheus scrape configuration for an
inventory's node_exporters.

What runs on a node lives in the node package: r9700ctl/agent/metrics.py is the one definition
of every r9700_* metric (validate --prom, the node timer and the Grafana dashboard all go
through it) and r9700ctl/agent/monitor.py is the r9700ctl-monitoring timer's job, shipped with
the agent's archive by the r9700_monitoring role.
"""
