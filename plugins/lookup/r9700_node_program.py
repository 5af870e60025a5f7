"""Lookup r9700ctl.nodes.r9700_node_program: the node program, packed on the controller for this run.

The roles run what they run on a node from one file, r9700ctl's node program (r9700-node:
r9700-lifecycle, r9700-pci-devices, r9700-run, r9700-power-cap), which r9700ctl packs for each of
its runs and passes as the extra var r9700_node_program. A site's own ansible-playbook run has no
such extra var: the collection's playbooks set r9700_node_program to this lookup as a play
variable, which r9700ctl's extra var outranks, so both runs install the same bytes.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: r9700_node_program
author: r9700ctl maintainers (@r9700ctl)
short_description: The controller path of r9700ctl's node program, packed for this run
description:
  - Packs the node package of the Python package r9700ctl (C(r9700ctl.agentpack.node_program)) as one
    executable file, C(r9700-node), and returns its path on the controller. The roles run it on the
    nodes and install it under their programs' names.
  - The file lies in this Ansible run's local temporary directory (C(DEFAULT_LOCAL_TMP)), packed once
    and removed when the run ends. It is byte-identical for the same r9700ctl, so a role that installs
    it changes nothing when nothing changed.
  - Needs the Python package r9700ctl on the controller, at the collection's version (the collection's
    requirements.txt); without it the lookup fails with one line naming the package and the fix.
"""

EXAMPLES = r"""
- name: Where the node program was packed
  ansible.builtin.debug:
    msg: "{{ lookup('r9700ctl.nodes.r9700_node_program') }}"
"""

RETURN = r"""
_raw:
  description: The absolute controller path of the node program (one item).
  type: list
  elements: path
"""

import os  # noqa: E402  (the documentation comes first: ansible-test's validate-modules)
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible import constants  # noqa: E402
from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402
from ansible_collections.r9700ctl.nodes.plugins.plugin_utils.r9700ctl_package import require  # noqa: E402

FILE_NAME = "r9700-node"


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        (agentpack,) = require(AnsibleLookupError, "r9700ctl.agentpack")
        # Ansible's per-run local directory: made before the workers fork (they share it), removed
        # when ansible-playbook exits, as its own module cache there is (ansiballz_cache).
        directory = constants.DEFAULT_LOCAL_TMP
        target = os.path.join(directory, FILE_NAME)
        if not os.path.isfile(target):
            # Forks may pack at once: each packs in a directory of its own, then renames into place
            # (the same bytes, so whichever rename lands last changes nothing).
            scratch = tempfile.mkdtemp(prefix="r9700-node-", dir=directory)
            packed = agentpack.node_program(Path(scratch) / FILE_NAME)
            os.replace(packed, target)
            os.rmdir(scratch)
        return [target]
