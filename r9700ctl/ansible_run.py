"""Run a playbook through ansible-runner: events become per-host results and progress callbacks.

One request object in, one result object out. Each run gets its own directory under
state_dir()/runs/<UTC timestamp>/ (mode 0700, kept): request.json (what was asked, secrets
redacted) and ansible-runner's artifacts (command, job_events/, stdout, rc, status).

What the roles hand back: every host fact whose name starts with `r9700_` (set_fact, or an
action plugin's ansible_facts) is kept in `HostResult.facts`, the last value set winning; the
callers pick the ones of their roles (provision: r9700_resolved, r9700_versions ...; lifecycle:
r9700_lifecycle). The runner knows one convention of every playbook, not of a role: a play that
needs a reboot it may not do itself sets `r9700_reboot_pending: true` and may say why in
`r9700_reboot_reasons` (a list of texts); `HostResult.reboot_pending` reads them.

Forks: one per host the run targets (`RunRequest.hosts`), at most MAX_FORKS, unless the request
names a number; the result says how many were used.

Secrets: the become password goes to ansible-runner's in-memory `passwords` map (pexpect answers
ansible-playbook's "BECOME password:" prompt); env files are suppressed so it is never written.

Ctrl-C: the first interrupt asks ansible-playbook to stop the way a terminal would (SIGINT to
its process group) and waits for it; a second interrupt, or no stop within STOP_GRACE_S, kills
it. The result then has status "canceled" and names the hosts left mid-way.
"""

from __future__ import annotations

import configparser
import json
import os
import queue
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from r9700ctl import ansiballz_cache
from r9700ctl.agent.atomic import write_json
from r9700ctl.errors import CannotRun
from r9700ctl.paths import collections_path, state_dir

OK = "OK"
CHANGED = "CHANGED"
FAILED = "FAILED"
UNREACHABLE = "UNREACHABLE"
INTERRUPTED = "INTERRUPTED"
NOT_RUN = "NOT_RUN"

FACT_PREFIX = "r9700_"  # host facts the runner keeps for its callers
REBOOT_FACT = "r9700_reboot_pending"
REBOOT_REASONS_FACT = "r9700_reboot_reasons"  # optional: why, as a list of short texts
# Hosts worked on at once when the request names no number: one per host up to this many
# (Ansible's own default is 5, which would run a 12-node provision in three waves).
MAX_FORKS = 50
STOP_GRACE_S = 15.0
# ansible-runner polls the cancel callback once per pexpect timeout: keep Ctrl-C responsive.
PEXPECT_TIMEOUT_S = 1
BECOME_PROMPT = r"BECOME password[^:\n]*:\s*$"
ARTIFACT_IDENT = "ansible"
_SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|API_?KEY|AUTH", re.IGNORECASE)
_GENERIC_MESSAGES = ("non-zero return code", "MODULE FAILURE", "")
_STAT_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


@dataclass
class RunRequest:
    # A playbook of the collection by its fully qualified name (paths.playbook: r9700ctl.nodes.provision),
    # or a playbook file.
    playbook: str | Path
    inventory: Path
    limit: str | None = None
    check: bool = False
    diff: bool = False
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    extra_vars: dict[str, Any] = field(default_factory=dict)
    forks: int | None = None  # None: one per host (`hosts`), at most MAX_FORKS
    hosts: int = 0  # how many hosts the run targets (the checked inventory, after --limit)
    become_password: str | None = field(default=None, repr=False)
    verbosity: int = 0
    envvars: dict[str, str] = field(default_factory=dict)
    runs_dir: Path | None = None  # default: state_dir()/runs
    timeout_s: int | None = None


@dataclass
class FailedTask:
    task: str
    message: str
    unreachable: bool = False
    rescued: bool = False  # a rescue block took over: the host went on


@dataclass
class HostResult:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    duration_s: float = 0.0
    failed_tasks: list[FailedTask] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # every r9700_* host fact the play set
    current_task: str | None = None  # started and not finished yet
    started: bool = False
    interrupted: bool = False
    _first_seen: float | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        if self.unreachable:
            return UNREACHABLE
        if self.failed:
            return FAILED
        if self.interrupted:
            return INTERRUPTED
        if not self.started:
            return NOT_RUN
        return CHANGED if self.changed else OK

    @property
    def reboot_pending(self) -> bool:
        return _truthy(self.facts.get(REBOOT_FACT, False))

    @property
    def reboot_reasons(self) -> list[str]:
        reasons = self.facts.get(REBOOT_REASONS_FACT)
        return [str(reason) for reason in reasons] if isinstance(reasons, list) else []

    def fact(self, name: str) -> dict[str, Any]:
        """A fact that holds a mapping (a role's report to the controller); {} when unset or not one."""
        value = self.facts.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def errors(self) -> list[FailedTask]:
        """Failures that count: not the rescued ones."""
        return [task for task in self.failed_tasks if not task.rescued]

    @property
    def first_error(self) -> str:
        errors = self.errors
        if not errors:
            return ""
        if errors[0].unreachable:
            # Which task found the host unreachable says nothing: the connection failed, not the task.
            # A task that sends data on standard input (an action's shell command) meets it as
            # 'Data could not be sent to remote host "H". Make sure this host can be reached over ssh: WHY'
            # (ansible-core's ssh connection plugin): WHY is the same reason.
            message = errors[0].message.removeprefix("Failed to connect to the host via ssh: ")
            return UNSENT.sub("", message, count=1)
        return f"{errors[0].task}: {errors[0].message}"


UNSENT = re.compile(
    r'^Data could not be sent to remote host "[^"]*"[.] Make sure this host can be reached over ssh: '
)


@dataclass
class Progress:
    """One step of one host: a task started ("start") or finished (ok changed failed ...)."""

    host: str
    task: str
    kind: str
    counts: HostResult
    message: str = ""
    ansible_output: str = ""  # what ansible-playbook printed for this event (shown at -vv)
    items: tuple[int, int] | None = None  # a loop task: (items changed, items in all)
    role: str = ""  # the role the task belongs to ("" for play-level tasks)
    warnings: tuple[str, ...] = ()  # the task's own warnings (preflight's WARN checks among them)


@dataclass
class RunResult:
    status: str  # successful, failed, canceled, timeout
    rc: int
    hosts: dict[str, HostResult]
    run_dir: Path
    artifact_dir: Path
    started_at: datetime
    finished_at: datetime
    stats_complete: bool = False  # ansible-playbook reached its PLAY RECAP
    error: str = ""  # why ansible-playbook stopped outside any host, when it did
    forks: int = 0  # hosts worked on at once

    @property
    def duration_s(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def canceled(self) -> bool:
        return self.status == "canceled"

    @property
    def interrupted_hosts(self) -> list[HostResult]:
        return [h for h in self.hosts.values() if h.interrupted]

    def require_a_host(self) -> RunResult:
        """This result, or CannotRun (exit 3) when ansible-playbook stopped before any host ran
        (a syntax error, a missing role): there is nothing per host to read then."""
        if not self.hosts and self.status != "successful":
            raise CannotRun(
                what=f"ansible-playbook stopped before any host: {self.error or self.status}",
                where=str(self.artifact_dir),
                hint="its full output is in the stdout file there",
            )
        return self


ProgressCallback = Callable[[Progress], None]


def run_playbook(request: RunRequest, on_progress: ProgressCallback | None = None) -> RunResult:
    """Run `request.playbook`; return per-host results. Never prints; progress goes to `on_progress`."""
    import ansible_runner

    started_at = _utcnow()
    run_dir = _new_run_dir(request.runs_dir or state_dir() / "runs", started_at)
    _write_json(run_dir / "request.json", _request_record(request))
    tracker = _EventTracker()
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    stopper = _Stopper()

    def keep(event: dict[str, Any]) -> bool:
        events.put(event)
        return True  # keep it in job_events/ as well

    try:
        thread, runner = _start(ansible_runner, run_dir, request, keep, stopper)
    except ansible_runner.exceptions.AnsibleRunnerException as exc:
        raise CannotRun(what=f"ansible-runner could not start: {exc}", where=str(run_dir)) from exc

    def deliver(timeout: float) -> None:
        try:
            event = events.get(timeout=timeout)
        except queue.Empty:
            return
        progress = tracker.handle(event)
        if progress is not None and on_progress is not None:
            on_progress(progress)

    while thread.is_alive() or not events.empty():
        try:
            deliver(timeout=0.2)
            stopper.escalate_if_overdue()
        except KeyboardInterrupt:
            stopper.request(tracker.playbook_pid)
    thread.join()

    artifact_dir = Path(runner.config.artifact_dir)
    _redact_command(artifact_dir / "command")
    status = "canceled" if stopper.requested else str(runner.status)
    result = RunResult(
        status=status,
        rc=int(runner.rc) if runner.rc is not None else -1,
        hosts=tracker.finish(canceled=stopper.requested),
        run_dir=run_dir,
        artifact_dir=artifact_dir,
        started_at=started_at,
        finished_at=_utcnow(),
        stats_complete=tracker.stats is not None,
        forks=forks_for(request),
    )
    if status != "successful" and not stopper.requested and not result.stats_complete:
        result.error = _first_error_line(artifact_dir / "stdout")
    return result


def forks_for(request: RunRequest) -> int:
    """The request's forks, or one per host it targets, at most MAX_FORKS."""
    return request.forks or max(1, min(request.hosts, MAX_FORKS))


def _start(
    ansible_runner: Any,
    run_dir: Path,
    request: RunRequest,
    keep: Callable[[dict[str, Any]], bool],
    stopper: _Stopper,
) -> tuple[Any, Any]:
    """ansible-runner in a thread of its own; the caller's thread keeps Ctrl-C and the callbacks."""
    return ansible_runner.run_async(
        private_data_dir=str(run_dir),
        ident=ARTIFACT_IDENT,
        playbook=_playbook_argument(request.playbook),
        inventory=str(Path(request.inventory).resolve()),
        limit=request.limit or None,
        forks=forks_for(request),
        verbosity=request.verbosity or None,
        tags=",".join(request.tags) or None,
        skip_tags=",".join(request.skip_tags) or None,
        extravars=dict(request.extra_vars) or None,
        envvars=_environment(request, run_dir),
        cmdline=_cmdline(request) or None,
        passwords={BECOME_PROMPT: request.become_password} if request.become_password else None,
        settings={"pexpect_timeout": PEXPECT_TIMEOUT_S},
        suppress_env_files=True,  # else ansible-runner writes passwords to env/passwords
        event_handler=keep,
        cancel_callback=stopper.should_kill,
        quiet=True,
        timeout=request.timeout_s,
    )


# --- events -> per-host results --------------------------------------------------------------


class _EventTracker:
    def __init__(self) -> None:
        self.hosts: dict[str, HostResult] = {}
        self.stats: dict[str, dict[str, int]] | None = None
        self.playbook_pid: int | None = None

    def handle(self, event: dict[str, Any]) -> Progress | None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if self.playbook_pid is None and isinstance(event.get("pid"), int):
            self.playbook_pid = event["pid"]
        if kind == "playbook_on_stats":
            self.stats = {key: dict(data.get(key) or {}) for key in _STAT_KEYS}
            return None
        host = data.get("host")
        if not host or not kind.startswith("runner_on_"):
            return None  # item, retry and async events: the task's own event follows
        result = self.hosts.setdefault(host, HostResult(host=host))
        task = str(data.get("task") or data.get("task_action") or "")
        when = _event_time(event)
        if result._first_seen is None:
            result._first_seen = when
        result.duration_s = max(result.duration_s, when - result._first_seen)
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        message = ""
        if kind == "runner_on_start":
            result.started = True
            result.current_task = task
            return Progress(
                host,
                task,
                "start",
                result,
                ansible_output=event.get("stdout", ""),
                role=str(data.get("role") or ""),
            )
        if kind == "runner_on_ok":
            result.ok += 1
            outcome = "ok"
            if res.get("changed"):
                result.changed += 1
                outcome = "changed"
            facts = res.get("ansible_facts")
            if isinstance(facts, dict):
                result.facts.update({k: v for k, v in facts.items() if k.startswith(FACT_PREFIX)})
        elif kind == "runner_on_failed" and data.get("ignore_errors"):
            result.ok += 1  # as Ansible's stats count it
            result.ignored += 1
            outcome = "ignored"
        elif kind == "runner_on_failed":
            result.failed += 1
            outcome = "failed"
            message = first_error_line(res)
            result.failed_tasks.append(FailedTask(task=task, message=message))
        elif kind == "runner_on_unreachable":
            result.unreachable += 1
            outcome = "unreachable"
            message = first_error_line(res)
            result.failed_tasks.append(FailedTask(task=task, message=message, unreachable=True))
        elif kind == "runner_on_skipped":
            result.skipped += 1
            outcome = "skipped"
        else:
            return None
        result.started = True
        result.current_task = None
        loop = res.get("results") if isinstance(res.get("results"), list) else None
        items = None
        if loop:
            changed = sum(1 for item in loop if isinstance(item, dict) and item.get("changed"))
            items = (changed, len(loop))
        role = str(data.get("role") or "")
        warnings = tuple(str(w) for w in res.get("warnings") or [] if str(w).strip())
        return Progress(host, task, outcome, result, message, event.get("stdout", ""), items, role, warnings)

    def finish(self, canceled: bool) -> dict[str, HostResult]:
        """Final counts from the PLAY RECAP when there is one; mark hosts a cancel left mid-way."""
        if self.stats is not None:
            for host in {name for counts in self.stats.values() for name in counts}:
                self.hosts.setdefault(host, HostResult(host=host, started=True))
            for result in self.hosts.values():
                for stat, attribute in _STAT_KEYS.items():
                    setattr(result, attribute, int(self.stats[stat].get(result.host, 0)))
                if not result.failed:
                    for task in result.failed_tasks:
                        task.rescued = not task.unreachable
        elif canceled:
            for result in self.hosts.values():
                if result.started and not result.failed and not result.unreachable:
                    result.interrupted = True
        return self.hosts


def first_error_line(res: dict[str, Any]) -> str:
    """The first line worth showing of a failed or unreachable result.

    Modules' own words first ("msg"); for commands ("non-zero return code") and crashed modules
    ("MODULE FAILURE") the first line of what the program printed says more.
    """
    message = _first_line(res.get("msg")).removeprefix("Task failed: ")  # ansible-core 2.19 adds it
    for key in ("stderr", "module_stderr", "stdout", "module_stdout", "exception"):
        detail = _first_line(res.get(key))
        if detail and (not message or message in _GENERIC_MESSAGES or message.startswith("MODULE FAILURE")):
            rc = res.get("rc")
            prefix = f"rc {rc}" if message == "non-zero return code" and rc is not None else message
            return f"{prefix}: {detail}" if prefix else detail
    if message and not message.startswith("One or more items failed"):
        return message
    for item in res.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            return first_error_line(item)
    return message or "failed (no message)"


def _first_line(value: Any, limit: int = 300) -> str:
    if isinstance(value, (list, tuple)):
        value = "\n".join(str(v) for v in value)
    if not isinstance(value, str):
        return ""
    for line in value.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _event_time(event: dict[str, Any]) -> float:
    created = event.get("created")
    if isinstance(created, str):
        try:
            return datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


# --- stopping ----------------------------------------------------------------------------------


class _Stopper:
    """First Ctrl-C: SIGINT to ansible-playbook (it stops like at a terminal). Then: kill."""

    def __init__(self) -> None:
        self.requested = False
        self._kill = False
        self._deadline: float | None = None

    def request(self, playbook_pid: int | None) -> None:
        if self.requested or playbook_pid is None:
            self.requested = True
            self._kill = True  # second Ctrl-C, or nothing to ask politely yet
            return
        self.requested = True
        self._deadline = time.monotonic() + STOP_GRACE_S
        try:
            os.killpg(os.getpgid(playbook_pid), signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            self._kill = True

    def escalate_if_overdue(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            self._kill = True

    def should_kill(self) -> bool:
        return self._kill


# --- run directory, environment, command line -----------------------------------------------


def _new_run_dir(runs_dir: Path, started_at: datetime) -> Path:
    runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1000):
        candidate = runs_dir / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        candidate.chmod(0o700)  # mkdir's mode is filtered by the umask
        return candidate
    raise RuntimeError(f"cannot create a run directory under {runs_dir}")


def _playbook_argument(playbook: str | Path) -> str:
    """ansible-playbook's argument: a collection playbook's name as it is, a file by its absolute path."""
    return playbook if isinstance(playbook, str) else str(Path(playbook).resolve())


def _environment(request: RunRequest, run_dir: Path) -> dict[str, str]:
    # This installation's collection first (the roles, plugins and playbooks by their r9700ctl.nodes
    # names); the user's own collections path after it, for whatever else their ansible.cfg loads.
    collections = str(collections_path(run_dir / "collections"))
    if os.environ.get("ANSIBLE_COLLECTIONS_PATH"):
        collections += os.pathsep + os.environ["ANSIBLE_COLLECTIONS_PATH"]
    env = {
        # ansible-playbook from the same environment as this Python (a venv is not always on PATH).
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", os.defpath),
        "ANSIBLE_COLLECTIONS_PATH": collections,
        "ANSIBLE_PIPELINING": "True",
        # The contract: SSH host keys are checked, whatever the shell environment says.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # ControlPath sockets must stay under ~100 characters: a short directory of our own.
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(_control_path_dir()),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "PYTHONWARNINGS": quiet_python_warnings(),
    }
    # ansible-runner runs in the run directory; keep the ansible.cfg the user's directory has.
    local_cfg = Path.cwd() / "ansible.cfg"
    if "ANSIBLE_CONFIG" not in os.environ and local_cfg.is_file():
        env["ANSIBLE_CONFIG"] = str(local_cfg)
    if not _remote_tmp_configured(env.get("ANSIBLE_CONFIG") or os.environ.get("ANSIBLE_CONFIG")):
        env["ANSIBLE_REMOTE_TMP"] = REMOTE_TMP
    # Module payloads kept from one run to the next (r9700ctl/ansiballz_cache.py); the user's own
    # callback directories stay, and ansible-runner adds its own after them.
    kept = ansiballz_cache.prepare()
    if kept is not None:
        env[ansiballz_cache.ENV] = str(kept)
        callbacks = [str(ansiballz_cache.CALLBACK_DIR), os.environ.get("ANSIBLE_CALLBACK_PLUGINS", "")]
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(filter(None, callbacks))
    env.update(request.envvars)
    return env


# Deprecation warnings of Ansible's own imports that a user cannot act on, as `-W` filters. cryptography
# 51 warns when ansible-core 2.19 imports its DSA module (ansible/_internal/_ssh/_ssh_agent.py, on every
# start of ansible-playbook or ansible-inventory): a line on stderr before any output, which would also
# be taken for the reason a run stopped. CryptographyDeprecationWarning is a UserWarning.
QUIET_WARNINGS = ("ignore:DSA is deprecated:UserWarning",)


def quiet_python_warnings(environ: dict[str, str] | None = None) -> str:
    """PYTHONWARNINGS for an Ansible command: the caller's own filters, then QUIET_WARNINGS."""
    own = (os.environ if environ is None else environ).get("PYTHONWARNINGS", "")
    return ",".join(filter(None, [own, *QUIET_WARNINGS]))


# Where modules make their scratch directories on a node. Ansible's default, ~/.ansible/tmp, does
# not exist on a fresh node, and with pipelining the first module that needs a scratch directory
# (get_url, apt_key ...) creates it and warns on every node: "Module remote_tmp /root/.ansible/tmp
# did not exist and was created with a mode of 0700, this may cause issues when running as another
# user" (ansible-core module_utils/basic.py, AnsibleModule.tmpdir) - a line the user cannot act on.
# /tmp always exists; in it Ansible makes a new 0700 directory of a random name per task
# (tempfile.mkdtemp, or `umask 77 && mkdir` for a transfer), so nothing is shared between users.
REMOTE_TMP = "/tmp"


def _remote_tmp_configured(config: str | None) -> bool:
    """True when the user chose remote_tmp: the environment, or [defaults] of the ansible.cfg
    Ansible reads (ANSIBLE_CONFIG, else ~/.ansible.cfg, else /etc/ansible/ansible.cfg; the one in
    the working directory is passed on as ANSIBLE_CONFIG above)."""
    if os.environ.get("ANSIBLE_REMOTE_TMP") or os.environ.get("ANSIBLE_REMOTE_TEMP"):
        return True
    candidates = [config] if config else [str(Path.home() / ".ansible.cfg"), "/etc/ansible/ansible.cfg"]
    parser = configparser.ConfigParser(interpolation=None)
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            try:
                parser.read(candidate, encoding="utf-8")
            except (configparser.Error, OSError, UnicodeDecodeError):
                return False
            return parser.has_option("defaults", "remote_tmp")
    return False


def _control_path_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"r9700ctl-cp-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
        if path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(path)
        return path
    except OSError:
        # Someone else's or a symlink: never share sockets through it.
        return Path(tempfile.mkdtemp(prefix="r97cp-"))


def _cmdline(request: RunRequest) -> str:
    args = []
    if request.check:
        args.append("--check")
    if request.diff:
        args.append("--diff")
    if request.become_password:
        args.append("--ask-become-pass")  # the answer comes through pexpect, never the command line
    return " ".join(args)


def _request_record(request: RunRequest) -> dict[str, Any]:
    record = asdict(request)
    for key in ("playbook", "inventory", "runs_dir"):
        if record[key] is not None and not (key == "playbook" and isinstance(request.playbook, str)):
            record[key] = str(Path(record[key]).resolve())
    record["become_password"] = "<redacted>" if request.become_password else None
    record["envvars"] = _redacted_env(request.envvars)
    return json.loads(json.dumps(record, default=str))


def _redacted_env(env: dict[str, Any]) -> dict[str, Any]:
    return {k: ("<redacted>" if _SECRET_NAME.search(k) else v) for k, v in env.items()}


def _redact_command(path: Path) -> None:
    """ansible-runner records the whole environment of the run; drop values that look secret."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record.get("env"), dict):
        record["env"] = _redacted_env(record["env"])
        _write_json(path, record)


def _first_error_line(stdout: Path) -> str:
    try:
        lines = [line.strip() for line in stdout.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "ansible-playbook left no output"
    lines = [line for line in lines if line]
    for line in lines:
        if line.startswith(("ERROR!", "[ERROR]")):
            return line
    return lines[-1] if lines else "ansible-playbook stopped without output"


def _write_json(path: Path, data: Any) -> None:
    write_json(path, data, mode=0o600)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)
