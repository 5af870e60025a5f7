"""Fixtures for tests against real lab nodes (root, namespaces, sshd).

Every test under tests/lab/ is marked `lab`. The fixtures skip, with the reason, unless this runs
as root with the lab's host tools installed; R9700CTL_LAB_TESTS=0 turns them off. One promise
each, whatever order the tests run in:

    def test_something(lab):              # the session's pristine 2-node lab: nothing provisions it,
        ...                               # a test may only run what changes nothing on it

    def test_after(provisioned_lab):      # the session's 2-node lab after ONE cold provision
        provisioned_lab.first             # (that run's output and report); tests keep it as it is

    def test_special(make_lab):           # a lab of its own, torn down after the test
        other = make_lab(nodes=1, node_options={"node1": NodeOptions(sshd=False)})
        ready = make_lab(nodes=2, provisioned="6.4.1", gpus=1)   # nodes that start provisioned

A node that starts provisioned is a snapshot of a node of a lab of the same shape after one cold
`r9700ctl provision` with that release (r9700ctl/lab/snapshot.py), made when this checkout has
none yet. The tests that prove the cold provision itself (test_provision.py, the collection's
site playbook) never start from one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl

from r9700ctl.errors import R9700Error

HERE = Path(__file__).resolve().parent


# Seconds each file took in a run of the whole suite on this 2-core machine (junit times of the
# found run at a325586, 2026-12-07, three workers): the longest files start first, lab and unit alike,
# so that with several workers (`pytest -n CORES+1 --dist loadfile --no-loadscope-reorder`, as
# scripts/test.sh runs the suite: a file's tests share its module-scoped labs, so they stay on one
# worker) the short files fill the gaps at the end instead of one long file running alone there.
# Unlisted: 0, in collection order after the listed ones.
FILE_COST_S = {
    "test_lifecycle_lab.py": 524,
    "test_cluster_lab.py": 382,
    "test_provision.py": 299,
    "test_containers_lab.py": 130,
    "test_roles.py": 103,
    "test_collection_lab.py": 98,
    "test_kernel_upgrade_lab.py": 76,
    "test_power.py": 68,
    "test_faults.py": 52,
    "test_lab.py": 50,
    "test_kernels_collective.py": 49,
    "test_cluster_processes.py": 44,
    "test_monitoring_lab.py": 44,
    "test_cli_provision.py": 38,
    "test_collect.py": 32,
    "test_agent_baseline.py": 27,
    "test_roles_render.py": 27,
    "test_doctor.py": 26,
    "test_converged_play.py": 25,
    "test_collection.py": 23,
    "test_validate.py": 20,
    "test_collection_sanity.py": 18,
    "test_ansible_run.py": 18,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order: dict[int, tuple[int, int]] = {}
    for index, item in enumerate(items):
        path = Path(str(item.fspath)).resolve()
        if HERE in path.parents:
            item.add_marker(pytest.mark.lab)
        order[id(item)] = (-FILE_COST_S.get(path.name, 0), index)
    # Longest file first, each file's tests in their order (no test may depend on another file
    # having run before it: tests/lab/README.md).
    items.sort(key=lambda item: order[id(item)])


def lab_skip_reason() -> str | None:
    if os.environ.get("R9700CTL_LAB_TESTS") == "0":
        return "lab tests turned off by R9700CTL_LAB_TESTS=0"
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, mounts, sshd)"
    from r9700ctl.lab.hostcheck import missing_tools

    missing = missing_tools()
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        return f"lab tests need host tools: {', '.join(sorted(missing))} (apt-get install -y {packages})"
    return None


def _new_directory() -> Path:
    # Short on purpose: ssh control sockets live below it and a socket path holds 107 bytes.
    return Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))


@pytest.fixture(scope="session")
def lab_requirements() -> None:
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def lab(lab_requirements: None) -> Iterator:
    """A pristine 2-node lab for the whole session (4 stand-in GPUs per node); checked empty after down.

    No test provisions it or changes it: tests of what refuses or changes nothing use it."""
    from r9700ctl.lab import down, up

    directory = _new_directory()
    info = up(directory, nodes=2)
    try:
        yield info
    finally:
        report = down(directory)  # raises R9700Error listing anything left behind
        assert report.left == []


@dataclasses.dataclass(frozen=True)
class ProvisionedLab:
    """The session's provisioned lab: the LabInfo, the cold run's process and its JSON report."""

    lab: Any
    first: subprocess.CompletedProcess
    report: dict[str, Any]
    home: Path  # the state directory of that run (its artifacts under r9700ctl/runs)

    @property
    def inventory(self) -> Path:
        return self.lab.inventory


def legacy_rocm_list(lab: Any) -> str:
    """A one-line rocm.list for the release `auto` picks for a lab node, signed by another keyring
    (R17: what an earlier amdgpu-install leaves; the roles must remove it before apt reads it)."""
    from r9700ctl import known_issues, manifest

    data = manifest.load()
    choice = known_issues.auto_release(
        known_issues.issues(data),
        [("1002:7551", "gfx1201")] * lab.gpus,
        data.releases_supporting({"gfx1201"}, "debian-12"),
    )
    assert choice.release
    release = data.release(choice.release).rocm_path
    return (
        "deb [arch=amd64 signed-by=/usr/share/keyrings/some-other-rocm.gpg] "
        f"{lab.mirror_url}/rocm/apt/{release} jammy main"
    )


@pytest.fixture(scope="session")
def provisioned_lab(
    lab_requirements: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProvisionedLab]:
    """A second 2-node lab after one cold `r9700ctl provision` (auto), shared by the session.

    node2 starts with a legacy one-line rocm.list of another Signed-By (R17). Tests read the cold
    run's output and report, and run only what leaves the nodes as that run left them (verify, a
    second provision, a changed file restored by the next run)."""
    from r9700ctl.lab import down, up

    directory = _new_directory()
    info = up(directory, nodes=2)
    try:
        seeded = info.ssh(
            "node2", f"echo '{legacy_rocm_list(info)}' | sudo tee /etc/apt/sources.list.d/rocm.list"
        )
        assert seeded.returncode == 0, seeded.stderr
        home = tmp_path_factory.mktemp("provisioned")
        report = home / "first.json"
        first = r9700ctl("provision", str(info.inventory), "--json", str(report), home=home, columns=120,
                         timeout=1500)  # fmt: skip
        yield ProvisionedLab(info, first, json.loads(report.read_text()) if report.is_file() else {}, home)
    finally:
        left = down(directory)
        assert left.left == []


class _LabFactory:
    """Makes labs on demand and takes every one of them down again, failing if anything is left."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def __call__(
        self,
        nodes: int = 1,
        node_options: dict | None = None,
        gpus: int = 4,
        recorded: str | None = None,
        cluster: bool = False,
        provisioned: str | None = None,
    ):
        """provisioned: a release; every node starts as one cold provision with it left a lab of
        this shape (node options other than `provisioned` still apply)."""
        from r9700ctl.lab import provisioned as provisioned_nodes
        from r9700ctl.lab import up
        from r9700ctl.lab.node import NodeOptions

        options = dict(node_options or {})
        if provisioned:
            provisioned_nodes.ensure(provisioned, gpus, nodes)
            for index in range(1, nodes + 1):
                name = f"node{index}"
                options[name] = dataclasses.replace(options.get(name, NodeOptions()), provisioned=provisioned)
        directory = _new_directory()
        self.made.append(directory)
        return up(directory, nodes=nodes, gpus=gpus, node_options=options, recorded=recorded, cluster=cluster)

    def close(self) -> None:
        from r9700ctl.lab import down

        problems = []
        for directory in self.made:
            try:
                down(directory)
            except R9700Error as exc:
                problems.append(exc.one_line())
        assert problems == []


@pytest.fixture
def make_lab(lab_requirements: None) -> Iterator[Callable[..., object]]:
    """Factory for a lab of a test's own: make_lab(nodes=1, node_options={"node1": NodeOptions(...)}).

    Cheap (a few seconds) thanks to the root file system cache; every lab it made is taken
    down after the test, and the test fails if anything of them is left.
    """
    factory = _LabFactory()
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def make_lab_module(lab_requirements: None) -> Iterator[Callable[..., object]]:
    """Like make_lab, for labs shared by the tests of one module (taken down after the module).

    Use it for tests that change a node (install packages, write sources) so the session's
    `lab` stays as `lab up` made it for everyone else.
    """
    factory = _LabFactory()
    yield factory
    factory.close()
