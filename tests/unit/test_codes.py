"""The reason-code catalogue (r9700ctl/data/codes.yaml), `r9700ctl explain` and docs/codes.md.

Issue 20: every verdict that is not PASS carries a stable code from one catalogue, as DCGM's errors
do. These tests pin the catalogue's own rules, that every code the source and the manifest name is
in it (a typo would ship a code nobody can explain), that docs/codes.md is the catalogue rendered,
and the `explain` command's contract. tests/conftest.py adds the dynamic half: every verdict any
test builds is checked for a catalogued code as it is made.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from r9700ctl.agent import codes
from r9700ctl.cli import cli
from r9700ctl.report import explain

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "r9700ctl"
# Callables whose first argument is a reason code.
TAKES_A_CODE = {"hint", "next_step", "record", "coded"}


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_every_record_is_complete_and_its_action_is_one_of_the_classes():
    catalogue = codes.catalogue()
    assert len(catalogue) > 100
    for entry in catalogue.values():
        assert codes.CODE_SHAPE.match(entry.code)
        assert entry.action in codes.ACTIONS
        assert all((entry.meaning, entry.cause, entry.next, entry.category, entry.source)), entry


def test_a_record_without_its_next_step_is_refused():
    document = {
        "codes": {"X_Y": {"meaning": "m", "cause": "c", "action": "none", "category": "x", "source": "s"}}
    }
    with pytest.raises(codes.CatalogueError, match="X_Y lacks next"):
        codes.records(document)


def test_an_unknown_action_class_is_refused():
    entry = {"meaning": "m", "cause": "c", "next": "n", "action": "panic", "category": "x", "source": "s"}
    with pytest.raises(codes.CatalogueError, match="action 'panic'"):
        codes.records({"codes": {"X_Y": entry}})


def test_the_known_issues_codes_name_are_issues_of_the_manifest():
    issues = yaml.safe_load((PACKAGE / "data/manifest.yaml").read_text())["known_issues"]
    for entry in codes.catalogue().values():
        assert not entry.known_issue or entry.known_issue in issues, entry.code


def _module_constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _named_codes(path: Path) -> set[tuple[str, int]]:
    """Every code the module gives a verdict: code= keywords and the first argument of hint(),
    next_step(), record() and coded(), as string literals or module constants."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = _module_constants(tree)

    def value(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "code" and value(keyword.value):
                found.add((value(keyword.value), node.lineno))
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if name in TAKES_A_CODE and node.args:
            code = value(node.args[-1] if name == "coded" else node.args[0])
            if code and codes.CODE_SHAPE.match(code):
                found.add((code, node.lineno))
    return found


def test_every_code_the_source_names_is_catalogued():
    """A code= keyword or a hint("X") with a code the catalogue lacks would ship unexplained."""
    catalogue = codes.catalogue()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for code, line in _named_codes(path):
            if code not in catalogue:
                missing.append(f"{path.relative_to(REPO)}:{line}: {code}")
    assert missing == []


def test_every_code_the_manifest_names_is_catalogued():
    manifest = yaml.safe_load((PACKAGE / "data/manifest.yaml").read_text())
    named = {s["code"] for s in manifest["kernel_log_signatures"].values()}
    for issue in manifest["known_issues"].values():
        named |= set((issue.get("detection", {}).get("agent") or {}).get("codes") or [])
    assert named - set(codes.catalogue()) == set()


# Codes catalogued and given by no judge yet, each with why (the catalogue is append-only: a code
# once shipped is never removed, so one nobody gives must be named here, not silently kept).
RESERVED: dict[str, str] = {}


def test_every_catalogued_code_is_used_somewhere():
    """A code nobody gives is a typo's twin (or a judge that lost it); only RESERVED ones may be."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    text += (PACKAGE / "data/manifest.yaml").read_text()
    unused = [c for c in codes.catalogue() if not re.search(rf"\b{c}\b", text)]
    assert sorted(set(unused) - set(RESERVED)) == []
    assert set(RESERVED) <= set(codes.catalogue())


def test_docs_codes_is_the_catalogue_rendered():
    """Regenerate with: r9700ctl explain --markdown > docs/codes.md"""
    assert (REPO / explain.DOC_PATH).read_text(encoding="utf-8") == explain.render_markdown(codes.catalogue())


def test_the_controllers_codes_json_is_codes_yaml_as_the_agent_reads_it():
    """The catalogue serves both sides from JSON (the agent imports no YAML reader, and no controller
    module): r9700ctl/data/codes.json must be codes.yaml converted.
    Regenerate with: python3 -m r9700ctl.agentpack --codes-json"""
    from r9700ctl import agentpack

    path = REPO / "r9700ctl" / "data" / "codes.json"
    assert path.read_text(encoding="utf-8") == agentpack.data_json("codes")


def test_explain_prints_the_record():
    result = run_cli("explain", "iommu_translated")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "IOMMU_TRANSLATED: the IOMMU translates GPU DMA (no passthrough)"
    assert lines[1] == "  likely cause: iommu=pt is missing from the kernel command line"
    assert lines[2].startswith("  next step:    add iommu=pt to GRUB_CMDLINE_LINUX")
    assert lines[3] == "  action:       configure (platform)"
    assert lines[4].startswith("  source:       RCCL's start-up warning")


def test_explain_shows_an_unfilled_figure_as_its_name():
    result = run_cli("explain", "ACS_REDIRECT")
    assert "`setpci -s <port> ECAP_ACS+6.w=0000`" in result.output


def test_explain_names_the_known_issue_a_code_reports():
    result = run_cli("explain", "FAN_STALLED")
    assert "  known issue:  r9700-fan-stopped (r9700ctl known-issues -v)" in result.output


def test_an_unknown_code_is_one_line_naming_the_nearest_and_exit_64(monkeypatch, capsys):
    from r9700ctl.cli import main

    monkeypatch.setattr("sys.argv", ["r9700ctl", "explain", "IOMMU_TRANSLATE"])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    assert stopped.value.code == 64 and out == ""
    assert err == (
        "error: unknown reason code 'IOMMU_TRANSLATE' (nearest: IOMMU_TRANSLATED; "
        "`r9700ctl explain` lists every code)\n"
    )


def test_explain_without_a_code_lists_every_code():
    result = run_cli("explain")
    assert result.exit_code == 0
    assert len(result.output.splitlines()) == len(codes.catalogue())


def test_every_cluster_code_the_source_names_is_in_the_catalogue():
    """Bug it guards: a verdict whose code has no record would show no next step (KeyError at run
    time). The cluster judges name their codes as string constants in tables too (issue 21)."""
    named = {
        m for path in PACKAGE.rglob("*.py") for m in re.findall(r'"(CLUSTER_[A-Z_]+)"', path.read_text())
    }
    assert named, "the cluster judges name their codes"
    assert sorted(named - set(codes.catalogue())) == []
