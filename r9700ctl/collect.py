"""`r9700ctl collect`: gather each node's support bundle into DIR/<host>/ through Ansible.

playbooks/collect.yml (role r9700_collect) runs every diagnostic tool that exists on the node,
never failing on one that is absent, and fetches the outputs with collect.json (each command, its
exit status, why a file is missing) and MISSING.txt. Here: the inventory is checked first (bad
input touches no host), stale bundle files of an earlier collect are removed so an old output
cannot pass for a new one, the playbook runs through ansible_run.py, and a host that could not be
reached gets a MISSING.txt saying so. Library code: progress goes through a callback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.bundle import BUNDLE_FILES, COLLECT_MANIFEST, MISSING_LIST
from r9700ctl.errors import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, BadInput

SCHEMA = schemas.COLLECT
# Hosts collected at once; each mostly waits on its tools and on file transfers.

COLLECTED = "COLLECTED"
UNREACHABLE = "UNREACHABLE"
FAILED = "FAILED"


@dataclass
class HostBundle:
    """What was collected from one host."""

    host: str
    status: str
    directory: Path
    files: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # file -> why it was not recorded
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status,
            "directory": str(self.directory),
            "files": self.files,
            "missing": self.missing,
            "error": self.error,
        }


@dataclass
class CollectReport:
    out_dir: Path
    hosts: list[HostBundle]
    run_dir: Path | None = None
    run_status: str = ""

    @property
    def exit_code(self) -> int:
        """3 when a host could not be reached, 2 when collecting failed on one, else 0.

        A tool that is absent is normal (no nvidia-smi on an AMD node): it is listed, not failed.
        """
        if any(h.status == UNREACHABLE for h in self.hosts):
            return EXIT_CANNOT_RUN
        if any(h.status == FAILED for h in self.hosts):
            return EXIT_FAIL
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        return {
            "schema": SCHEMA,
            "toolkit_version": __version__,
            "out_dir": str(self.out_dir),
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "run_status": self.run_status,
            "exit_code": self.exit_code,
            "hosts": [h.to_dict() for h in self.hosts],
        }


def collect_inventory(
    inventory_path: str | Path,
    group: str,
    out_dir: str | Path,
    *,
    limit: str | None = None,
    progress: Callable[[Any], None] | None = None,
) -> CollectReport:
    """Check the inventory and DIR, run playbooks/collect.yml, and say per host what was gathered."""
    from r9700ctl import ansible_run, paths
    from r9700ctl.inventory import load_inventory

    inventory = load_inventory(inventory_path, group, limit=limit)
    out = prepare_out_dir(Path(out_dir))
    for host in inventory.hosts:
        remove_stale_bundle(out / host.name)

    request = ansible_run.RunRequest(
        playbook=paths.playbook("collect.yml"),
        inventory=Path(inventory_path),
        limit=limit,
        hosts=len(inventory.hosts),
        extra_vars={"r9700_group": group, "r9700_collect_dest": str(out)},
    )
    result = ansible_run.run_playbook(request, on_progress=progress).require_a_host()

    bundles = []
    for host in inventory.hosts:
        outcome = result.hosts.get(host.name)
        bundles.append(_host_bundle(host.name, out / host.name, outcome))
    return CollectReport(out_dir=out, hosts=bundles, run_dir=result.run_dir, run_status=result.status)


def prepare_out_dir(out: Path) -> Path:
    """DIR must be a directory (created when missing) that we can write; else bad input."""
    if out.exists() and not out.is_dir():
        raise BadInput(
            what="--out must be a directory, this is a file", where=str(out), hint="give a directory"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".r9700ctl-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BadInput(
            what=f"cannot write to --out directory: {exc.strerror or exc}",
            where=str(out),
            hint="give a directory you can write to",
        ) from exc
    return out.resolve()


def remove_stale_bundle(directory: Path) -> None:
    """Delete bundle files of an earlier collect (only our own file names, nothing else)."""
    for name in (*BUNDLE_FILES, COLLECT_MANIFEST, MISSING_LIST):
        path = directory / name
        if path.is_file() or path.is_symlink():
            path.unlink()


def _host_bundle(name: str, directory: Path, outcome: Any) -> HostBundle:
    files = (
        sorted(p.name for p in directory.iterdir() if p.name in BUNDLE_FILES) if directory.is_dir() else []
    )
    missing = _missing_from_manifest(directory / COLLECT_MANIFEST)
    status_of_run = getattr(outcome, "status", "NOT_RUN")
    error = getattr(outcome, "first_error", "") if outcome is not None else "not in the play's results"
    if status_of_run == "UNREACHABLE":
        status = UNREACHABLE
    elif status_of_run == "FAILED" or not (directory / COLLECT_MANIFEST).is_file():
        status = FAILED
        error = error or "the collect play did not finish on this host"
    else:
        status = COLLECTED
    if status != COLLECTED:
        _write_missing_for_host(directory, name, status, error)
        missing = dict.fromkeys(sorted(set(BUNDLE_FILES) - set(files)), error or status.lower())
    return HostBundle(
        host=name, status=status, directory=directory, files=files, missing=missing, error=error
    )


def _missing_from_manifest(path: Path) -> dict[str, str]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    rows = manifest.get("files", []) if isinstance(manifest, dict) else []
    return {
        str(row.get("file")): str(row.get("reason") or "not recorded")
        for row in rows
        if isinstance(row, dict) and not row.get("recorded")
    }


def _write_missing_for_host(directory: Path, host: str, status: str, error: str) -> None:
    """A host that gave nothing still gets a MISSING.txt, so its bundle says why it is empty."""
    directory.mkdir(parents=True, exist_ok=True)
    reason = "host unreachable" if status == UNREACHABLE else "collecting failed"
    text = f"# What r9700ctl collect could not record on {host}\n*: {reason}: {error or 'no details'}\n"
    tmp = directory / (MISSING_LIST + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(directory / MISSING_LIST)
