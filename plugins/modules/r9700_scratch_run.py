#!/usr/bin/python
"""Documentation of the action r9700ctl.nodes.r9700_scratch_run (plugins/action/r9700_scratch_run.py).

The action runs on the controller; this file only documents it, as Ansible's documentation and
ansible-test expect of an action plugin (a module of the same name carries its DOCUMENTATION).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_scratch_run
short_description: Run a program in an r9700ctl scratch directory on a node and wait for it
description:
  - Runs I(argv) in the scratch directory r9700ctl.nodes.r9700_scratch_stage made, with I(env) added to
    the environment, as one shell command over the task's connection, and returns its exit status and
    output as the command module does.
  - A non-zero exit status fails the task, as with the command module (C(failed_when) decides otherwise);
    put the wall clock in I(argv) (C(timeout T ...)) and the task's C(timeout) keyword as the
    controller's backstop.
  - Used by the role r9700ctl.nodes.r9700_validate.
options:
  path:
    description:
      - The scratch directory (the C(path) r9700ctl.nodes.r9700_scratch_stage returned).
    type: str
    required: true
  argv:
    description:
      - The program and its arguments, each quoted for the shell.
    type: list
    elements: str
    required: true
  env:
    description:
      - Environment variables to set for the program.
    type: dict
    default: {}
notes:
  - Does not support check mode.
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Run the agent in the scratch directory
  r9700ctl.nodes.r9700_scratch_run:
    path: "{{ scratch.path }}"
    argv: [timeout, "600", python3, -m, r9700ctl.agent, --level, config]
    env:
      PYTHONPATH: "{{ scratch.path }}"
  timeout: 690
  register: agent
"""

RETURN = r"""
rc:
  description: The program's exit status.
  type: int
  returned: always
stdout:
  description: What it wrote on standard output.
  type: str
  returned: always
stderr:
  description: What it wrote on standard error.
  type: str
  returned: always
stdout_lines:
  description: I(stdout) split into lines.
  type: list
  elements: str
  returned: always
stderr_lines:
  description: I(stderr) split into lines.
  type: list
  elements: str
  returned: always
msg:
  description: C(non-zero return code) where I(rc) is not 0, else empty.
  type: str
  returned: always
"""
