"""The node package (r9700ctl/agent/) runs on nodes that have Python and nothing of the controller.

Issue 20 item 6: code that runs on a node lived in five places (the agent, nodefacts.py fed
through stdin, monitoring/node.py, role files without a .py suffix, a role's library module)
and read sysfs three times. It is one package now, every file a linted .py: this test holds
each of its modules to the standard library, r9700ctl itself (its version) and the package; a
third-party module only where the node provides it, named here with why. The imports are read
from the source, wherever they stand (a lazy import runs on the node too).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import r9700ctl.agent

PACKAGE = Path(r9700ctl.agent.__file__).parent
# Third-party modules a node provides, and the modules allowed to import them (lazily).
NODE_PROVIDED = {
    # PyTorch: the GPU work, in the watchdog's children only (the ROCm image, or the host's torch),
    # and validate --cluster's torchrun worker.
    "torch": {"gpus.py", "watchdog.py", "kernels/", "cluster/torchinfo.py", "cluster/worker.py"},
    # NVML bindings for NVIDIA power readings: present beside torch's CUDA builds.
    "pynvml": {"kernels/sampler.py"},
    # python3-prometheus-client: installed by r9700_monitoring for the textfile writer.
    "prometheus_client": {"metrics.py", "monitor.py"},
}


def foreign_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if name == "r9700ctl" or name.startswith("r9700ctl.agent"):
                continue
            found.append(name)
    return found


def allowed(name: str, relative: str) -> bool:
    places = NODE_PROVIDED.get(name.split(".")[0], set())
    return any(relative == place or (place.endswith("/") and relative.startswith(place)) for place in places)


def test_every_node_module_imports_only_the_stdlib_the_package_and_what_the_node_provides():
    bad = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in foreign_imports(path)
        if not allowed(name, path.relative_to(PACKAGE).as_posix())
    ]
    assert bad == []


def test_the_scan_catches_a_controller_import(tmp_path):
    """The scan itself: the controller (r9700ctl.preflight) and a library (yaml) are foreign."""
    source = tmp_path / "m.py"
    source.write_text("import yaml\nfrom r9700ctl.preflight import judge\nfrom r9700ctl.agent import sysfs\n")
    assert foreign_imports(source) == ["yaml", "r9700ctl.preflight"]


def test_no_role_carries_python_of_its_own_to_run_on_a_node():
    """A role's node-side program is a module of the package, not a file of its own (ruff and the
    duplicates tool saw no role file without a .py suffix, nor a library module)."""
    roles = PACKAGE.parents[1] / "roles"
    scripts = [
        str(path.relative_to(roles))
        for folder in ("files", "library")
        for path in sorted(roles.glob(f"*/{folder}/*"))
        if (path.is_file() and path.read_bytes().startswith(b"#!") and b"python" in path.read_bytes()[:40])
        or path.suffix == ".py"
    ]
    assert scripts == []
