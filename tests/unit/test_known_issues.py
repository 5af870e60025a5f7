"""Known issues as data: the schema holds every entry to sources, a detection and a workaround;
docs/known-issues.md is the manifest rendered; `r9700ctl known-issues` filters and prints them;
a node is matched on its GPUs, release and environment the same way everywhere."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from r9700ctl import known_issues as ki
from r9700ctl import manifest as manifest_module
from r9700ctl.agent.known_issue_match import NodeView, annotate, match
from r9700ctl.agent.parsers import dmesg
from r9700ctl.agent.result import ERROR, CheckResult
from r9700ctl.cli import cli
from r9700ctl.paths import data_file
from r9700ctl.report.known_issues import render_markdown

MANIFEST_RELEASES = manifest_module.load().release_names()

ROOT = Path(__file__).resolve().parents[2]
R9700 = ("1002:7551", "gfx1201")
MI300X = ("1002:74a1", "gfx942")


@pytest.fixture(scope="module")
def manifest():
    return manifest_module.load()


@pytest.fixture(scope="module")
def schema():
    return json.loads(data_file("known_issues.schema.json").read_text(encoding="utf-8"))


def sections(manifest) -> dict:
    return {k: copy.deepcopy(manifest.raw[k]) for k in ("known_issues", "kernel_log_signatures")}


def errors(schema, document) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    return [e.message for e in validator.iter_errors(document)]


# ---------------------------------------------------------------- the schema


def test_the_shipped_entries_pass_the_schema(manifest, schema):
    assert errors(schema, sections(manifest)) == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda e: e.pop("sources"), "no source"),
        (lambda e: e.__setitem__("sources", []), "an empty source list"),
        (lambda e: e.__setitem__("sources", ["github.com/ROCm/x/issues/1"]), "a source that is not a URL"),
        (lambda e: e.pop("detection"), "no detection"),
        (lambda e: e.__setitem__("detection", {"how": "look at it"}), "a detection the tool cannot run"),
        (lambda e: e["workaround"].pop("default"), "no word on whether provision applies it"),
        (lambda e: e["applies_to"].pop("gfx"), "nothing it applies to"),
        (lambda e: e["applies_to"].__setitem__("rocm", {"min": "seven"}), "a release that is no version"),
        (lambda e: e["detection"].__setitem__("bundle", {"env.txt": "("}), "a regex that does not compile"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_schema_rejects_an_entry_missing_what_makes_it_usable(manifest, schema, change, why):
    """An entry nobody can check (no source) or act on (no detection, no workaround) is refused."""
    document = sections(manifest)
    change(document["known_issues"]["r9700-rccl-72-hang"])
    assert errors(schema, document), f"accepted an entry with {why}"


def test_the_schema_rejects_a_signature_without_a_code(manifest, schema):
    """A signature names its reason code, whose record (data/codes.yaml) carries its meaning, next
    step and sources: without one nobody could check or act on it (issue 20: texts live once)."""
    document = sections(manifest)
    document["kernel_log_signatures"]["mes"].pop("code")
    assert errors(schema, document)


def test_every_dmesg_kind_has_its_meaning_in_the_manifest_and_no_more(manifest):
    """The parser recognises the lines, the manifest explains them: one list of kinds on both sides."""
    assert set(ki.signatures(manifest)) == {kind for kind, _ in dmesg.PATTERNS}


def test_issue_ids_named_in_texts_exist(manifest):
    """Entries point at each other by id (the 4-card IPC failure at hsa-ipc-mode-legacy)."""
    ids = {i.id for i in ki.issues(manifest)}
    texts = json.dumps(sections(manifest))
    for word in ("hsa-ipc-mode-legacy", "r9700-p2p-host-hang", "r9700-fan-stopped"):
        assert word in ids and word in texts


def test_a_blocking_issue_names_a_release_without_it(manifest):
    """`auto` can only skip a release when the entry says which one works."""
    for issue in ki.issues(manifest):
        if issue.blocking:
            release = issue.workaround.get("release")
            assert release in manifest.releases, issue.id
            assert issue.covers_release(release) is False, issue.id


# ---------------------------------------------------------------- docs/known-issues.md


def test_docs_known_issues_is_the_manifest_rendered(manifest):
    """Regenerate with: r9700ctl known-issues --markdown > docs/known-issues.md"""
    assert (ROOT / ki.DOC_PATH).read_text(encoding="utf-8") == render_markdown(manifest)


def test_the_docs_give_every_issue_a_section_with_its_sources(manifest):
    text = render_markdown(manifest)
    for issue in ki.issues(manifest):
        section = text.split(f"\n## {issue.id}\n", 1)[1].split("\n## ", 1)[0]
        for url in issue.sources:
            assert f"<{url}>" in section
        assert "Workaround:" in section and "Detection:" in section


# ---------------------------------------------------------------- matching a node


def by_id(manifest, issue_id):
    return next(i for i in ki.issues(manifest) if i.id == issue_id)


@pytest.mark.parametrize(
    ("gpus", "rocm", "applies"),
    [
        ((R9700, R9700), "7.2.3", True),
        ((R9700, R9700), "7.2.0", True),
        ((R9700, R9700), "7.1.1", False),
        ((R9700,), "7.2.3", False),  # one GPU: no collective to hang
        ((MI300X, MI300X), "7.2.3", False),
        ((R9700, R9700), "7.2.1.70201-81~24.04", True),  # rocm-core's package version
    ],
)
def test_the_rccl_hang_applies_to_two_gfx1201_gpus_on_7_2_only(manifest, gpus, rocm, applies):
    issue = by_id(manifest, "r9700-rccl-72-hang")
    assert (match(issue, NodeView(gpus=gpus, rocm=rocm)) is not None) is applies


def test_an_unknown_release_matches_on_the_gpus_and_says_so(manifest):
    found = match(by_id(manifest, "r9700-rccl-72-hang"), NodeView(gpus=(R9700, R9700), rocm=None))
    assert found is not None and found.release_known is False


def test_an_environment_trigger_and_a_workaround_decide_whether_the_issue_is_active(manifest):
    legacy = by_id(manifest, "hsa-ipc-mode-legacy")
    node = NodeView(gpus=(R9700,), rocm="7.2.1", env={"HSA_ENABLE_IPC_MODE_LEGACY": "1"})
    assert match(legacy, node).active
    assert not match(legacy, NodeView(gpus=(R9700,), rocm="7.2.1", env={})).active
    hang = by_id(manifest, "r9700-rccl-72-hang")
    mitigated = match(hang, NodeView(gpus=(R9700, R9700), rocm="7.2.3", env={"NCCL_PROTO": "Simple"}))
    assert mitigated.mitigated and not mitigated.active
    unseen = match(hang, NodeView(gpus=(R9700, R9700), rocm="7.2.3", env=None))
    assert unseen.mitigated is None and unseen.active


def test_an_issue_keyed_by_pci_id_skips_other_gfx1201_cards(manifest):
    """The hotspot bit is shown on the R9700 (1002:7551); the RX 9070 shares gfx1201 but no source."""
    issue = by_id(manifest, "r9700-hotspot-throttle-bit")
    assert match(issue, NodeView(gpus=(R9700,))) is not None
    assert match(issue, NodeView(gpus=(("1002:7550", "gfx1201"),))) is None


def test_a_hint_names_the_issue_its_workaround_and_source(manifest):
    hint = by_id(manifest, "r9700-rccl-72-hang").hint()
    assert hint.startswith("known issue r9700-rccl-72-hang: RCCL collectives deadlock")
    assert "workaround NCCL_PROTO=Simple or ROCm 7.1.1" in hint
    assert hint.endswith("see https://github.com/vllm-project/vllm/issues/40980")


# ---------------------------------------------------------------- the `auto` choice


def test_auto_skips_7_2_3_on_a_multi_gpu_gfx1201_node_and_says_why(manifest):
    candidates = manifest.releases_supporting({"gfx1201"}, "ubuntu-24.04")
    assert candidates[-1] == "7.2.3"
    choice = ki.auto_release(ki.issues(manifest), [R9700] * 4, candidates)
    assert choice.release == "7.1.1"
    assert [release for release, _ in choice.skipped] == ["7.2.3"]
    assert "skipped 7.2.3: known issue r9700-rccl-72-hang" in choice.skipped_text()


def test_auto_keeps_the_newest_release_without_a_blocking_issue(manifest):
    candidates = manifest.releases_supporting({"gfx1201"}, "ubuntu-24.04")
    one_card = ki.auto_release(ki.issues(manifest), [R9700], candidates)
    assert (one_card.release, one_card.skipped) == ("7.2.3", ())
    mi300 = ki.auto_release(ki.issues(manifest), [MI300X] * 8, manifest.releases_supporting({"gfx942"}))
    assert mi300.release == manifest.release_names()[-1] and not mi300.skipped


def test_auto_takes_the_newest_when_every_release_is_blocked(manifest):
    candidates = ["7.2.0", "7.2.3"]
    choice = ki.auto_release(ki.issues(manifest), [R9700] * 2, candidates)
    assert choice.release == "7.2.3" and choice.all_blocked


# ---------------------------------------------------------------- the command


def invoke(*args: str):
    return CliRunner().invoke(cli, ["known-issues", *args], catch_exceptions=False)


def test_the_command_filters_by_gpu_and_release():
    result = invoke("--gpu", "1002:7551", "--rocm", "7.1.1")
    assert result.exit_code == 0, result.output
    assert "r9700-rccl-72-hang" not in result.output
    assert "r9700-hotspot-throttle-bit [false signal]" in result.output
    assert result.output.rstrip().splitlines()[-1] == (
        "5 known issue(s) for AMD Radeon AI PRO R9700 (1002:7551, gfx1201) and ROCm 7.1.1; "
        "--verbose adds effect, detection and sources"
    )


def test_the_command_says_when_nothing_matches():
    result = invoke("--gpu", "gfx942")
    assert (result.exit_code, result.output) == (0, "no known issue for gfx942\n")


def test_json_to_stdout_is_the_whole_document():
    result = invoke("--gpu", "gfx1201", "--rocm", "7.2.3", "--json", "-")
    document = json.loads(result.output)
    assert document["schema"] == "r9700ctl.known-issues/1"
    assert document["filters"] == {"gpu": "gfx1201", "rocm": "7.2.3"}
    first = document["known_issues"][0]
    assert first["id"] == "r9700-rccl-72-hang" and first["blocking"] is True
    assert first["workaround"]["env"] == {"NCCL_PROTO": "Simple"}


def test_json_to_a_file_and_the_table(tmp_path):
    out = tmp_path / "ki.json"
    result = invoke("--json", str(out))
    assert result.exit_code == 0 and "6 known issue(s);" in result.output
    assert len(json.loads(out.read_text())["known_issues"]) == 6


def run(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("r9700ctl")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "r9700ctl"]
    return subprocess.run(
        [*command, "known-issues", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--gpu", "GTX 1080"],
            "error: --gpu 'GTX 1080' names no GPU in r9700ctl's manifest (give a PCI id (1002:164e, "
            "1002:744c, 1002:74a1, 1002:7550, 1002:7551 or a gfx target such as gfx1201) or part of a "
            "model name (R9700))",
        ),
        (
            ["--rocm", "latest"],
            "error: --rocm 'latest' is not a ROCm version (give a release number such as 7.2.3 or 7.1)",
        ),
        (
            ["--rocm", "9.9"],
            "error: --rocm 9.9 is not a ROCm release r9700ctl knows (give one of "
            f"{', '.join(MANIFEST_RELEASES)}, or a line such as {MANIFEST_RELEASES[-1].rsplit('.', 1)[0]})",
        ),
        (
            ["--rocm", "7.2.1"],  # a release of AMD's the manifest does not list: its line (7.2) works
            "error: --rocm 7.2.1 is not a ROCm release r9700ctl knows (give one of "
            f"{', '.join(MANIFEST_RELEASES)}, or a line such as {MANIFEST_RELEASES[-1].rsplit('.', 1)[0]})",
        ),
        (
            ["--markdown", "--gpu", "gfx1201"],
            "error: --markdown prints the whole list and takes no --gpu, --rocm or --json (drop the "
            "filters, or drop --markdown)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_64(args, line):
    """Bad filters are refused, never answered with an unfiltered list that looks like an answer."""
    result = run(*args)
    assert (result.returncode, result.stdout, result.stderr) == (64, "", line + "\n")


def test_agent_check_ids_named_by_issues_are_results_the_agent_gives(manifest):
    """A renamed check would silently stop naming its known issue: the ids must exist in the agent."""
    from r9700ctl.agent import checks

    assert checks.load_all() == {}
    families = {*checks.known_names(), "node"}  # node.*: the runner's own results
    files = [*(ROOT / "r9700ctl/agent/checks").glob("*.py"), ROOT / "r9700ctl/agent/check_run.py"]
    source = "".join(p.read_text(encoding="utf-8") for p in files)
    for issue in ki.issues(manifest):
        for check_id in issue.agent_checks:
            assert check_id.split(".")[0] in families, (issue.id, check_id)
            assert f'"{check_id}"' in source, (issue.id, check_id)


# ---------------------------------------------------------------- results that name a known issue

FIXTURES = ROOT / "tests" / "fixtures"


def recorded_log(name: str) -> str:
    lines = (FIXTURES / "rccl" / name).read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines[1:] if line.strip())  # the first line names the source


def timed_out_allreduce() -> CheckResult:
    """collective.allreduce as the agent reports a step its watchdog killed."""
    from r9700ctl.agent.context import AgentContext
    from r9700ctl.agent.thresholds import resolve
    from r9700ctl.agent.watchdog import TIMEOUT, StepOutcome

    ctx = AgentContext(level="quick", gpus=[], thresholds=resolve([], []), params={})
    outcome = StepOutcome("collective.allreduce.ring", TIMEOUT, error="killed after 600 s", duration_s=600.0)
    return ctx.outcome_result("collective.allreduce", "ring", outcome)


def crashed_p2p(log: str) -> CheckResult:
    return CheckResult(
        id="p2p.bandwidth",
        subject="gpu0->gpu1",
        status=ERROR,
        metric="error",
        threshold="step must return a result",
        hint="the p2p step failed",
        evidence={"step": "p2p.bandwidth", "error": log},
        code="STEP_CRASHED",
    )


def test_a_timed_out_allreduce_on_two_gfx1201_with_rocm_7_2_names_the_rccl_hang(manifest):
    result = timed_out_allreduce()
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700, R9700), rocm="7.2.1", env={}))
    assert result.status == ERROR  # named, never re-judged
    assert result.evidence["known_issues"] == ["r9700-rccl-72-hang"]
    assert result.hint.startswith("a GPU step hung and was killed; ")
    assert "; known issue r9700-rccl-72-hang: RCCL collectives deadlock" in result.hint
    assert "workaround NCCL_PROTO=Simple or ROCm 7.1.1" in result.hint


@pytest.mark.parametrize(
    ("rocm", "env", "why"),
    [
        ("7.1.1", {}, "a release without the issue"),
        ("7.2.1", {"NCCL_PROTO": "Simple"}, "the workaround in force"),
    ],
)
def test_the_rccl_hang_is_not_named_where_it_cannot_bite(manifest, rocm, env, why):
    result = timed_out_allreduce()
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700, R9700), rocm=rocm, env=env))
    assert "known issue" not in result.hint and "known_issues" not in result.evidence, why


def test_a_slow_but_finished_allreduce_is_not_the_hang(manifest):
    """The hang is a step that never finishes: a low figure names no deadlock."""
    hint = "bus bandwidth 3.1 GB/s below the 5 GB/s floor"
    result = CheckResult(
        id="collective.allreduce",
        subject="ring",
        status="WARN",
        metric="busbw",
        value=3.1,
        unit="GB/s",
        threshold=">= 5",
        hint=hint,
        evidence={},
        code="ALLREDUCE_BELOW_FLOOR",
    )
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700, R9700), rocm="7.2.1", env={}))
    assert result.hint == hint and "known_issues" not in result.evidence


def test_a_host_reset_during_a_p2p_step_on_four_r9700s_names_the_host_hang(manifest):
    """The agent's journal shows the previous run died with the host in a P2P step (rocm-systems#11348)."""
    from r9700ctl.agent.check_run import previous_run_results
    from r9700ctl.agent.journal import Interrupted

    previous = Interrupted(
        run_id="r1", level="standard", started="2026-12-02T10:00:00+0000", boot_id="b0", rebooted=True,
        open_steps=[{"step": "p2p.bandwidth.0-1", "gpus": [0, 1]}],
    )  # fmt: skip
    (result,) = previous_run_results(previous)
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700,) * 4, rocm="7.2.1", env={}))
    assert result.status == "FAIL" and result.evidence["known_issues"] == ["r9700-p2p-host-hang"]
    (two,) = previous_run_results(previous)
    annotate([two], ki.issues(manifest), NodeView(gpus=(R9700,) * 2, rocm="7.2.1", env={}))
    assert "known_issues" not in two.evidence  # seen on four cards only


def test_a_passing_result_names_nothing(manifest):
    result = CheckResult(
        id="collective.allreduce",
        subject="ring",
        status="PASS",
        metric="busbw",
        value=20.0,
        unit="GB/s",
        threshold=">= 5",
        evidence={},
    )
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700, R9700), rocm="7.2.1", env={}))
    assert (result.hint, result.evidence) == ("", {})


def test_the_recorded_ipc_errors_name_the_ipc_issues_their_environment_allows(manifest):
    """rccl-tests#162's RCCL warning on 4x R9700 names the 4-card P2P failure; the runtime's error of
    rocm-systems#2209 names the legacy IPC mode only when the environment has it set."""
    four = (R9700,) * 4
    rccl = crashed_p2p(recorded_log("r9700-4x-ipc-invalid.log"))
    annotate([rccl], ki.issues(manifest), NodeView(gpus=four, rocm="7.1.1", env={}))
    assert rccl.evidence["known_issues"] == ["r9700-4x-p2p-ipc-invalid"]

    legacy = crashed_p2p(recorded_log("r9700-ipc-legacy-mode.log"))
    annotate(
        [legacy],
        ki.issues(manifest),
        NodeView(gpus=four, rocm="7.2.1", env={"HSA_ENABLE_IPC_MODE_LEGACY": "1"}),
    )
    assert "hsa-ipc-mode-legacy" in legacy.evidence["known_issues"]
    assert "known issue hsa-ipc-mode-legacy: " in legacy.hint

    unset = crashed_p2p(recorded_log("r9700-ipc-legacy-mode.log"))
    annotate(
        [unset],
        ki.issues(manifest),
        NodeView(gpus=four, rocm="7.2.1", env={"HSA_ENABLE_IPC_MODE_LEGACY": "0"}),
    )
    assert "hsa-ipc-mode-legacy" not in unset.evidence.get("known_issues", [])


def test_a_result_already_naming_its_issue_is_not_named_twice(manifest):
    """power.fan names the stopped-fan issue itself; the runner's pass adds nothing."""
    hint = "fan at 0 rpm; known issue r9700-fan-stopped: R9700 fans ...; see https://x"
    result = CheckResult(
        id="power.fan",
        subject="gpu0",
        status="FAIL",
        metric="fan_rpm",
        value=0.0,
        unit="rpm",
        hint=hint,
        evidence={},
        code="FAN_STALLED",
    )
    annotate([result], ki.issues(manifest), NodeView(gpus=(R9700,), rocm="7.2.1", env={}))
    assert result.hint == hint and result.hint.count("known issue") == 1


@pytest.mark.parametrize("given", ["7.2.3", "7.2", "7"])
def test_a_manifest_release_or_its_line_is_a_filter(given):
    assert ki.check_version(given, MANIFEST_RELEASES) == given
