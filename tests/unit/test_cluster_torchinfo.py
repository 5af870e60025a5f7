"""The role reads torchinfo's answer as text (roles/r9700_validate/tasks/runtime.yml): a host whose
Python has no torch prints '"torch": null' and exits 0, which the role takes as "no torch here";
a Python with torch prints its version. This pins that contract."""

from __future__ import annotations

import json
import subprocess
import sys

from r9700ctl import paths
from r9700ctl.agent.cluster import torchinfo

NO_TORCH_MARKER = '"torch": null'  # what runtime.yml's __r9700_validate_host_torch_found looks for


def run_torchinfo(*pre: str) -> subprocess.CompletedProcess[str]:
    run = "runpy.run_module('r9700ctl.agent.cluster.torchinfo', run_name='__main__')"
    code = "; ".join([*pre, "import runpy", run])
    argv = [sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_without_torch_it_says_torch_null_as_the_role_reads_it_and_exits_0():
    # torch made unimportable in this child: a None entry in sys.modules raises ImportError
    done = run_torchinfo("import sys", "sys.modules['torch'] = None")
    assert done.returncode == 0, done.stderr
    assert NO_TORCH_MARKER in done.stdout and json.loads(done.stdout)["torch"] is None


def test_with_torch_it_names_the_version_and_never_the_marker():
    found = torchinfo.gather()
    assert found["torch"] and NO_TORCH_MARKER not in json.dumps(found)


def test_the_role_looks_for_that_very_marker():
    runtime = (paths.content_dir("roles") / "r9700_validate" / "tasks" / "runtime.yml").read_text()
    assert f"'{NO_TORCH_MARKER}' not in __r9700_validate_host_torch.stdout" in runtime
