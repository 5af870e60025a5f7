#!/usr/bin/python
"""Documentation of the action r9700ctl.nodes.r9700_converged (plugins/action/r9700_converged.py).

The action runs on the controller; this file only documents it, as Ansible's documentation and
ansible-test expect of an action plugin (a module of the same name carries its DOCUMENTATION).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: r9700_converged
short_description: Tell whether an R9700 node is as the last complete provision left it
description:
  - C(mode=check) computes the key of what this run is asked to do (a hash of the collection, the
    r9700ctl package, every r9700_* value of the host, the facts the roles read and the run's scope)
    and compares the node with the record the last complete provision wrote in
    C(/etc/r9700ctl/converged.json) (one Python script sent on standard input). It sets the host fact
    C(r9700_converged) with C(converged), C(reason) (one line) and C(facts) (what that run reported).
  - C(mode=record) writes that record at the end of a complete run; changed only when it differs.
  - Compared on the node, from the record, are every managed file and directory (sha256, mode, owner),
    r9700ctl's own directories, the package and group databases, the kernel and its command line,
    DKMS's builds, the units where systemd runs, dockerd and the pinned image.
  - Runs on the controller and needs the Python package r9700ctl there, at the collection's version.
options:
  mode:
    description:
      - C(check) before the roles run, C(record) after they ran.
    type: str
    choices: [check, record]
    required: true
  managed:
    description:
      - What provision manages (r9700ctl.nodes.r9700_lifecycle's list of files, dirs, owned_dirs, units
        and packages).
    type: dict
    required: true
  image:
    description:
      - With C(mode=record), the pinned container image whose id is recorded (where docker runs).
    type: str
    default: ""
  facts:
    description:
      - With C(mode=record), the facts a converged run reports again (r9700_versions and
        r9700_containers_status).
    type: dict
    default: {}
  python:
    description:
      - The node's Python that runs the script (C(auto) keywords mean C(python3)).
    type: str
    default: python3
notes:
  - Supports check mode (check only reads; record writes nothing in check mode).
  - Used by the role r9700ctl.nodes.r9700_lifecycle (steps converged and state).
requirements:
  - the Python package r9700ctl on the controller, at the collection's version
author: r9700ctl maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Ask whether the node is as the last complete provision left it
  r9700ctl.nodes.r9700_converged:
    mode: check
    managed: {files: [/etc/profile.d/r9700.sh], dirs: [], owned_dirs: [/etc/r9700ctl], units: []}
"""

RETURN = r"""
changed:
  description: With C(mode=record), whether the record changed.
  type: bool
  returned: always
ansible_facts:
  description: With C(mode=check), C(r9700_converged) (C(converged), C(reason), C(facts)).
  type: dict
  returned: when mode is check
"""
