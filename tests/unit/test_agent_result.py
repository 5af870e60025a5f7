"""The one verdict model (r9700ctl/agent/result.py) and the one list of levels (agent/levels.py).

Issue 20: three verdict types, two severity orders and six lists of levels had grown apart; these
tests pin the one of each that remains, and that every list which must name the levels is it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from r9700ctl.agent import levels
from r9700ctl.agent.result import ERROR, FAIL, INCONCLUSIVE, PASS, SEVERITY, SKIP, STATUSES, WARN, CheckResult

REPO = Path(__file__).resolve().parents[2]


def test_a_check_result_takes_keyword_arguments_only() -> None:
    """73 call sites passed 8 or 9 arguments by position, where a swapped unit and threshold read fine."""
    with pytest.raises(TypeError):
        CheckResult("pcie.link", "gpu0", PASS)  # type: ignore[misc]
    result = CheckResult(id="pcie.link", subject="gpu0", status=PASS)
    assert result.to_dict()["status"] == PASS


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown status 'INFO'"):
        CheckResult(id="x", subject="node", status="INFO")


def test_the_severity_order_is_fail_error_inconclusive_warn_skip_pass() -> None:
    """One order for every verdict: a judged fault (FAIL) outranks a step that could not run (ERROR)."""
    assert sorted(STATUSES, key=lambda s: -SEVERITY[s]) == [FAIL, ERROR, INCONCLUSIVE, WARN, SKIP, PASS]


# Modules whose status tuples their owners move on their own (the cluster engineer's, issue 21).
STATUS_TUPLES_ELSEWHERE = {"r9700ctl/report/cluster.py", "r9700ctl/cluster/model.py"}


def test_no_module_writes_a_list_of_statuses_of_its_own() -> None:
    """A tuple, list or set of status names is written once, in agent/result.py (STATUSES, QUIET,
    NOT_JUDGED, SEVERITY): doctor, the HTML report, the fleet judge, validate and the known-issue
    matcher each wrote ("PASS", "SKIP") or ("INCONCLUSIVE", "ERROR") again."""
    import ast

    found = []
    for path in sorted((REPO / "r9700ctl").rglob("*.py")):
        where = str(path.relative_to(REPO))
        if where == "r9700ctl/agent/result.py" or where in STATUS_TUPLES_ELSEWHERE or "/lab/" in where:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) > 1:
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(words) == len(node.elts) and set(words) <= set(STATUSES):
                    found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_every_list_of_levels_is_the_one_list() -> None:
    """The CLI's --level and --gate-level, the check registry, the monitoring timer, the validate
    timeouts and the r9700_validate role's spec all name the levels of agent/levels.py."""
    from r9700ctl.agent.checks import ALL_LEVELS
    from r9700ctl.agent.monitor import MEASURING_LEVELS
    from r9700ctl.cli.upgrade import GATE_LEVELS as CLI_GATE_LEVELS
    from r9700ctl.cli.validate import LEVELS as CLI_LEVELS
    from r9700ctl.lifecycle.service import GATE_LEVELS

    assert levels.LEVEL_NAMES == ("config", "quick", "standard", "burnin")
    assert CLI_LEVELS is levels.LEVEL_NAMES and CLI_GATE_LEVELS is levels.LEVEL_NAMES
    assert GATE_LEVELS is levels.LEVEL_NAMES
    assert frozenset(levels.LEVEL_NAMES) == ALL_LEVELS
    assert MEASURING_LEVELS == levels.GPU_LEVELS == levels.from_level("quick")
    assert tuple(levels.TIMEOUT_S) == tuple(levels.LEVELS) == levels.LEVEL_NAMES
    spec = yaml.safe_load((REPO / "roles/r9700_validate/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert tuple(options["r9700_validate_level"]["choices"]) == levels.LEVEL_NAMES


def test_a_check_that_needs_a_depth_runs_at_that_level_and_every_deeper_one() -> None:
    assert levels.from_level("standard") == ("standard", "burnin")
    assert levels.from_level("config") == levels.LEVEL_NAMES


def test_the_validate_table_puts_the_reason_code_before_the_hint():
    """Issue 20: the code appears in the table too (what `r9700ctl explain CODE` takes)."""
    from r9700ctl.agent.report import render_table

    report = {
        "node": "n1",
        "level": "config",
        "gpus": [],
        "results": [
            CheckResult(
                id="platform.iommu",
                subject="node",
                status=WARN,
                hint="iommu=pt is missing",
                code="IOMMU_TRANSLATED",
            ).to_dict(),
            CheckResult(
                id="pcie.link", subject="gpu0", status=PASS, hint="the platform limits this card"
            ).to_dict(),
        ],
        "counts": {WARN: 1, PASS: 1},
        "status": WARN,
        "exit_code": 1,
    }
    lines = render_table(report).splitlines()
    assert "      IOMMU_TRANSLATED: iommu=pt is missing" in lines
    assert "      the platform limits this card" in lines


def test_a_pass_names_no_code_and_a_code_is_kept_on_every_other_verdict():
    assert CheckResult(id="x", subject="node", status=PASS, code="NO_THRESHOLD").code == ""
    assert CheckResult(id="x", subject="node", status=SKIP, code="REPORTED_ONLY").code == "REPORTED_ONLY"
