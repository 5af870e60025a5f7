"""The converged check: the key of what a provision is asked to do, and the node's record of what
the last complete run left (r9700ctl/converge.py, r9700ctl/agent/converged.py).

A node that is wrongly found converged keeps a change from happening, so these pin every way a
node can differ from its record (a file edited, gone or new, a mode, a database) and every input
of the key (a value, a fact the roles read, the code), and that nothing volatile (the record
itself, gpg's trust database, the monitoring metrics) makes a converged node look changed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import collection_plugins
import pytest

from r9700ctl import converge
from r9700ctl.agent import converged

ROOT = Path(__file__).resolve().parents[2]
ACTION = collection_plugins.plugin("action", "r9700_converged")
verdict = ACTION.verdict


VERSIONS = {"r9700_versions": {"before": {}, "after": {}}}


@pytest.fixture
def node(tmp_path: Path) -> dict:
    """A managed file, a directory and an owned directory with a state file and a gpg home."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/r9700.sh").write_text("export A=1\n")
    (tmp_path / "owned/gnupg").mkdir(parents=True)
    (tmp_path / "owned/state.json").write_text("{}\n")
    (tmp_path / "owned/gnupg/trustdb.gpg").write_bytes(b"1")
    managed = {
        "files": [str(tmp_path / "etc/r9700.sh"), str(tmp_path / "etc/absent.conf")],
        "dirs": [str(tmp_path / "etc")],
        "owned_dirs": [str(tmp_path / "owned")],
        "units": [],
    }
    where = str(tmp_path / "owned/converged.json")
    converged.record({"key": "K", "managed": managed, "facts": VERSIONS, "recorded_at": 1796400000}, where)
    return {"root": tmp_path, "managed": managed, "where": where}


def check(node: dict) -> dict:
    return converged.check({"managed": node["managed"]}, node["where"])


def test_a_node_as_recorded_has_no_difference_and_hands_back_the_recorded_facts(node):
    answer = check(node)
    assert answer["recorded_key"] == "K" and answer["differences"] == []
    assert answer["facts"] == VERSIONS


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda r: (r / "etc/r9700.sh").write_text("export A=2\n"), "etc/r9700.sh changed"),
        (lambda r: (r / "etc/r9700.sh").unlink(), "etc/r9700.sh is gone"),
        (lambda r: (r / "etc/r9700.sh").chmod(0o600), "etc/r9700.sh changed"),
        (lambda r: (r / "etc/absent.conf").write_text("x\n"), "etc/absent.conf appeared"),
        (lambda r: (r / "owned/extra.json").write_text("{}\n"), "owned/extra.json appeared"),
        (lambda r: (r / "owned/state.json").write_text('{"a": 1}\n'), "owned/state.json changed"),
        (lambda r: (r / "etc").chmod(0o700), "etc changed"),
    ],
    ids=["edited", "removed", "mode", "a file provision removes came back", "new in an owned dir",
         "state file", "directory mode"],
)  # fmt: skip
def test_every_way_a_managed_path_can_differ_is_named(node, change, said):
    change(node["root"])
    found = check(node)["differences"]
    assert [d for d in found if d.endswith(said)], found


def test_what_other_programs_rewrite_between_runs_is_not_a_difference(node):
    (node["root"] / "owned/gnupg/trustdb.gpg").write_bytes(b"2")  # gpg rewrites it on every use
    converged.record({"key": "K2", "managed": node["managed"]}, node["where"])  # the record itself
    assert check(node)["differences"] == []


def test_a_second_record_of_the_same_node_changes_nothing(node):
    again = converged.record({"key": "K", "managed": node["managed"], "facts": VERSIONS}, node["where"])
    assert again["changed"] is False
    assert converged.record({"key": "other", "managed": node["managed"]}, node["where"])["changed"] is True


def test_a_complete_run_after_a_cold_one_records_the_same_facts(node):
    """The cold run installed ROCm and pulled the image; a later complete run that changes nothing
    (provision --full) finds both there. Recorded as a converged run reports them, the two records
    are the same (changed=0), and a converged run says nothing was installed since."""
    image = "rocm/pytorch:tag"
    cold = {
        "r9700_versions": {"before": {}, "after": {"rocm-core": "7.1.1"}, "packages": ["rocm"]},
        "r9700_containers_status": {"image": f"{image} (pulled)", "smoke": "SKIP: no dockerd"},
    }
    full = {
        "r9700_versions": {
            "before": {"rocm-core": "7.1.1"},
            "after": {"rocm-core": "7.1.1"},
            "packages": ["rocm"],
        },
        "r9700_containers_status": {"image": f"{image} (present)", "smoke": "SKIP: no dockerd"},
    }
    assert converged.record({"key": "K", "managed": node["managed"], "facts": cold}, node["where"])["changed"]
    again = converged.record({"key": "K", "managed": node["managed"], "facts": full}, node["where"])
    assert again["changed"] is False
    assert check(node)["facts"] == full


def test_no_record_or_another_version_is_never_converged(node, tmp_path):
    assert converged.check({"managed": node["managed"]}, str(tmp_path / "none.json"))["recorded_key"] is None
    Path(node["where"]).write_text(json.dumps({"schema": "r9700ctl.converged/0", "key": "K"}))
    answer = check(node)
    assert answer["recorded_key"] is None and "another version" in answer["reason"]
    assert verdict(answer, "K")[0] is False


def test_the_verdict_needs_the_same_key_and_no_difference(node):
    same, reason = verdict(check(node), "K")
    assert same and reason.startswith("converged since 2026-12-04 ") and "--full" in reason
    inputs_differ = "not converged: this run's inputs (variables, roles, r9700ctl) are not the last run's"
    assert verdict(check(node), "K-other") == (False, inputs_differ)
    (node["root"] / "etc/r9700.sh").write_text("edited\n")
    same, reason = verdict(check(node), "K")
    assert (
        not same
        and reason == f"not converged: since the last complete run {node['root']}/etc/r9700.sh changed"
    )


BASE = {"r9700_rocm_version": "auto", "inventory_hostname": "node1", "ansible_run_tags": ["all"]}


def test_the_key_follows_every_value_and_the_scope_of_the_run():
    base = converge.key(BASE)
    assert converge.key(dict(BASE)) == base
    assert converge.key({**BASE, "r9700_rocm_version": "6.4.1"}) != base
    assert converge.key({**BASE, "inventory_hostname": "node2"}) != base
    assert converge.key({**BASE, "ansible_run_tags": ["r9700_env"]}) != base
    # This run's own report is not an input.
    assert converge.key({**BASE, "r9700_preflight": {"clock_offset_s": 0.3}}) == base


CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9354P 32-Core Processor
cpu MHz\t\t: {mhz}
physical id\t: 0
core id\t\t: {n}
cpu cores\t: 32
siblings\t: 64
flags\t\t: fpu vme de pse tsc msr
bogomips\t: 6490.{mhz}
"""


@pytest.fixture
def machine_root(tmp_path: Path) -> Path:
    """A node's files the roles' facts come from (/etc/os-release, /proc/cpuinfo ...)."""
    for name, text in {
        "etc/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n',
        "etc/lsb-release": "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=24.04\n",
        "etc/debian_version": "trixie/sid\n",
        "proc/cpuinfo": "\n".join(CPUINFO.format(n=n, mhz=1500 + n) for n in range(2)),
        "proc/meminfo": "MemTotal:       263843840 kB\nMemFree:        200000000 kB\n",
        "proc/1/comm": "systemd\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "run/systemd/system").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "differs"),
    [
        (("proc/meminfo", "MemFree:", "MemFree:  1"), False),  # free memory is no fact the roles read
        (("proc/cpuinfo", "cpu MHz\t\t: 1500", "cpu MHz\t\t: 3700"), False),  # nor the clock
        (("proc/meminfo", "MemTotal:       263843840", "MemTotal:       131921920"), True),
        (("etc/os-release", "24.04", "26.04"), True),
        (("etc/debian_version", "trixie", "forky"), True),
        (("proc/cpuinfo", "EPYC 9354P", "EPYC 9554P"), True),
        (("proc/1/comm", "systemd", "init"), True),
        # microcode and kernels add flags: Ansible reads only "vme" of them (a Xen guest's tell)
        (("proc/cpuinfo", "fpu vme de", "fpu vme de avx512f"), False),
        (("proc/cpuinfo", "fpu vme de", "fpu de"), True),
    ],
)
def test_the_node_observes_what_the_roles_facts_come_from_and_nothing_that_moves(machine_root, edit, differs):
    """Provision gathers no facts on a node it finds converged: the node must see any change of
    what they come from (a node upgraded to another release, memory taken out), never a clock."""
    before = converged.machine(str(machine_root))
    name, old, new = edit
    text = (machine_root / name).read_text()
    assert old in text
    (machine_root / name).write_text(text.replace(old, new))
    assert (converged.machine(str(machine_root)) != before) is differs


@pytest.mark.parametrize(
    ("change", "entry"),
    [
        # systemd no longer booting the node, /sbin/init pointed elsewhere (service_mgr)
        (lambda root: (root / "run/systemd/system").rmdir(), "init"),
        (lambda root: (root / "sbin/init").symlink_to("/lib/sysvinit/init"), "init"),
        # a release file Ansible reads before os-release: it changes the distribution by existing
        (lambda root: (root / "etc/redhat-release").write_text(""), "os release"),
        (lambda root: (root / "etc/ec2_version").write_text("Ubuntu 24.04\n"), "os release"),
        # a Xen paravirtualised guest gets other processor facts
        (lambda root: (root / "proc/xen").mkdir(), "cpus"),
    ],
)
def test_each_other_input_of_the_facts_is_a_difference(machine_root, change, entry):
    """ansible-core 2.19's collectors read these too (distribution.py, service_mgr.py, linux.py)."""
    (machine_root / "sbin").mkdir(exist_ok=True)
    before = converged.machine(str(machine_root))
    change(machine_root)
    after = converged.machine(str(machine_root))
    assert after[entry] != before[entry]
    assert {name: value for name, value in after.items() if name != entry} == {
        name: value for name, value in before.items() if name != entry
    }


def test_every_fact_the_roles_read_is_observed_on_the_node(node):
    """Each fact the roles read (converge.FACTS) names where the node observes it, and observe()
    reports it: a fact without a source would let a changed node look converged."""
    assert set(converged.FACT_SOURCES) == set(converge.FACTS)
    observed = converged.observe(node["managed"])
    assert set(converged.FACT_SOURCES.values()) <= set(observed)


def test_a_per_run_temporary_file_counts_by_its_content(tmp_path):
    one, two = tmp_path / "a/r9700-node", tmp_path / "b/r9700-node"
    for path in (one, two):
        path.parent.mkdir()
        path.write_bytes(b"program")
    assert converge.key({**BASE, "r9700_node_program": str(one)}) == converge.key(
        {**BASE, "r9700_node_program": str(two)}
    )
    two.write_bytes(b"another program")
    assert converge.key({**BASE, "r9700_node_program": str(one)}) != converge.key(
        {**BASE, "r9700_node_program": str(two)}
    )


def test_the_key_follows_the_code(monkeypatch):
    base = converge.key(BASE)
    monkeypatch.setattr(converge, "content_digest", lambda: "another tree")
    assert converge.key(BASE) != base


def test_every_fact_the_roles_read_is_in_the_key():
    """A fact a role starts to read but the key leaves out would let a changed node look converged."""
    text = "\n".join(p.read_text() for d in ("roles", "playbooks") for p in (ROOT / d).rglob("*.yml"))
    text += "\n".join(p.read_text() for p in (ROOT / "roles").rglob("*.j2"))
    read = set(re.findall(r"ansible_facts\[['\"](\w+)['\"]\]", text))
    read |= set(re.findall(r"ansible_facts\.(\w+)", text))
    read |= {m for m in re.findall(r"\bansible_(\w+)", text)} & {
        "distribution", "distribution_release", "distribution_version", "os_family", "kernel",
        "architecture", "service_mgr", "processor", "hostname", "memtotal_mb"}  # fmt: skip
    registered = {name for name in read if name.startswith("getent_")}  # the getent module's own results
    keyed = {name.split(".")[0] for name in converge.FACTS}
    assert read - registered - keyed == set()
    # Of the environment, the roles read SUDO_USER only (r9700_access): the rest changes per session.
    assert "env']['SUDO_USER" in text and "env.SUDO_USER" in converge.FACTS


def test_neither_full_nor_the_versions_before_the_run_are_inputs():
    """--full must not make the next run full, nor must a run that installed something make the
    next one full again (the versions before a run are a report; the package database is observed)."""
    base = converge.key({**BASE, "r9700_resolved": {"rocm_version": "7.1.1", "installed_before": {}}})
    after = {"rocm_version": "7.1.1", "installed_before": {"rocm-core": "7.1.1"}}
    assert converge.key({**BASE, "r9700_lifecycle_skip_converged": False, "r9700_resolved": after}) == base
    assert converge.key({**BASE, "r9700_resolved": {"rocm_version": "7.2.3", "installed_before": {}}}) != base


@pytest.mark.parametrize(
    "path",
    ["/var/lib/r9700ctl/reports/node1.json", "/var/lib/r9700ctl/journal.jsonl",
     "/var/lib/r9700ctl/monitoring/last.json", "/var/lib/r9700ctl/images/rocm-pytorch.tar",
     "/var/lib/r9700ctl/keys/gnupg/trustdb.gpg",
     "/etc/r9700ctl/converged.json", "/var/lib/prometheus/node-exporter/r9700.prom",
     "/var/lib/r9700ctl/agent.lock", "/var/lib/r9700ctl/last-inventory.json"],
)  # fmt: skip
def test_what_validate_the_timer_and_gpg_write_between_provisions_is_volatile(path):
    assert converged._volatile(path)


@pytest.mark.parametrize(
    "path", ["/var/lib/r9700ctl/keys/rocm.gpg", "/etc/r9700ctl/state.json", "/etc/r9700ctl/node.json"]
)
def test_what_provision_writes_is_not_volatile(path):
    assert not converged._volatile(path)


def test_a_watched_path_that_appears_is_a_difference(node, tmp_path):
    """AMD's quick start writes /etc/apt/sources.list.d/rocm.list: provision removes it, so a node
    where it came back is not as the last run left it."""
    watched = {**node["managed"], "watched": [str(tmp_path / "rocm.list")]}
    converged.record({"key": "K", "managed": watched}, node["where"])
    (tmp_path / "rocm.list").write_text("deb https://repo.radeon.com/rocm/apt/6.3.2 noble main\n")
    found = converged.check({"managed": watched}, node["where"])["differences"]
    assert found == [f"{tmp_path}/rocm.list appeared"]


def test_a_converged_node_reports_the_last_runs_facts_and_says_its_smoke_check_is_that_runs():
    recorded = {
        "r9700_versions": {"before": {"rocm-core": "7.2.3"}, "after": {"rocm-core": "7.2.3"}},
        "r9700_containers_status": {"image": "rocm/pytorch:x (present)", "smoke": "PASS: 1 GPU(s)"},
    }
    assert ACTION.reported(recorded) == {
        "r9700_versions": recorded["r9700_versions"],
        "r9700_reboot_pending": False,
        "r9700_containers_status": {
            "image": "rocm/pytorch:x (present)",
            "smoke": "not run (node converged); the last complete run: PASS: 1 GPU(s)",
        },
    }
    # A record without containers (r9700_containers_enabled false) reports none.
    assert ACTION.reported({}) == {"r9700_versions": {}, "r9700_reboot_pending": False}


@pytest.mark.parametrize(
    ("converged", "skip", "others", "expected"),
    [
        (True, True, [], (True, "converged: as recorded")),
        (True, False, [], (False, "every role runs (--full); the check found: converged: as recorded")),
        (
            True,
            True,
            ["site_ntp", "site_users"],
            (
                False,
                "not converged: this play also runs site_ntp, "
                "site_users (a site play of its own), which ending "
                "the play here would skip",
            ),
        ),
        (False, True, ["site_ntp"], (False, "converged: as recorded")),  # not converged stays so
    ],
)
def test_the_final_verdict_runs_every_role_for_full_and_for_a_site_play(converged, skip, others, expected):
    assert ACTION.final(converged, "converged: as recorded", skip, others) == expected


def test_only_roles_of_the_collection_count_as_its_own():
    own = ACTION.OWN_ROLE
    assert own.match("r9700_env") and own.match("r9700ctl.nodes.r9700_power")
    assert not own.match("site_ntp") and not own.match("geerlingguy.docker")
