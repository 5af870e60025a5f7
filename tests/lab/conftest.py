"""Fixtures for tests against real lab nodes (root, namespaces, sshd): `lab` and `make_lab`.

Every test under tests/lab/ is marked `lab`. The fixtures skip, with the reason, unless this runs
as root with the lab's host tools installed; R9700CTL_LAB_TESTS=0 turns them off.

    def test_something(lab):                      # the session's 2-node lab (LabInfo)
        assert lab.ssh("node1", "sudo -n true").returncode == 0

    def test_special(make_lab):                   # a lab of its own, torn down after the test
        other = make_lab(nodes=1, node_options={"node1": NodeOptions(sshd=False)})
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from r9700ctl.errors import R9700Error

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.lab)


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
    """A 2-node lab for the whole session (4 stand-in GPUs per node); checked empty after down."""
    from r9700ctl.lab import down, up

    directory = _new_directory()
    info = up(directory, nodes=2)
    try:
        yield info
    finally:
        report = down(directory)  # raises R9700Error listing anything left behind
        assert report.left == []


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
    ):
        from r9700ctl.lab import up

        directory = _new_directory()
        self.made.append(directory)
        return up(
            directory, nodes=nodes, gpus=gpus, node_options=node_options, recorded=recorded, cluster=cluster
        )

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
