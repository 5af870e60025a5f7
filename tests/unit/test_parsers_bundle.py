"""read_bundle on the recorded bundles, and the parsers' promise to need nothing but the
standard library and r9700ctl.agent (they run on nodes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from r9700ctl.agent.parsers import BUNDLE_FILES
from r9700ctl.agent.parsers.bundle import read_bundle

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"


def test_the_2x_r9700_bundle_reads_its_files_and_lists_the_rest_as_missing():
    bundle = read_bundle(RECORDED / "r9700-2x")

    assert sorted(bundle.results) == ["amd-smi.txt", "cmdline.txt", "dkms-status.txt"]
    assert bundle.errors == {}
    assert len(bundle.get("amd-smi.txt").gpus) == 2
    assert bundle.get("cmdline.txt").iommu_passthrough is True
    assert "rocminfo.txt" in bundle.missing and "amd-smi.txt" not in bundle.missing
    assert len(bundle.missing) == len(BUNDLE_FILES) - 3
    assert bundle.unknown == ["uname.txt"]  # recorded, but no parser reads uname


def test_an_unreadable_file_in_a_bundle_is_an_error_for_that_file_only(tmp_path):
    (tmp_path / "rocminfo.txt").write_bytes(b"\x00\x01\x02 not text")
    (tmp_path / "cmdline.txt").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt\n")

    bundle = read_bundle(tmp_path)

    assert bundle.errors == {
        "rocminfo.txt": "could not read rocminfo.txt: binary data, not text output of a tool"
    }
    assert bundle.get("cmdline.txt").iommu == "pt"


def test_a_directory_that_does_not_exist_is_a_bundle_with_everything_missing(tmp_path):
    bundle = read_bundle(tmp_path / "nope")

    assert bundle.results == {}
    assert sorted(bundle.missing) == sorted(BUNDLE_FILES)


def test_the_parsers_import_nothing_from_the_controller_nor_third_party_packages():
    """Pins the agent rule: a real child process imports every parser and then lists what
    got loaded; yaml, click, rich, paramiko or any r9700ctl module outside the agent
    would break the agent on a bare node."""
    code = textwrap.dedent(
        """
        import importlib, sys
        from r9700ctl.agent.parsers import BUNDLE_FILES
        modules = {spec.split(":")[0] for spec in BUNDLE_FILES.values()} | {"rccl", "throttle", "bundle"}
        for module in modules:
            importlib.import_module("r9700ctl.agent.parsers." + module)
        third_party = {"yaml", "click", "rich", "paramiko", "jinja2", "ansible_runner", "psutil"}
        bad = sorted(
            name for name in sys.modules
            if name.split(".")[0] in third_party
            or (name.startswith("r9700ctl.") and not name.startswith("r9700ctl.agent"))
        )
        print(",".join(bad))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
