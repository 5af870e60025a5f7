#!/usr/bin/python
"""Documentation of the action r9700ctl.nodes.r9700_scratch_collect (plugins/action/r9700_scratch_collect.py).

The action runs on the controller; this file only documents it, as Ansible's documentation and
ansible-test expect of an action plugin (a module of the same name carries its DOCUMENTATION).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_scratch_collect
short_description: Fetch an r9700ctl scratch directory's results to the controller and remove it
description:
  - Writes I(record) as JSON to I(record_dest) on the controller, fetches each of I(outputs) that
    exists in the node's scratch directory to its I(dest) on the controller (written whole, then
    renamed), copies I(keep.src) to I(keep.dest) on the node (mode 0644, its directory 0755) and
    removes the directory.
  - One shell command over the task's connection; no Python runs on the node.
  - Only a directory r9700ctl.nodes.r9700_scratch_stage made (C(r9700ctl-NAME.) and ten characters)
    is accepted; a directory already gone is not an error.
options:
  path:
    description:
      - The scratch directory (the C(path) r9700ctl.nodes.r9700_scratch_stage returned).
    type: str
    required: true
  outputs:
    description:
      - Files of the directory to fetch; one that is not there is left out.
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description: A plain file name in the directory.
        type: str
        required: true
      dest:
        description: Where it is written on the controller.
        type: path
        required: true
  names:
    description:
      - Plain file names of the directory to fetch into I(into) on the controller; one that is not
        there is left out.
    type: list
    elements: str
    default: []
  into:
    description:
      - The controller directory I(names) are fetched into.
    type: path
  record:
    description:
      - What to write as JSON to I(record_dest) on the controller (the agent's exit status, output tail).
    type: dict
  record_dest:
    description:
      - The controller path of I(record); given with I(record).
    type: path
  keep:
    description:
      - A file of the directory to copy to an absolute path on the node before it is removed, when it exists.
    type: dict
    suboptions:
      src:
        description: A plain file name in the directory.
        type: str
        required: true
      dest:
        description: The absolute path on the node.
        type: str
        required: true
  remove:
    description:
      - Whether the directory is removed.
    type: bool
    default: true
notes:
  - Does not support check mode.
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Fetch the report and remove the scratch directory
  r9700ctl.nodes.r9700_scratch_collect:
    path: "{{ scratch.path }}"
    record: {rc: 0}
    record_dest: /var/tmp/reports/node1.agent.json
    outputs:
      - {src: report.json, dest: /var/tmp/reports/node1.json}
"""

RETURN = r"""
fetched:
  description: The outputs that were there and are now on the controller.
  type: list
  elements: str
  returned: success
removed:
  description: The directory removed, or empty with I(remove=false).
  type: str
  returned: success
"""
