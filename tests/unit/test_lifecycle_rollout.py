"""Upgrade and rollback without Ansible: the plan per node, the batches, the gates and the stop rule.

What breaks if these fail: a bad --serial or --rocm would reach the nodes; a failed validation
would not stop the rollout and the next batch would be moved onto a broken release; the
summary would call a node upgraded that was never validated, or miss the untouched ones.
"""

from __future__ import annotations

from typing import Any

import pytest

from r9700ctl import manifest as manifest_module
from r9700ctl.errors import BadInput
from r9700ctl.lifecycle import plan as planning
from r9700ctl.lifecycle.rollout import (
    FAILED,
    LOST,
    UNCHANGED,
    UNTOUCHED,
    UPGRADED,
    Hooks,
    StepResult,
    roll_out,
)

MANIFEST = manifest_module.load()


def state(release: str) -> dict[str, Any]:
    return {"state": {"rocm_version": release, "amdgpu_version": MANIFEST.release(release).amdgpu}}


def resolved(release: str, runtime: bool = True) -> dict[str, Any]:
    return {
        "rocm_version": release,
        "amdgpu_version": MANIFEST.release(release).amdgpu,
        "driver_source": "dkms",
        "runtime": runtime,
    }


def test_bad_options_are_refused_with_one_line_before_any_host_is_contacted() -> None:
    with pytest.raises(BadInput, match=r"--rocm 9\.9: not a ROCm release r9700ctl knows") as unknown:
        planning.check_target("9.9", MANIFEST)
    assert "6.4.1" in unknown.value.one_line() and "auto" in unknown.value.one_line()
    assert planning.check_target("auto", MANIFEST) == "auto"
    with pytest.raises(BadInput, match=r"--serial 4: larger than the inventory \(3 host\(s\)\)"):
        planning.batch_size("4", 3)
    with pytest.raises(BadInput, match="not a count or a percentage"):
        planning.batch_size("two", 3)
    with pytest.raises(BadInput, match="must be 0 to 100"):
        planning.fail_percent(150)
    assert planning.batch_size(None, 3) == 1
    assert planning.batch_size("50%", 4) == 2
    assert planning.batch_size("10%", 3) == 1  # never an empty batch
    assert planning.batches(["a", "b", "c"], 2) == [["a", "b"], ["c"]]


def test_the_plan_says_from_to_and_whether_the_node_reboots() -> None:
    up = planning.plan_node("n1", state("6.4.1"), resolved("7.1.1"), manifest=MANIFEST)
    assert (up.action, up.downgrade, up.reboot) == (planning.MOVE, False, "yes")
    assert up.line() == "n1: upgrade ROCm 6.4.1 (amdgpu 6.4.1) -> ROCm 7.1.1 (amdgpu 30.20.1); reboot: yes"
    # No init system (the lab): the reboot is needed but cannot be done there, and says why.
    lab = planning.plan_node("n2", state("6.4.1"), resolved("7.1.1", runtime=False), manifest=MANIFEST)
    assert lab.reboot.startswith("needed, not done here: no init system")
    same = planning.plan_node("n3", state("7.1.1"), resolved("7.1.1"), manifest=MANIFEST)
    assert same.action == planning.NOTHING and "nothing to do" in same.line()
    down = planning.plan_node("n4", state("7.2.3"), resolved("6.4.1"), manifest=MANIFEST)
    assert down.downgrade and down.line().startswith("n4: downgrade ROCm 7.2.3")
    back = planning.plan_node("n5", state("7.1.1"), {}, target_release="6.4.1", manifest=MANIFEST)
    assert (back.to_release, back.to_driver, back.downgrade) == ("6.4.1", "6.4.1", True)


class Fleet:
    """Stand-in steps: records the calls; `bad` nodes fail validation, `lost` ones vanish in the move."""

    def __init__(self, bad: set[str] = frozenset(), lost: set[str] = frozenset()) -> None:
        self.bad, self.lost = set(bad), set(lost)
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def move(self, hosts: list[str], release: str) -> dict[str, StepResult]:
        self.calls.append(("move", tuple(hosts)))
        return {h: StepResult(ok=h not in self.lost, lost=h in self.lost, why="unreachable") for h in hosts}

    def gate(self, hosts: list[str]) -> dict[str, StepResult]:
        self.calls.append(("gate", tuple(hosts)))
        return {h: StepResult(ok=h not in self.bad, why="validation FAIL (planted)") for h in hosts}

    def resume(self, hosts: list[str]) -> dict[str, StepResult]:
        self.calls.append(("resume", tuple(hosts)))
        return {h: StepResult(ok=True) for h in hosts}


def plans(*hosts: str) -> list[planning.NodePlan]:
    return [planning.plan_node(h, state("6.4.1"), resolved("7.2.3"), manifest=MANIFEST) for h in hosts]


def test_batches_of_one_all_pass_and_each_node_is_validated_before_it_returns() -> None:
    fleet = Fleet()
    rollout = roll_out(plans("n1", "n2", "n3"), 1, move=fleet.move, gate=fleet.gate, resume=fleet.resume)
    assert [o.status for o in rollout.outcomes] == [UPGRADED] * 3
    assert [o.batch for o in rollout.outcomes] == [1, 2, 3]
    assert fleet.calls[:3] == [("move", ("n1",)), ("gate", ("n1",)), ("resume", ("n1",))]
    assert rollout.stopped == ""


def test_a_failed_validation_stops_the_rollout_and_the_rest_is_untouched() -> None:
    fleet = Fleet(bad={"n2"})
    rollout = roll_out(plans("n1", "n2", "n3"), 1, move=fleet.move, gate=fleet.gate, resume=fleet.resume)
    assert {o.host: o.status for o in rollout.outcomes} == {"n1": UPGRADED, "n2": FAILED, "n3": UNTOUCHED}
    assert rollout.of(FAILED)[0].why == "validation FAIL (planted)"
    assert ("resume", ("n2",)) not in fleet.calls, "a node that failed validation is not returned"
    assert all("n3" not in hosts for _, hosts in fleet.calls)
    assert rollout.stopped.startswith("1 of 3 node(s) failed")


def test_max_fail_percent_lets_the_rollout_go_on_while_the_failed_share_stays_below_it() -> None:
    fleet = Fleet(bad={"n1"})
    rollout = roll_out(
        plans("n1", "n2", "n3", "n4"),
        1,
        move=fleet.move,
        gate=fleet.gate,
        resume=fleet.resume,
        max_fail_percent=25,
    )
    assert [o.status for o in rollout.outcomes] == [FAILED, UPGRADED, UPGRADED, UPGRADED]


def test_a_node_lost_mid_upgrade_stops_the_rollout_whatever_the_fail_percent() -> None:
    fleet = Fleet(lost={"n1"})
    rollout = roll_out(
        plans("n1", "n2"), 1, move=fleet.move, gate=fleet.gate, resume=fleet.resume, max_fail_percent=100
    )
    assert {o.host: o.status for o in rollout.outcomes} == {"n1": LOST, "n2": UNTOUCHED}
    assert "lost n1 mid-way" in rollout.stopped


def test_nodes_already_at_the_target_are_not_moved_and_hooks_run_per_node(tmp_path) -> None:
    fleet = Fleet()
    log = tmp_path / "hooks.log"
    hooks = Hooks(drain=f"echo drain {{node}} >> {log}", resume=f"echo resume {{node}} >> {log}")
    node_plans = [
        planning.plan_node("n1", state("7.2.3"), resolved("7.2.3"), manifest=MANIFEST),
        *plans("n2"),
    ]
    rollout = roll_out(node_plans, 1, move=fleet.move, gate=fleet.gate, resume=fleet.resume, hooks=hooks)
    assert [o.status for o in rollout.outcomes] == [UNCHANGED, UPGRADED]
    assert fleet.calls[0] == ("move", ("n2",))
    assert log.read_text() == "drain n2\nresume n2\n"


def test_a_failing_drain_hook_fails_its_node_before_anything_changes_on_it() -> None:
    fleet = Fleet()
    rollout = roll_out(
        plans("n1", "n2"),
        1,
        move=fleet.move,
        gate=fleet.gate,
        resume=fleet.resume,
        hooks=Hooks(drain="exit 3"),
    )
    assert rollout.outcomes[0].status == FAILED and "drain hook failed (exit 3)" in rollout.outcomes[0].why
    assert fleet.calls == []


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    import sys

    from r9700ctl.cli import main

    monkeypatch.setattr(sys, "argv", ["r9700ctl", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0), capsys.readouterr().err


def test_the_cli_refuses_bad_input_in_one_line_without_contacting_a_host(
    monkeypatch, capsys, tmp_path
) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[r9700_nodes]\nn1 ansible_host=192.0.2.1\nn2 ansible_host=192.0.2.2\n")
    rc, err = run_cli(monkeypatch, capsys, "upgrade", str(inventory), "--rocm", "5.0")
    assert rc == 64 and err.count("\n") == 1 and err.startswith("error: --rocm 5.0: not a ROCm release")
    rc, err = run_cli(monkeypatch, capsys, "upgrade", str(inventory), "--rocm", "7.1.1", "--serial", "3")
    assert rc == 64 and err == (
        "error: --serial 3: larger than the inventory (2 host(s)) "
        "(use --serial 2 or less, or a percentage such as 50%)\n"
    )
    rc, err = run_cli(monkeypatch, capsys, "rollback", str(inventory), "--max-fail-percent", "101")
    assert rc == 64 and "--max-fail-percent 101: must be 0 to 100" in err


def test_the_no_worse_gate_rule_returns_a_node_only_when_nothing_got_worse() -> None:
    from r9700ctl.lifecycle.service import got_worse
    from r9700ctl.validate import NodeOutcome

    def node(status: str, *results: tuple[str, str]) -> NodeOutcome:
        report = {"results": [{"id": i, "subject": "node", "status": s} for i, s in results]}
        return NodeOutcome("n1", status, report=report if results else None)

    lab_before = node("FAIL", ("inventory.count", "FAIL"))
    assert got_worse(lab_before, node("FAIL", ("inventory.count", "FAIL"))) == ""
    assert got_worse(lab_before, node("NO_REPORT")) == "worse than before the move (FAIL then)"
    newly = node("FAIL", ("inventory.count", "FAIL"), ("driver.rocm", "FAIL"))
    assert got_worse(lab_before, newly) == "driver.rocm on node newly FAIL"
    assert got_worse(node("WARN", ("env", "WARN")), node("WARN", ("env", "WARN"))) == ""


def test_a_driver_change_on_a_node_that_cannot_reboot_is_reported_as_a_pending_reboot() -> None:
    fleet = Fleet()
    lab = [planning.plan_node("n1", state("6.4.1"), resolved("7.2.3", runtime=False), manifest=MANIFEST)]
    rollout = roll_out(lab, 1, move=fleet.move, gate=fleet.gate, resume=fleet.resume)
    assert rollout.outcomes[0].status == UPGRADED
    assert rollout.outcomes[0].reboot_pending == [
        "amdgpu 6.4.1 -> 30.30.3: needed, not done here: no init system to reboot with (runtime steps off)"
    ]


def test_the_plan_names_what_holds_dev_kfd() -> None:
    info = {**state("6.4.1"), "kfd_holders": [{"pid": 4242, "command": "python3 train.py"}]}
    plan = planning.plan_node("n1", info, resolved("7.1.1"), manifest=MANIFEST)
    assert plan.line().endswith("; /dev/kfd held by PID 4242 (python3 train.py) (stopped only with --force)")


def test_a_refused_kernel_names_what_was_undone_so_the_node_boots_its_running_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The runner keeps 300 characters of a failed task's message; the role's report of what it undid
    (the new kernel removed, the next boot the running one) must reach the summary whole."""
    from r9700ctl import ansible_run
    from r9700ctl.lifecycle import service

    undone = (
        "removed linux-headers-6.99.1-1-lab, linux-image-6.99.1-1-lab; returned linux-image-lab to 1.0; "
        "the next boot is the running kernel 6.8.0-49-generic"
    )
    host = ansible_run.HostResult(
        host="node1", started=True, failed=1, facts={"r9700_lifecycle": {"undone": undone}}
    )
    host.failed_tasks.append(
        ansible_run.FailedTask(task="Kernel | Refuse", message="not rebooted: " + "x" * 280)
    )
    result = ansible_run.RunResult("failed", 2, {"node1": host}, tmp_path, tmp_path, None, None)  # type: ignore[arg-type]
    monkeypatch.setattr(ansible_run, "run_playbook", lambda request, on_progress=None: result)
    options = service.LifecycleOptions(inventory=tmp_path / "hosts.ini", mode=service.KERNEL)
    step = service.move_kernel(options, ["node1"], lambda _: None)["node1"]
    assert not step.ok and not step.lost
    assert step.why.startswith("Kernel | Refuse: not rebooted: ")
    assert step.why.endswith(f"(kept bootable: {undone})")


def test_kernel_upgrade_check_shows_the_running_and_the_next_kernel_per_node() -> None:
    """kernel-upgrade --check: from r9700-lifecycle kernel-plan (apt-get -s of the node's line)."""
    simulated = {
        "running": "6.8.0-49-generic",
        "to": "6.8.0-51-generic",
        "installs": {"linux-image-6.8.0-51-generic": "6.8.0-51.52", "linux-image-generic": "6.8.0-51.52"},
        "error": "",
    }
    plan = planning.plan_kernel("node1", {"kernel_plan": simulated, "systemd": True})
    assert plan.kernel_line() == (
        "node1: kernel 6.8.0-49-generic -> 6.8.0-51-generic (installs linux-image-6.8.0-51-generic "
        "6.8.0-51.52, linux-image-generic 6.8.0-51.52); amdgpu built by DKMS and checked before the "
        "reboot; reboot: yes"
    )
    newest = planning.plan_kernel("node2", {"kernel_plan": {**simulated, "to": "", "installs": {}}})
    assert newest.action == planning.NOTHING
    assert newest.kernel_line() == "node2: nothing to do, kernel 6.8.0-49-generic is the newest of its line"
    no_line = planning.plan_kernel("node3", {"kernel_plan": {**simulated, "error": "no kernel meta package"}})
    assert (
        no_line.action == planning.REFUSED
        and no_line.kernel_line() == "node3: REFUSED: no kernel meta package"
    )


def test_the_no_worse_gate_ranks_statuses_in_the_one_severity_order() -> None:
    """Issue 20: lifecycle ranked ERROR above FAIL while the agent ranked FAIL above ERROR; the gate
    now uses the one order (agent/result.py SEVERITY): a FAIL after an ERROR got worse, not the
    reverse, and a node without a report is worse than any status."""
    from r9700ctl.lifecycle.service import got_worse
    from r9700ctl.validate import NodeOutcome

    assert (
        got_worse(NodeOutcome("n1", "ERROR"), NodeOutcome("n1", "FAIL"))
        == "worse than before the move (ERROR then)"
    )
    assert got_worse(NodeOutcome("n1", "FAIL"), NodeOutcome("n1", "ERROR")) == ""
    assert got_worse(NodeOutcome("n1", "FAIL"), NodeOutcome("n1", "UNREACHABLE")) != ""
    assert got_worse(NodeOutcome("n1", "PASS"), NodeOutcome("n1", "INCONCLUSIVE")) != ""


def test_the_gate_gives_each_node_a_verdict_of_the_one_model_with_its_reason_code(
    monkeypatch, tmp_path
) -> None:
    """Issue 20: the lifecycle gate's decision is a CheckResult (lifecycle.gate, with a reason code)
    kept on the node's outcome, so the rollout's JSON carries it like any other verdict."""
    from types import SimpleNamespace

    from r9700ctl.lifecycle import service
    from r9700ctl.validate import NodeOutcome

    report = SimpleNamespace(
        nodes=[
            NodeOutcome("n1", "WARN", report={"results": []}),
            NodeOutcome(
                "n2", "FAIL", report={"results": [{"id": "pcie.link", "subject": "gpu0", "status": "FAIL"}]}
            ),
            NodeOutcome("n3", "UNREACHABLE", error="ssh: no route"),
        ],
        reports_dir=tmp_path,
    )
    monkeypatch.setattr(service, "validation", lambda options, hosts: report)
    options = service.LifecycleOptions(inventory=tmp_path / "inventory.ini")
    results = service.gate(options, ["n1", "n2", "n3"], lambda text: None)
    verdicts = {host: r.verdict for host, r in results.items()}
    assert [(v.id, v.status, v.code, v.value) for v in verdicts.values()] == [
        ("lifecycle.gate", "PASS", "", "WARN"),
        ("lifecycle.gate", "FAIL", "GATE_NOT_PASSED", "FAIL"),
        ("lifecycle.gate", "FAIL", "GATE_NODE_LOST", "UNREACHABLE"),
    ]
    assert verdicts["n2"].hint.startswith("validation FAIL after the move (pcie.link FAIL on gpu0")
