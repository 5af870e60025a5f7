#!/usr/bin/python
"""Documentation of the action r9700ctl.nodes.r9700_scratch_stage (plugins/action/r9700_scratch_stage.py).

The action runs on the controller; this file only documents it, as Ansible's documentation and
ansible-test expect of an action plugin (a module of the same name carries its DOCUMENTATION).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_scratch_stage
short_description: Make a private scratch directory on a node with the r9700ctl agent unpacked in it
description:
  - Makes a directory with C(mktemp -d) in the node's temporary directory (mode 0700, owned by the user
    the task becomes), unpacks the agent archive into it from standard input with C(tar), then writes
    the given files into it (mode 0600).
  - Where the connection does not pipeline (become C(su), sudo with requiretty, pipelining off), the
    archive and the files go through Ansible's remote temporary directory instead of standard input.
  - Two shell commands over the task's connection; no Python runs on the node.
  - A directory whose unpacking failed is removed before the task fails.
  - Used by the role r9700ctl.nodes.r9700_validate; r9700ctl.nodes.r9700_scratch_collect fetches from
    the directory and removes it.
options:
  archive:
    description:
      - The agent's C(.tar.gz) on the controller (C(r9700_validate_agent_archive), which r9700ctl
        validate makes); without it the directory is left empty.
    type: path
  prefix:
    description:
      - The start of the directory's name, C(r9700ctl-NAME.); ten random characters follow.
    type: str
    default: r9700ctl-scratch.
  files:
    description:
      - File name (a plain name in the directory) to its text.
    type: dict
    default: {}
notes:
  - Does not support check mode (it makes a directory).
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Unpack the agent and a plan in a scratch directory
  r9700ctl.nodes.r9700_scratch_stage:
    archive: /var/tmp/agent.tar.gz
    prefix: r9700ctl-cluster.
    files:
      plan.json: '{"phase": "facts"}'
  register: scratch
"""

RETURN = r"""
path:
  description: The directory made on the node.
  type: str
  returned: success
  sample: /tmp/r9700ctl-cluster.Ab3dE5gH7j
"""
