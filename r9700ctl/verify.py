"""Run the shipped testinfra suite (tests/infra) against the nodes of an inventory.

The suite runs in a child pytest (the same Python), with testinfra's ansible backend:
`--hosts=ansible://node1,...` and `--ansible-inventory`, so it reaches the nodes the way
Ansible does (ansible_host, ansible_user, the ssh key and ssh_common_args, become). A small
plugin in the suite's conftest writes one JSON line per test; this module turns those into
a per-host verdict. It never prints: callers render `VerifyResult`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.ansible_run import quiet_python_warnings
from r9700ctl.errors import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, CannotRun

SCHEMA = schemas.VERIFY
# pytest's own exit codes that mean "the suite did not run" rather than "a test failed".
PYTEST_COULD_NOT_RUN = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}


@dataclass
class VerifyRequest:
    inventory: Path
    group: str = "r9700_nodes"
    limit: str | None = None
    keyword: str | None = None  # pytest -k: run only the matching tests
    junit_xml: Path | None = None
    timeout_s: float = 1800.0


@dataclass
class TestOutcome:
    host: str
    test: str
    param: str
    file: str
    status: str  # passed, failed, skipped, error
    message: str = ""
    doc: str = ""

    @property
    def label(self) -> str:
        return f"{self.test}[{self.param}]" if self.param else self.test


@dataclass
class HostSummary:
    host: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    unreachable: int = 0  # checks that could not run because SSH could not reach the host
    reason: str = ""  # why SSH could not reach it, in ssh's words

    @property
    def status(self) -> str:
        """PASS needs at least one check that ran and passed: skips alone judge nothing."""
        if self.failed:
            return "FAIL"
        if self.unreachable:
            return "UNREACHABLE"
        if self.errors:
            return "ERROR"
        return "PASS" if self.passed else "NOT_CHECKED"


@dataclass
class VerifyResult:
    hosts: list[HostSummary]
    outcomes: list[TestOutcome]
    duration_s: float
    pytest_rc: int
    suite: str
    junit_xml: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 every host passed checks; 2 a check failed; 3 none failed but some host was not checked."""
        if any(h.failed for h in self.hosts):
            return EXIT_FAIL
        if not self.hosts or any(h.status != "PASS" for h in self.hosts):
            return EXIT_CANNOT_RUN
        return EXIT_OK

    def problems(self) -> list[TestOutcome]:
        """Failed and errored checks; an unreachable host's checks are said once per host instead."""
        return [o for o in self.outcomes if o.status in ("failed", "error")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 1),
            "suite": self.suite,
            "junit_xml": self.junit_xml,
            "hosts": [{**asdict(h), "status": h.status} for h in self.hosts],
            "results": [asdict(o) for o in self.outcomes],
        }


def suite_dir() -> Path:
    from r9700ctl.paths import content_dir

    return content_dir("tests/infra")


def verify(request: VerifyRequest, progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Check the inventory (bad input: exit 64, nothing contacted), then run the suite on its hosts."""
    from r9700ctl.inventory import load_inventory

    inventory = load_inventory(request.inventory, group=request.group, limit=request.limit)
    names = inventory.host_names
    _require_the_test_runner()
    suite = suite_dir()
    say = progress or (lambda _line: None)
    say(f"checking {len(names)} host(s) with the testinfra suite in {suite}: {', '.join(names)}")
    with tempfile.TemporaryDirectory(prefix="r9700ctl-verify-") as scratch:
        report = Path(scratch) / "report.jsonl"
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(suite),
            "-c",
            str(suite / "pytest.ini"),
            "--rootdir",
            str(suite),
            "--confcutdir",
            str(suite),
            "--hosts=" + ",".join(f"ansible://{name}" for name in names),
            f"--ansible-inventory={Path(request.inventory).resolve()}",
            f"--r9700-report={report}",
            "-q",
            "--tb=line",
            "--color=no",
        ]
        if request.keyword:
            command += ["-k", request.keyword]
        # pytest writes its JUnit file in place (open "w"); it is written into the scratch
        # directory and put in place by the one atomic writer, so that --junit is checked
        # (cli.output.check_output_path) and written the way every other output file is.
        junit = Path(scratch) / "junit.xml"
        if request.junit_xml:
            command += [f"--junitxml={junit}"]
        env = dict(os.environ)
        # testinfra's ansible backend runs ansible-inventory: the one next to this Python.
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env.setdefault("ANSIBLE_HOME", str(Path(scratch) / "ansible"))
        env["PYTHONWARNINGS"] = quiet_python_warnings(env)
        start = time.monotonic()
        try:
            proc = subprocess.run(
                command,
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=request.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise CannotRun(
                what=f"the testinfra suite did not finish within {request.timeout_s:g} s",
                hint="check that the hosts answer over SSH (r9700ctl doctor), or narrow the run with --limit",
            ) from exc
        duration = time.monotonic() - start
        outcomes = _read_report(report)
        if request.junit_xml and junit.is_file():
            _put_junit(junit, Path(request.junit_xml))
    if not outcomes:  # nothing ran: never a PASS, whatever pytest's exit status was
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        why = PYTEST_COULD_NOT_RUN.get(proc.returncode, f"pytest exit status {proc.returncode}")
        raise CannotRun(
            what=f"the testinfra suite ran no check ({why}: {tail[0]})",
            hint="reinstall r9700ctl (it needs pytest and pytest-testinfra), or widen -k",
        )
    hosts = {name: HostSummary(name) for name in names}
    for outcome in outcomes:
        summary = hosts.setdefault(outcome.host, HostSummary(outcome.host))
        _read_command_failure(outcome)
        if outcome.status == "unreachable":
            summary.reason = summary.reason or outcome.message
        attribute = {
            "passed": "passed",
            "failed": "failed",
            "skipped": "skipped",
            "unreachable": "unreachable",
        }.get(outcome.status, "errors")
        setattr(summary, attribute, getattr(summary, attribute) + 1)
    return VerifyResult(
        hosts=list(hosts.values()),
        outcomes=outcomes,
        duration_s=duration,
        pytest_rc=proc.returncode,
        suite=str(suite),
        junit_xml=str(Path(request.junit_xml).resolve()) if request.junit_xml else None,
        command=command,
    )


def _put_junit(written: Path, path: Path) -> None:
    from r9700ctl.agent.atomic import write_atomic

    try:
        write_atomic(path.expanduser(), written.read_bytes())
    except OSError as exc:
        raise CannotRun(
            what=f"cannot write --junit: {exc.strerror or exc}",
            where=str(path),
            hint="give a writable path with --junit",
        ) from exc


def _require_the_test_runner() -> None:
    """pytest and pytest-testinfra are r9700ctl's own dependencies; an install without them cannot verify."""
    import importlib.util

    missing = [name for name in ("pytest", "testinfra") if importlib.util.find_spec(name) is None]
    if missing:
        raise CannotRun(
            what=f"cannot verify: {' and '.join(missing)} missing from r9700ctl's Python ({sys.executable})",
            hint="reinstall r9700ctl with its dependencies: pip install --force-reinstall r9700ctl",
        )


def _read_report(path: Path) -> list[TestOutcome]:
    if not path.is_file():
        return []
    outcomes = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        outcomes.append(TestOutcome(**{k: str(data.get(k, "")) for k in TestOutcome.__dataclass_fields__}))
    return outcomes


# testinfra raises RuntimeError(CommandResult(...)) when a command cannot run on the host: a repr
# with object addresses and byte strings. Its command, exit status and stderr are what matter.
_COMMAND_RESULT = re.compile(
    r"CommandResult\(.*?exit_status=(?P<rc>-?\d+), command=(?P<cmd>b'(?:[^'\\]|\\.)*'|b\"(?:[^\"\\]|\\.)*\")"
    r".*?_stderr=(?P<err>b'(?:[^'\\]|\\.)*'|b\"(?:[^\"\\]|\\.)*\")\)"
)
# ssh's own failures (exit status 255): the host was never reached, so nothing was checked.
_SSH_FAILURE = re.compile(
    r"^ssh: |Connection refused|Connection timed out|No route to host|Could not resolve hostname|"
    r"Permission denied \(|Host key verification failed|Connection closed by|kex_exchange_identification"
)


def _bytes_text(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return literal
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _read_command_failure(outcome: TestOutcome) -> None:
    """Turn testinfra's CommandResult repr into words; an SSH failure makes the check 'unreachable'."""
    match = _COMMAND_RESULT.search(outcome.message)
    if match is None:
        return
    command = _bytes_text(match["cmd"])
    stderr = next((line.strip() for line in _bytes_text(match["err"]).splitlines() if line.strip()), "")
    if match["rc"] == "255" and _SSH_FAILURE.search(stderr):
        outcome.status = "unreachable"
        outcome.message = stderr
        return
    outcome.message = f"`{command}` exited {match['rc']}" + (f": {stderr}" if stderr else "")
