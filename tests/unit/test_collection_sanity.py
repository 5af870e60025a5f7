"""`ansible-test sanity` passes on the collection r9700ctl.nodes as ansible-galaxy builds it (issue 24).

ansible-test needs the collection under ansible_collections/<namespace>/<name>/: the test builds the
tarball and installs it into a temporary collections path, copies tests/sanity/ignore.txt in as the
ignore file of the installed ansible-core (tests/sanity/ignore-<major.minor>.txt; one exception per
line with its reason after '#', no comment-only lines), and runs every sanity test that applies to
this collection with this Python.

Each sanity test runs in a virtual environment ansible-test makes with its pinned requirements
(pylint, voluptuous, yamllint ...) from the package index; ansible-test's pip bootstrap script
comes from a host outside the registries, so tests/sanity/get_pip_standin.py stands in for it. The
environments are kept in a cache of this user's (~/.cache/r9700ctl-tests/ansible-test): the first
run installs them (minutes), later runs reuse them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import ansible
import collection_plugins
import pytest

SANITY = Path(__file__).resolve().parents[1] / "sanity"


def ansible_test_home() -> Path:
    """A HOME for ansible-test of this user's own (its ~/.ansible/test keeps the environments)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "r9700ctl-tests" / "ansible-test"
    from ansible_test._internal.python_requirements import get_venv_packages

    pip = get_venv_packages(SimpleNamespace(version=f"{sys.version_info[0]}.{sys.version_info[1]}"))["pip"]
    bootstrap = home / ".ansible" / "test" / "cache" / f"get_pip_{pip.replace('.', '_')}.py"
    bootstrap.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SANITY / "get_pip_standin.py", bootstrap)
    return home


@pytest.mark.timeout(1800)
def test_ansible_test_sanity_passes_on_the_built_collection(tmp_path: Path) -> None:
    """validate-modules, pylint, pep8, yamllint, import, ansible-doc, action-plugin-docs, shebang and
    the rest of `ansible-test sanity --list-tests`; the exceptions, each with its reason, are in
    tests/sanity/ignore.txt."""
    collection = collection_plugins.install(collection_plugins.build(tmp_path / "built"), tmp_path / "c")
    core = ".".join(ansible.__version__.split(".")[:2])
    (collection / "tests" / "sanity").mkdir(parents=True)
    shutil.copyfile(SANITY / "ignore.txt", collection / "tests" / "sanity" / f"ignore-{core}.txt")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    done = subprocess.run(
        [collection_plugins.ansible_tool("ansible-test"), "sanity", "--python", python, "--color", "no"],
        cwd=collection,
        env={**os.environ, "HOME": str(ansible_test_home())},
        capture_output=True,
        text=True,
        timeout=1700,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert 'Running sanity test "validate-modules"' in output and 'Running sanity test "pylint"' in output
