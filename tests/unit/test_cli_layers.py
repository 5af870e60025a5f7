"""The CLI parses, calls one use case and renders: it never does the use case's work itself.

Issue 20 item 4: cli/validate.py chose the runtime, launched the agent, read and rewrote its
report and drove the history; cli/uninstall.py ran its own playbook and built its own JSON;
three commands wrote JSON their own way and two exited their own way. The house rule now: a
cli/ module imports no engine (the runner, ansible-runner, the agent launcher, the runtime
choice, the history database, the agent packer), names no playbook, and every command ends
through cli/output.py's Output (the one JSON writer and the one exit).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import r9700ctl.cli

CLI = Path(r9700ctl.cli.__file__).parent
# What a use case does and the face never does.
ENGINES = {
    "ansible_runner": "runs Ansible",
    "r9700ctl.ansible_run": "runs a playbook",
    "r9700ctl.launch": "launches the agent",
    "r9700ctl.runtime": "chooses where the agent runs",
    "r9700ctl.agentpack": "packs the agent",
    "r9700ctl.history.store": "opens the history database",
    "r9700ctl.inventory.load_inventory": "loads the inventory",
}
# The one way out: Output.finish (its JSON writer and Click's exit), cli.main's sys.exit.
WAY_OUT = {"output.py", "__init__.py"}


def modules() -> list[Path]:
    """Every command module, cli/lab.py too: the lab's face prints and exits the same way."""
    return sorted(CLI.glob("*.py"))


def imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_a_cli_module_imports_no_engine(path: Path) -> None:
    names = imported_names(ast.parse(path.read_text(encoding="utf-8")))
    found = {
        f"{name} ({why})" for name in names for engine, why in ENGINES.items() if name.startswith(engine)
    }
    assert not found, f"{path.name} does a use case's work: {sorted(found)}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_a_cli_module_names_no_playbook_and_writes_and_exits_only_through_output(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = {
        ast.unparse(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
    }
    assert not {c for c in calls if c.endswith("playbook")}, f"{path.name} runs a playbook"
    if path.name in WAY_OUT:
        return
    own_way = {
        c
        for c in calls
        if c in {"json.dumps", "sys.exit", "write_json", "write_json_output"} or c.endswith((".exit", "Exit"))
    }
    assert not own_way, f"{path.name} writes JSON or exits its own way: {sorted(own_way)}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_a_cli_module_prints_through_output(path: Path) -> None:
    """No click.echo of its own (cli/lab.py had 15, cli/explain.py its listing): text goes through
    Output, so --json - moves it to standard error the same way for every command."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    if path.name in WAY_OUT:
        return
    assert not {c for c in calls if c in {"click.echo", "print", "click.secho"}}, (
        f"{path.name} prints its own way"
    )


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    """The scans themselves: an engine import and an exit of its own are found."""
    tree = ast.parse(
        "from r9700ctl import ansible_run\nfrom r9700ctl.ansible_run import run_playbook\n"
        "import click\nclick.get_current_context().exit(3)\n"
    )
    assert "r9700ctl.ansible_run" in imported_names(tree)
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "click.get_current_context().exit" in calls
