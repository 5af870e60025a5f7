"""The recorded outputs themselves: each names its public source on its first line, is
listed in the README with that source, and is named as a support-bundle file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from r9700ctl.agent.parsers import BUNDLE_FILES

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"
# docs/architecture.md "Support bundle": every name a bundle may hold.
BUNDLE_NAMES = set(BUNDLE_FILES) | {"uname.txt", "lsmod.txt", "env.txt", "id.txt"}

RECORDINGS = sorted(p for p in RECORDED.glob("*/*") if p.is_file())
FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.parent != FIXTURES)


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", RECORDINGS + FIXTURE_FILES, ids=_id)
def test_the_first_line_names_a_public_source(path):
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]

    # A public thread's URL, or a tool's real output recorded in the lab (what a lab network does,
    # e.g. iperf3 between two namespaces, has no public recording: the command says how to redo it).
    assert re.match(r"# source: (https://\S+|recorded in r9700ctl's lab) \(", first), first
    assert "(" in first and first.endswith(")"), "say who posted it and on what hardware"


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_recordings_are_named_as_support_bundle_files(path):
    assert path.name in BUNDLE_NAMES


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_the_readme_lists_every_recording(path):
    readme = (RECORDED / "README.md").read_text(encoding="utf-8")

    assert f"`{path.parent.name}/{path.name}`" in readme


def test_the_r9700_recordings_are_r9700s():
    """Pins the rule that a directory named r9700 holds R9700 outputs (PCI id 1002:7551)."""
    for directory in RECORDED.glob("r9700*"):
        text = " ".join(p.read_text(encoding="utf-8") for p in directory.iterdir())
        assert "R9700" in text or "7551" in text, directory.name
