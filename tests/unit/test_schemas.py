"""Every schema id is written once, in r9700ctl/agent/schemas.py.

Issue 20 item 5: "r9700ctl.validate/1" was spelt in seven modules (the agent, the controller's
validate, formats, metrics, history, the HTML report, the CLI), so a new version could be
bumped in one and read as foreign by the others. The agent may not import the controller, so
the one module lives in the node package where both read it. Docstrings may name an id (they
explain a layout); code may not spell one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import r9700ctl
from r9700ctl.agent import schemas

PACKAGE = Path(r9700ctl.__file__).parent
ROOT = PACKAGE.parent
SCHEMA_ID = re.compile(r"r9700ctl\.[a-z][a-z.-]*/\d+")


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (first statement of a module, class or def)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spelt_ids(path: Path) -> list[tuple[int, str]]:
    """(line, id) of each schema id in a string of the code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = docstrings(tree)
    return [
        (node.lineno, match)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        for match in SCHEMA_ID.findall(node.value)
    ]


def test_no_module_but_schemas_spells_a_schema_id():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {schema}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "schemas.py"
        for line, schema in spelt_ids(path)
    ]
    assert found == []


def test_the_scan_finds_an_id_in_code_and_passes_one_in_a_docstring(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""Writes r9700ctl.validate/1."""\nSCHEMA = "r9700ctl.validate/1"\n', encoding="utf-8")
    assert spelt_ids(source) == [(2, "r9700ctl.validate/1")]


def test_the_ids_the_roles_write_are_the_ones_schemas_names():
    for role_file, schema in schemas.ROLE_WRITTEN.items():
        assert schema in (ROOT / role_file).read_text(encoding="utf-8"), role_file
    known = {value for value in vars(schemas).values() if isinstance(value, str)}
    known |= set(schemas.ROLE_WRITTEN.values())
    for path in sorted((ROOT / "roles").rglob("*")):
        if path.is_file() and path.suffix in ("", ".py", ".yml", ".j2"):
            for found in SCHEMA_ID.findall(path.read_text(encoding="utf-8", errors="replace")):
                assert found in known, (
                    f"{path.relative_to(ROOT)}: {found} is not in r9700ctl/agent/schemas.py"
                )
