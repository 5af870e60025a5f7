"""The node package's programs, under the names the roles give them: one file, `r9700-node`.

r9700ctl.agentpack.node_program() packs the package as one executable zip (a shebang, then a zip
with __main__.py: Python runs such a file, https://docs.python.org/3/library/zipapp.html) whose
__main__ calls `main` here. Installed as /usr/local/bin/r9700-run or /usr/local/sbin/r9700-power-cap
it runs that program (its file name picks it, as busybox does); run as
`python3 r9700-node PROGRAM ARGS`, as ansible.builtin.script runs it, it runs PROGRAM.
"""

from __future__ import annotations

import importlib
import os
import sys

# Program name -> the module whose main(args) it runs.
PROGRAMS = {
    "r9700-run": "r9700ctl.agent.container_run",
    "r9700-power-cap": "r9700ctl.agent.power_cap",
    "r9700-lifecycle": "r9700ctl.agent.node_lifecycle",
    "r9700-pci-devices": "r9700ctl.agent.pci_devices",
}
EXIT_USAGE = 64


def main(argv: list[str]) -> int:
    name, args = os.path.basename(argv[0]) if argv else "", argv[1:]
    if name not in PROGRAMS:
        if not args or args[0] not in PROGRAMS:
            print(f"usage: r9700-node PROGRAM [ARGS...]; programs: {', '.join(PROGRAMS)}", file=sys.stderr)
            return EXIT_USAGE
        name, args = args[0], args[1:]
    return int(importlib.import_module(PROGRAMS[name]).main(args) or 0)
