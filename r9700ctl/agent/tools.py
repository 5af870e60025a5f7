"""Run a node tool (amd-smi, nvidia-smi, lspci, dmesg) with a deadline; never raise.

A missing tool, a non-zero exit, a timeout and a permission error are all ordinary answers
(checks turn them into SKIP with the reason). The tool is found on PATH, so tests put small
scripts that print recorded outputs first on PATH.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass
class ToolOutput:
    argv: list[str]
    found: bool
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.found and self.rc == 0 and not self.error

    def why_not(self) -> str:
        """One phrase saying why the output is unusable ("" when it is usable)."""
        name = self.argv[0] if self.argv else "tool"
        if not self.found:
            return f"{name} is not installed (not on PATH)"
        if self.error:
            return f"{' '.join(self.argv)}: {self.error}"
        if self.rc != 0:
            detail = (self.stderr or self.stdout).strip().splitlines()
            return f"{' '.join(self.argv)} exited {self.rc}" + (f": {detail[-1][:160]}" if detail else "")
        return ""


def run_tool(argv: list[str], timeout_s: float = 20.0) -> ToolOutput:
    """Run argv[0] from PATH; capture text output."""
    path = shutil.which(argv[0])
    if path is None:
        return ToolOutput(argv, found=False)
    try:
        proc = subprocess.run(
            [path, *argv[1:]],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ToolOutput(argv, found=True, error=f"no answer within {timeout_s:g} s (killed)")
    except OSError as exc:
        return ToolOutput(argv, found=True, error=exc.strerror or str(exc))
    return ToolOutput(argv, found=True, rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
