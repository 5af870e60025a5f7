"""`--json PATH` means the same in every command: a file, or '-' for standard output alone.

The commands whose backends need hosts (collect, uninstall, upgrade) run here with the backend
replaced by a finished result, so what is under test is the CLI's own handling of '-': the
document alone on stdout, parseable by `json.loads`, the text elsewhere. The other commands'
'-' tests live beside their own tests (doctor, history, known-issues, provision, validate,
verify, lab status).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from r9700ctl import ansible_run, collect
from r9700ctl.cli import cli


def json_options(command: click.Command, path: str = "r9700ctl") -> list[tuple[str, click.Option]]:
    """Every --json option of the command tree, with the command line that reaches it."""
    found = [(path, p) for p in command.params if isinstance(p, click.Option) and "--json" in p.opts]
    if isinstance(command, click.Group):  # the top group loads its commands lazily
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                found.extend(json_options(sub, f"{path} {name}"))
    return found


def test_every_json_option_takes_a_path_and_teaches_the_dash():
    """A boolean --json (as `lab status` had) would make `--json -` an error in one command only."""
    options = json_options(cli)
    assert len(options) >= 10, [name for name, _ in options]
    for name, option in options:
        assert not option.is_flag, f"{name}: --json is a flag"
        assert option.metavar == "PATH", f"{name}: --json {option.metavar}"
        assert "'-'" in (option.help or ""), f"{name}: --json's help does not say what '-' does"


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text("[r9700_nodes]\nnode1 ansible_host=192.0.2.11\n", encoding="utf-8")
    return path


def test_collect_json_dash_prints_the_document_alone(tmp_path, monkeypatch):
    bundle = collect.HostBundle("node1", "COLLECTED", tmp_path / "node1", files=["uname.txt"])
    report = collect.CollectReport(out_dir=tmp_path, hosts=[bundle])
    monkeypatch.setattr(collect, "collect_inventory", lambda *args, **kwargs: report)
    result = CliRunner().invoke(
        cli, ["collect", str(inventory(tmp_path)), "--out", str(tmp_path), "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["schema"], document["hosts"][0]["host"]) == ("r9700ctl.collect/1", "node1")
    assert not (Path.cwd() / "-").exists()


def test_uninstall_json_dash_prints_the_document_alone_and_the_lines_on_stderr(tmp_path, monkeypatch):
    host = ansible_run.HostResult(host="node1", ok=3, started=True)
    now = datetime.now(timezone.utc)
    done = ansible_run.RunResult("successful", 0, {"node1": host}, tmp_path, tmp_path, now, now, True)
    monkeypatch.setattr(ansible_run, "run_playbook", lambda request: done)
    result = CliRunner().invoke(cli, ["uninstall", str(inventory(tmp_path)), "--json", "-"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["schema"], document["nodes"][0]["host"]) == ("r9700ctl.uninstall/1", "node1")
    assert result.stderr.startswith("node1: ")


@pytest.mark.parametrize("command", [["upgrade", "--rocm", "7.1.1"], ["rollback"]])
def test_lifecycle_json_dash_prints_the_document_alone(tmp_path, monkeypatch, command):
    from r9700ctl.lifecycle import service
    from r9700ctl.report import lifecycle as lines

    outcome = SimpleNamespace(exit_code=0, to_dict=lambda: {"schema": "r9700ctl.lifecycle/1", "nodes": []})
    monkeypatch.setattr(service, "run", lambda options, progress: outcome)
    monkeypatch.setattr(lines, "plan_lines", lambda outcome: ["plan: node1"])
    monkeypatch.setattr(lines, "summary_lines", lambda outcome: ["node1: done"])
    args = [command[0], str(inventory(tmp_path)), *command[1:], "--json", "-"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema": "r9700ctl.lifecycle/1", "nodes": []}
    assert result.stderr == "plan: node1\nnode1: done\n"
