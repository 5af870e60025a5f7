"""The r9700ctl testinfra suite: what `r9700ctl provision` promises, checked on the node.

Run it with `r9700ctl verify INVENTORY`, or directly:

    pytest <this directory> --hosts='ansible://r9700_nodes' --ansible-inventory=inventory.ini
    pytest <this directory> --hosts='ssh://r9700@node1' --ssh-config=ssh_config --sudo

Expectations come from r9700ctl's manifest (r9700ctl/data/manifest.yaml: each ROCm release's
repository paths, the apt suite per OS, the package sets), the inventory's r9700_* variables
(ansible:// hosts only) and the roles' defaults for every variable the inventory leaves unset.
The node's own record (/etc/r9700ctl/state.json, written by the r9700_lifecycle role from
dpkg-query) is checked as a record, never used as the expectation: a wrong version installed
would be in the record too. Its one use is the release `r9700_rocm_version: auto` chose (preflight
decided it from the node's GPUs at provision time); that release must still be one of the
manifest's, and everything about it comes from the manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

STATE_FILE = "/etc/r9700ctl/state.json"
NODE_FILE = "/etc/r9700ctl/node.json"


def _roles_dir() -> Path:
    try:
        from r9700ctl.paths import content_dir

        return content_dir("roles")
    except (ImportError, FileNotFoundError):
        return Path(__file__).resolve().parents[2] / "roles"


def role_defaults() -> dict[str, Any]:
    """Every r9700_* default of the provisioning roles (their defaults/main.yml)."""
    merged: dict[str, Any] = {}
    for path in sorted(_roles_dir().glob("r9700_*/defaults/main.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def manifest_path() -> Path | None:
    """r9700ctl's manifest beside this suite: a source checkout (tests/infra -> r9700ctl/data) or an
    installed wheel (r9700ctl/_content/tests/infra -> r9700ctl/data)."""
    here = Path(__file__).resolve()
    for candidate in (
        here.parents[2] / "r9700ctl/data/manifest.yaml",
        here.parents[3] / "data/manifest.yaml",
    ):
        if candidate.is_file():
            return candidate
    return None


def manifest_raw() -> dict[str, Any]:
    """The manifest the roles installed from: through r9700ctl when this Python has it, else the
    YAML file beside the suite (pytest run directly, without r9700ctl): the same document."""
    try:
        from r9700ctl import manifest

        return manifest.load().raw
    except ImportError:
        path = manifest_path()
        if path is None:
            pytest.fail("r9700ctl's manifest (r9700ctl/data/manifest.yaml) is not beside this suite")
        return yaml.safe_load(path.read_text()) or {}


@dataclass
class Node:
    """What one node was promised."""

    name: str
    state: dict[str, Any]
    record: dict[str, Any]
    inventory: dict[str, Any]
    defaults: dict[str, Any]
    manifest: dict[str, Any]
    os_key: str = ""
    problems: list[str] = field(default_factory=list)

    def var(self, name: str) -> Any:
        """The inventory's value of an r9700_* variable, else the roles' default."""
        value = self.inventory.get(name)
        return self.defaults.get(name) if value is None else value

    def need_state(self) -> dict[str, Any]:
        if not self.state:
            pytest.fail(f"{self.name}: {'; '.join(self.problems)} (run `r9700ctl provision` on it first)")
        return self.state

    @property
    def base_url(self) -> str:
        return str(self.var("r9700_repo_base_url") or self.manifest["repository"]["base_url"]).rstrip("/")

    @property
    def release(self) -> Release:
        """The manifest's entry for the ROCm release this node must run."""
        pinned = self.var("r9700_rocm_version")
        if pinned in (None, "", "auto"):  # auto: the release preflight chose, as the node recorded it
            pinned = self.need_state().get("rocm_version")
        version, releases = str(pinned), self.manifest["rocm_releases"]
        if version not in releases:
            pytest.fail(f"{self.name}: ROCm {version} is not a manifest release ({', '.join(releases)})")
        return Release(version, self.manifest["repository"], releases[version], self.manifest["packages"])

    @property
    def suite(self) -> str:
        """r9700_repo_suite, else the manifest's apt suite of this release for the node's OS."""
        if self.var("r9700_repo_suite"):
            return str(self.var("r9700_repo_suite"))
        suite = self.release.raw.get("os", {}).get(self.os_key)
        if not suite:
            pytest.fail(f"{self.name}: the manifest has no suite of {self.release.version} for {self.os_key}")
        return str(suite)

    @property
    def rocm_packages(self) -> list[str]:
        """The meta packages r9700_rocm installs: the manifest's run-time set, the inventory's list, or the
        manifest's default set (the role's "Choose the package set" task)."""
        if self.var("r9700_rocm_runtime_only"):
            return list(self.release.packages["runtime"])
        return [str(p) for p in self.var("r9700_rocm_packages") or self.release.packages["default"]]

    @property
    def key_fingerprint(self) -> str:
        value = self.var("r9700_repo_key_fingerprint") or self.manifest["repository"]["key_fingerprint"]
        return "".join(str(value).split()).upper()

    @property
    def runtime(self) -> bool:
        return bool(self.need_state().get("runtime"))

    @property
    def users(self) -> list[str]:
        users = self.var("r9700_users") or []
        if not users and self.inventory.get("ansible_user"):
            users = [self.inventory["ansible_user"]]
        return [str(u) for u in users]

    def environment(self) -> dict[str, str]:
        """NAME -> value of THE environment list the node recorded (/etc/r9700ctl/node.json).

        The roles compute it once (r9700ctl/envlist.py); the suite holds every file that carries it
        to that one list, and holds the list to the promises the inventory makes (test_environment.py).
        """
        if "environment" not in self.record:
            pytest.fail(f"{self.name}: {NODE_FILE} has no environment list (run `r9700ctl provision` on it)")
        return {str(e["name"]): str(e["value"]) for e in self.record["environment"]}


@dataclass(frozen=True)
class Release:
    """One ROCm release as the manifest describes it (repository paths below the base URL)."""

    version: str
    repository: dict[str, Any]
    raw: dict[str, Any]
    packages: dict[str, Any]

    @property
    def rocm_repo_path(self) -> str:
        path = self.raw.get("rocm_path", self.version)
        return str(self.repository["rocm_path_template"]).format(rocm_path=path)

    @property
    def amdgpu_repo_path(self) -> str:
        path = self.raw.get("amdgpu", self.version)
        return str(self.repository["amdgpu_path_template"]).format(amdgpu_path=path)

    @property
    def graphics_repo_path(self) -> str:
        """graphics/<version>/ubuntu, or "" for a release without that repository (before 7.0)."""
        path = self.raw.get("graphics")
        return str(self.repository["graphics_path_template"]).format(graphics_path=path) if path else ""


def os_key_of(host: Any) -> str:
    """The manifest's key of the node's OS ("ubuntu-24.04", "debian-12"), from /etc/os-release as
    r9700ctl's nodefacts reads it (os-release(5): ID, VERSION_ID)."""
    fields: dict[str, str] = {}
    for line in host.file("/etc/os-release").content_string.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return f"{fields.get('ID', '').lower()}-{fields.get('VERSION_ID', '')}"


def _read_json(host: Any, path: str, problems: list[str]) -> dict[str, Any]:
    document = host.file(path)
    if not document.exists:
        problems.append(f"no {path}")
        return {}
    try:
        return json.loads(document.content_string)
    except ValueError as exc:
        problems.append(f"{path} is not JSON ({exc})")
        return {}


@pytest.fixture(scope="module")
def node(host: Any) -> Node:
    """The expectations for the node under test (module scope: read once per file and host)."""
    problems: list[str] = []
    inventory: dict[str, Any] = {}
    if host.backend.NAME == "ansible":
        inventory = dict(host.ansible.get_variables())
    name = str(inventory.get("inventory_hostname") or host.backend.get_hostname())
    return Node(
        name=name,
        state=_read_json(host, STATE_FILE, problems),
        record=_read_json(host, NODE_FILE, problems),
        inventory=inventory,
        defaults=role_defaults(),
        manifest=manifest_raw(),
        os_key=os_key_of(host),
        problems=problems,
    )


# -- a per-host report for `r9700ctl verify` ---------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--r9700-report", default=None, help="write one JSON line per test: host, test, outcome")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    path = item.config.getoption("--r9700-report")
    if not path or (report.when != "call" and report.passed):
        return
    host = getattr(getattr(item, "callspec", None), "params", {}).get("_testinfra_host")
    backend = getattr(host, "backend", None)
    name = getattr(backend, "host", None) or (backend.get_hostname() if backend else "?")
    status = "passed" if report.passed else ("skipped" if report.skipped else "failed")
    if report.when != "call" and report.failed:
        status = "error"
    message = ""
    if report.failed:
        message = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message)
        message = message or str(report.longrepr).strip().splitlines()[-1]
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    params.pop("_testinfra_host", None)
    line = {
        "host": str(name),
        "test": item.originalname,
        "param": "-".join(str(v) for v in params.values()),
        "file": os.path.basename(str(item.fspath)),
        "status": status,
        "message": message,
        "doc": next(iter((getattr(item, "function", None).__doc__ or "").strip().splitlines()), ""),
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
