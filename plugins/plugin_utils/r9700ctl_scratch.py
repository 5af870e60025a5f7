"""What the scratch-directory actions (r9700_scratch_stage, _run, _collect) share.

The directory's name, which the actions that run in it or remove it check, and how files come
back over a shell command: base64 after a marker line. A command sent without standard-input data
under become runs on a terminal (ansible-core's ssh connection asks for one with -tt), which
merges standard error into standard output and turns line ends into CR LF; base64 survives both.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import shlex

# The prefix a scratch directory's name starts with: r9700ctl-NAME. (whose directory it is).
NAME_PREFIX = r"r9700ctl[-.][A-Za-z0-9-]*[.]"
# mktemp -d under an absolute temporary directory: the prefix and ten random characters.
SCRATCH_PATH = re.compile(rf"^/(?:[^/\0]+/)*{NAME_PREFIX}[A-Za-z0-9]{{10}}$")
# A file of the directory, named by the stage (files) or the collect step (outputs, names, keep).
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MARK = "== r9700ctl output "


def is_scratch(path: str) -> bool:
    """True for a directory r9700_scratch_stage makes; the others refuse anything else."""
    return bool(SCRATCH_PATH.match(path)) and "/../" not in path and "/./" not in path


def print_file(name: str, label: str | None = None) -> str:
    """Shell: the file `name` (relative to the working directory) after its marker, when it exists."""
    quoted = shlex.quote(name)
    marker = shlex.quote(MARK + (label or name))
    return f'if [ -f {quoted} ]; then printf "%s\\n" {marker}; base64 -w0 < {quoted} || exit 4; echo; fi'


def printed_files(stdout: str) -> dict[str, bytes]:
    """label -> content of what print_file printed; lines that are not its own are passed over."""
    found: dict[str, bytes] = {}
    name = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith(MARK):
            name = line[len(MARK) :]
        elif name is not None:
            # A line that is not the output's (sudo's lecture, a shell's message) is not taken for it.
            with contextlib.suppress(binascii.Error, ValueError):
                found[name] = base64.b64decode(line, validate=True)
            name = None
    return found
