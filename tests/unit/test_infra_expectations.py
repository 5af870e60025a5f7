"""The testinfra suite (tests/infra) holds a node to the manifest, not to the node's own state file.

The role writes /etc/r9700ctl/state.json from what it resolved and from dpkg-query, so a node
with the wrong ROCm installed has a state file that agrees with it. The suite's package and
repository checks must still fail such a node: here they run, as `r9700ctl verify` runs them, on a
stand-in host object that answers like a node (file contents, `apt-cache policy`, dpkg versions).
The same checks pass the right node, so a failure below is the expectation, not a broken stand-in.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

INFRA = Path(__file__).resolve().parents[1] / "infra"
MIRROR = "http://10.213.0.1:8080"
# Versions as AMD's repositories name them (r9700ctl/lab/standins.py cites the recorded ones).
VERSIONS = {
    "7.1.1": ("7.1.1.70101-38~24.04", "1:6.16.6.30200100-2255209.24.04"),
    "7.2.3": ("7.2.3.70203-90~24.04", "1:6.16.13.30300300-2327507.24.04"),
}
DRIVER_PATH = {"7.1.1": "amdgpu/30.20.1/ubuntu", "7.2.3": "amdgpu/30.30.3/ubuntu"}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"infra_{name}", INFRA / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    with warnings.catch_warnings():  # the suite's own marks (runtime) are registered by its pytest.ini
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


conftest, packages, repositories = load("conftest"), load("test_packages"), load("test_repositories")


def policy(package: str, version: str, path: str) -> str:
    """`apt-cache policy PACKAGE` of an installed package, in apt's layout (the recorded one of
    tests/unit/test_preflight.py: ' *** VERSION PRIORITY', then its sources)."""
    return (
        f"{package}:\n  Installed: {version}\n  Candidate: {version}\n  Version table:\n"
        f" *** {version} 600\n        600 {MIRROR}/{path} noble/main amd64 Packages\n"
        "        100 /var/lib/dpkg/status\n"
    )


def sources(path: str) -> str:
    return (
        f"Types: deb\nURIs: {MIRROR}/{path}\nSuites: noble\nComponents: main\n"
        "Architectures: amd64\nSigned-By: /etc/apt/keyrings/rocm.gpg\n"
    )


@dataclass
class Node:
    """A stand-in for testinfra's host: an Ubuntu 24.04 node with ROCm `release` installed."""

    release: str
    files: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rocm, driver = VERSIONS[self.release]
        self.versions = {"rocm": rocm, "rocm-core": rocm, "amdgpu-dkms": driver}
        rocm_path, driver_path = f"rocm/apt/{self.release}", DRIVER_PATH[self.release]
        for package, path in (("rocm", rocm_path), ("rocm-core", rocm_path), ("amdgpu-dkms", driver_path)):
            self.commands[f"apt-cache policy {package}"] = policy(package, self.versions[package], path)
        self.files = {
            "/etc/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\n',
            "/etc/apt/sources.list.d/rocm.sources": sources(rocm_path),
            "/etc/apt/sources.list.d/amdgpu.sources": sources(driver_path),
            "/etc/apt/sources.list.d/rocm-graphics.sources": sources(f"graphics/{self.release}/ubuntu"),
        }
        # What r9700_lifecycle writes from what it resolved and from dpkg-query: it agrees with the node.
        self.files[conftest.STATE_FILE] = json.dumps(
            {
                "schema": "r9700ctl.state/1",
                "rocm_version": self.release,
                "suite": "noble",
                "driver_source": "dkms",
                "rocm_repo_path": rocm_path,
                "amdgpu_repo_path": driver_path,
                "graphics_repo_path": f"graphics/{self.release}/ubuntu",
                "packages": ["rocm"],
                "installed": dict(self.versions),
            }
        )

    def file(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(exists=path in self.files, content_string=self.files.get(path, ""))

    def run(self, command: str) -> SimpleNamespace:
        return SimpleNamespace(rc=0, stdout=self.commands.get(command, ""), stderr="")

    def package(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(is_installed=name in self.versions, version=self.versions.get(name, ""))


def expectations(host: Node, pinned: str) -> Any:
    """The suite's `node` fixture for this host, with an inventory that pins `pinned`."""
    problems: list[str] = []
    return conftest.Node(
        name="node1",
        state=conftest._read_json(host, conftest.STATE_FILE, problems),
        record={},
        inventory={"r9700_rocm_version": pinned, "r9700_repo_base_url": MIRROR},
        defaults=conftest.role_defaults(),
        manifest=conftest.manifest_raw(),
        os_key=conftest.os_key_of(host),
        problems=problems,
    )


CHECKS = [
    pytest.param(
        lambda h, n: packages.test_installed_version_comes_from_the_pinned_repository(h, n, "core"), id="core"
    ),
    pytest.param(
        lambda h, n: packages.test_installed_version_comes_from_the_pinned_repository(h, n, "driver"),
        id="driver",
    ),
    pytest.param(packages.test_rocm_core_is_the_resolved_release, id="release"),
    pytest.param(
        lambda h, n: packages.test_requested_meta_packages_are_installed_at_the_release(h, n, "rocm"),
        id="rocm",
    ),
    pytest.param(repositories.test_rocm_source_points_at_the_resolved_release, id="rocm.sources"),
    pytest.param(repositories.test_amdgpu_source_points_at_the_manifests_driver, id="amdgpu.sources"),
    pytest.param(
        repositories.test_graphics_source_is_there_exactly_for_releases_that_have_one, id="graphics"
    ),
]


@pytest.mark.parametrize("check", CHECKS)
def test_a_node_at_the_pinned_release_passes(check):
    host = Node("7.1.1")
    check(host, expectations(host, "7.1.1"))


@pytest.mark.parametrize("check", CHECKS)
def test_a_node_at_another_release_fails_although_its_state_file_agrees_with_it(check):
    """The inventory pins 7.1.1; the node has 7.2.3 and a state file that records 7.2.3 throughout."""
    host = Node("7.2.3")
    with pytest.raises(AssertionError, match=r"7\.2\.3|30\.30\.3"):
        check(host, expectations(host, "7.1.1"))


def test_with_auto_the_release_is_the_recorded_choice_and_everything_else_comes_from_the_manifest():
    """`r9700_rocm_version: auto`: only the release preflight chose is read from state.json; a state file
    naming a release the manifest does not have fails the node, it does not become the expectation."""
    host = Node("7.1.1")
    node = expectations(host, "auto")
    assert (node.release.version, node.release.amdgpu_repo_path, node.suite) == (
        "7.1.1",
        "amdgpu/30.20.1/ubuntu",
        "noble",
    )
    state = json.loads(host.files[conftest.STATE_FILE])
    host.files[conftest.STATE_FILE] = json.dumps({**state, "rocm_version": "7.1.9"})
    with pytest.raises(pytest.fail.Exception, match=r"ROCm 7\.1\.9 is not a manifest release"):
        _ = expectations(host, "auto").release
