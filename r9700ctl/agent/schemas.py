"""Every `schema` id r9700ctl writes or reads, in one place (standard library only).

A document's `schema` names its layout and version: within a version, fields are only added,
never renamed (docs/architecture.md, Contracts). The ids live here, in the node package, so the
controller and the code that runs on a node (which never imports the controller) read the same
constants; tests/unit/test_schemas.py keeps any other module from spelling one out again.

Documents the roles write with Ansible (YAML cannot import this module) carry their ids in
the role; ROLE_WRITTEN names them so the test can hold the roles to these values.
"""

from __future__ import annotations

# Written by the agent on a node, read by the controller (history, formats, fleet, baseline).
VALIDATE = "r9700ctl.validate/1"
# The controller's documents, one per command (`--json`).
VALIDATE_FLEET = "r9700ctl.validate-fleet/1"
VALIDATE_CLUSTER = "r9700ctl.validate-cluster/1"
PROVISION = "r9700ctl.provision/1"
DOCTOR = "r9700ctl.doctor/1"
COLLECT = "r9700ctl.collect/1"
VERIFY = "r9700ctl.verify/1"
HISTORY = "r9700ctl.history/1"
KNOWN_ISSUES = "r9700ctl.known-issues/1"
LIFECYCLE = "r9700ctl.lifecycle/1"
UNINSTALL = "r9700ctl.uninstall/1"
LAB = "r9700ctl.lab/1"
LAB_STATUS = "r9700ctl.lab.status/1"
# Node side: facts for preflight, the power policy file, the record kept before provision.
NODEFACTS = "r9700ctl.nodefacts/1"
POWER = "r9700ctl.power/1"
BEFORE = "r9700ctl.before/1"
CONVERGED = "r9700ctl.converged/1"  # /etc/r9700ctl/converged.json (r9700ctl/agent/converged.py)
# Data files shipped in r9700ctl/data.
MANIFEST = "r9700ctl.manifest/1"
THRESHOLDS = "r9700ctl.thresholds/1"
CODES = "r9700ctl.codes/1"

# Written by roles in YAML/Jinja (role file -> id); a test compares them with the files.
ROLE_WRITTEN = {
    "roles/r9700_node_record/tasks/main.yml": "r9700ctl.node/1",
    "roles/r9700_lifecycle/tasks/state.yml": "r9700ctl.state/1",
    "roles/r9700_collect/templates/collect.json.j2": "r9700ctl.collect-node/1",
}
