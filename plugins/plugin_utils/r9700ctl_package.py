"""The r9700ctl Python package, which this collection's controller-side plugins import.

r9700_preflight's action and the r9700_power and r9700_containers filters judge with r9700ctl's
code (preflight, the manifest, the environment list, the power budget): one judge for the CLI and
for a plain ansible-playbook run. The package must be importable by the Python that runs Ansible,
at the version requirements.txt pins (the collection's own); an execution environment built with
ansible-builder gets it from meta/execution-environment.yml. When it is missing, broken or of
another version, the plugin fails with one line that names the package and the fix.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

PACKAGE = "r9700ctl"
COLLECTION = "r9700ctl.nodes"
# The collection's root: plugins/plugin_utils/<this file>.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def required_version(root: str = _ROOT) -> str | None:
    """The version requirements.txt pins r9700ctl at (`r9700ctl==X`); None when it pins none."""
    try:
        with open(os.path.join(root, "requirements.txt"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        pin = [part.strip() for part in line.split("#", 1)[0].split("==")]
        if len(pin) == 2 and pin[0] == PACKAGE and pin[1]:
            return pin[1]
    return None


def install_hint(version: str | None) -> str:
    pinned = f"{PACKAGE}=={version}" if version else PACKAGE
    return (
        f"pip install {pinned} into the Python that runs Ansible ({sys.executable}); "
        "an execution environment gets it from the collection's requirements.txt"
    )


def require(error: type[Exception], *modules: str) -> list[ModuleType]:
    """Import r9700ctl's `modules` (dotted names); raise `error` with one line when that fails.

    The line names the package, the version the collection needs, the Python that lacks it and
    what Python said; never a traceback.
    """
    wanted = required_version()
    try:
        package = importlib.import_module(PACKAGE)
        imported = [importlib.import_module(name) for name in modules]
    except ImportError as exc:
        raise error(
            f"{COLLECTION} needs the Python package {PACKAGE}"
            f"{' ' + wanted if wanted else ''} on the controller, and importing it failed "
            f"({exc}): {install_hint(wanted)}"
        ) from None
    found = getattr(package, "__version__", "?")
    if wanted and found != wanted:
        raise error(
            f"{COLLECTION} {wanted} needs the Python package {PACKAGE} {wanted} on the controller, "
            f"and {sys.executable} has {PACKAGE} {found}: {install_hint(wanted)}"
        )
    return imported


def preload(
    modules: tuple[str, ...], stdin_scripts: tuple[str, ...] = (), calls: tuple[str, ...] = ()
) -> None:
    """Import r9700ctl's `modules`, make the node scripts `stdin_scripts` (agentpack) and fill the
    caches of `calls` ("module:function", no arguments) now, where the plugin is loaded: for an
    action plugin that is ansible-playbook's own process (its strategy loads the plugin before it
    forks a worker per host), so every host's worker finds them ready instead of doing it again
    (about 0.1 s of CPU per host and task). Any failure is left to require(), which says it in
    one line when the plugin runs."""
    try:
        for name in modules:
            importlib.import_module(name)
        if stdin_scripts:
            agentpack = importlib.import_module(f"{PACKAGE}.agentpack")
            for name in stdin_scripts:
                agentpack.stdin_script(name)
        for call in calls:
            module, function = call.split(":")
            getattr(importlib.import_module(module), function)()
    except Exception:  # pylint: disable=broad-exception-caught  # require() reports it
        return
