"""The node's own environment sources (issue 22 item 19): read on the node, judged before any change.

Planting `HSA_OVERRIDE_GFX_VERSION=9.4.2` in a lab node's /etc/environment (what the magazine article
told owners to do) went through provision without a word: preflight and doctor judged only the
inventory's variables, so only a later validate found it. nodefacts now reports the governed
variables the node's own files set (file and line), and the judge (r9700ctl/nodeenv.py) holds them
to the rules the environment list applies. The fake roots copy the real layout: /etc/passwd for the
homes, /etc/environment for pam_env, /etc/environment.d/*.conf, /etc/profile.d/*.sh and the shell
start files of bash(1) INVOCATION.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_envlist import healthy_p2p
from test_preflight import check, facts, judge, r9700

from r9700ctl import envlist
from r9700ctl.agent import nodefacts
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "ai:x:1000:1000:AI,,,:/home/ai:/bin/bash\n"
    "svc:x:1001:1001::/srv/svc:/usr/sbin/nologin\n"
)


def node_root(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/passwd").write_text(PASSWD)
    for path, text in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return tmp_path


def sources(root: Path, users: list[str] | None = None) -> dict:
    return nodefacts.read_environment_sources(str(root), users or ["root"], list(envlist.GOVERNED))


# -- reading the files on the node ---------------------------------------------------------------------


def test_the_override_in_etc_environment_is_reported_with_its_file_and_line(tmp_path):
    root = node_root(tmp_path, {"/etc/environment": 'PATH="/usr/bin"\nHSA_OVERRIDE_GFX_VERSION=9.4.2\n'})
    found = sources(root)
    assert found["settings"] == [
        {
            "path": "/etc/environment",
            "line": 2,
            "name": "HSA_OVERRIDE_GFX_VERSION",
            "value": "9.4.2",
            "text": "HSA_OVERRIDE_GFX_VERSION=9.4.2",
        }
    ]
    assert "/etc/environment" in found["read"]


def test_shell_files_environment_d_and_each_users_start_files_are_read(tmp_path):
    root = node_root(
        tmp_path,
        {
            "/etc/environment.d/50-rocm.conf": "ROCR_VISIBLE_DEVICES=0\n",
            "/etc/profile.d/rocm.sh": "# a blog's\nexport HSA_OVERRIDE_GFX_VERSION='11.0.0'  # 7900\n",
            "/home/ai/.bashrc": 'if true; then\n    export NCCL_P2P_DISABLE="0"\nfi\n',
            "/home/ai/.profile": "# nothing governed\nexport PATH=$HOME/bin:$PATH\n",
            "/root/.bash_profile": "export HSA_FORCE_FINE_GRAIN_PCIE=1\n",
            "/srv/svc/.bashrc": "export HSA_OVERRIDE_GFX_VERSION=9.4.2\n",  # not a listed user: not read
        },
    )
    found = sources(root, ["root", "ai", "nobody"])
    got = {(s["path"], s["line"]): (s["name"], s["value"]) for s in found["settings"]}
    assert got == {
        ("/etc/environment.d/50-rocm.conf", 1): ("ROCR_VISIBLE_DEVICES", "0"),
        ("/etc/profile.d/rocm.sh", 2): ("HSA_OVERRIDE_GFX_VERSION", "11.0.0"),
        ("/home/ai/.bashrc", 2): ("NCCL_P2P_DISABLE", "0"),
        ("/root/.bash_profile", 1): ("HSA_FORCE_FINE_GRAIN_PCIE", "1"),
    }
    assert found["users"] == {"root": "/root", "ai": "/home/ai", "nobody": None}


def test_r9700ctls_own_files_and_commented_lines_are_not_reported(tmp_path):
    root = node_root(
        tmp_path,
        {
            "/etc/profile.d/r9700.sh": "export NCCL_P2P_DISABLE=1\n",
            "/etc/environment.d/90-r9700.conf": "NCCL_P2P_DISABLE=1\n",
            "/etc/environment": "# HSA_OVERRIDE_GFX_VERSION=9.4.2\n",
        },
    )
    assert sources(root)["settings"] == []


def test_gather_reads_the_sources_of_the_users_it_is_given(tmp_path):
    root = node_root(tmp_path, {"/home/ai/.bashrc": "export HSA_OVERRIDE_GFX_VERSION=9.4.2\n"})
    gathered = nodefacts.gather({"root": str(root), "env_users": ["root", "ai"]})
    assert [s["path"] for s in gathered["environment_sources"]["settings"]] == ["/home/ai/.bashrc"]


def test_the_names_nodefacts_watches_by_default_are_the_governed_variables():
    assert set(nodefacts.GOVERNED_DEFAULT) == set(envlist.GOVERNED)


# -- the judge ---------------------------------------------------------------------------------------------


def with_sources(base: dict, *settings: tuple[str, int, str, str]) -> dict:
    base["environment_sources"] = {
        "read": sorted({path for path, *_ in settings}),
        "settings": [
            {"path": path, "line": line, "name": name, "value": value, "text": f"{name}={value}"}
            for path, line, name, value in settings
        ],
        "errors": [],
        "users": {"root": "/root"},
    }
    return base


def test_an_article_override_in_etc_environment_refuses_the_node_naming_file_line_and_fix():
    """The lab's gfx942-override fault: provision on such a node must refuse before any change."""
    v = judge(with_sources(facts(), ("/etc/environment", 1, "HSA_OVERRIDE_GFX_VERSION", "9.4.2")))
    assert not v.ok
    c = check(v, "env.node_sources")
    assert c.status == FAIL
    assert c.detail == (
        "/etc/environment:1 sets HSA_OVERRIDE_GFX_VERSION=9.4.2: cross-family HSA override refused "
        "(gfx942; these GPUs: gfx1201)"
    )
    assert c.hint == (
        "delete or comment out that line, or set r9700_env_comment_out_conflicts: true "
        "(provision then comments it out)"
    )
    # provision's summary keeps a refusal's first 300 characters (runner): the fix must be inside them
    assert len(v.refusal("node12")) <= 300
    assert c.evidence == {"path": "/etc/environment", "line": 1, "text": "HSA_OVERRIDE_GFX_VERSION=9.4.2"}
    assert v.refusal("node1").startswith(
        "node1: preflight refused, nothing changed: /etc/environment:1 sets HSA_OVERRIDE_GFX_VERSION=9.4.2"
    )
    assert v.resolved.node_environment_fixes == []


def test_with_the_opt_in_the_line_is_a_warning_and_handed_to_r9700_env_to_comment_out():
    v = judge(
        with_sources(facts(), ("/etc/environment", 1, "HSA_OVERRIDE_GFX_VERSION", "9.4.2")),
        env_comment_out_conflicts=True,
    )
    assert v.ok
    c = check(v, "env.node_sources")
    assert c.status == WARN and c.detail.endswith(
        "; provision comments it out (r9700_env_comment_out_conflicts), keeping a backup"
    )
    assert v.resolved.node_environment_fixes == [
        {"path": "/etc/environment", "line": 1, "name": "HSA_OVERRIDE_GFX_VERSION", "value": "9.4.2"}
    ]


def test_p2p_turned_back_on_in_a_users_bashrc_where_the_node_decided_off_is_refused():
    """4x R9700: P2P is off for the host hang (rocm-systems#11348); NCCL_P2P_DISABLE=0 reopens it."""
    f = facts("ubuntu-24.04", gpus=r9700(4), p2p=healthy_p2p([d["address"] for d in r9700(4)]))
    v = judge(with_sources(f, ("/home/ai/.bashrc", 7, "NCCL_P2P_DISABLE", "0")))
    c = check(v, "env.node_sources")
    assert c.status == FAIL
    assert c.detail.startswith(
        "/home/ai/.bashrc:7 sets NCCL_P2P_DISABLE=0, turning RCCL's P2P transport back on where this node's "
        "P2P is off: known issue r9700-p2p-host-hang"
    )


def test_fine_grain_pcie_where_p2p_is_off_is_no_conflict():
    """Issue 22 item 9: the variable is no P2P switch; with P2P off it changes nothing RCCL decides."""
    v = judge(with_sources(facts(), ("/root/.bashrc", 3, "HSA_FORCE_FINE_GRAIN_PCIE", "1")))
    assert v.ok and check(v, "env.node_sources").status == PASS


@pytest.mark.parametrize(
    ("value", "status", "said"),
    [
        ("0,x", FAIL, "ROCR_VISIBLE_DEVICES=0,x: x is neither a device index nor a GPU-<uuid>"),
        ("7", FAIL, "index 7: this node has 5 AMD GPUs (0-4)"),
        ("4", FAIL, "index 4 is the integrated GPU at 0000:7c:00.0"),
        ("0,1", WARN, "differs from the environment list's ROCR_VISIBLE_DEVICES=0,1,2,3"),
    ],
    ids=["not-a-list", "no-such-index", "the-igpu", "a-subset"],
)
def test_rocr_visible_devices_in_a_node_file_meets_the_lists_rule(value, status, said):
    igpu = {"address": "0000:7c:00.0", "vendor": "0x1002", "device": "0x164e", "class": "0x030000"}
    f = with_sources(facts(gpus=[*r9700(4), igpu]), ("/etc/environment", 2, "ROCR_VISIBLE_DEVICES", value))
    c = check(judge(f), "env.node_sources")
    assert c.status == status and said in c.detail, c.detail


def test_a_value_set_at_run_time_is_not_judged_but_said():
    c = check(
        judge(with_sources(facts(), ("/root/.bashrc", 1, "HSA_OVERRIDE_GFX_VERSION", "$GFX"))),
        "env.node_sources",
    )
    assert c.status == WARN and "is set at run time ($GFX): not judged" in c.detail


def test_a_node_whose_files_set_none_of_them_passes_and_facts_without_sources_are_skip():
    assert check(judge(with_sources(facts())), "env.node_sources").status == PASS
    assert check(judge(facts()), "env.node_sources").status == SKIP


def test_a_home_the_reader_may_not_enter_is_said_not_passed(tmp_path, monkeypatch):
    """doctor without root: Ubuntu's homes are 0750, so stat of another user's .bashrc fails with
    EACCES (staged with os.stat: this suite runs as root, which enters every directory)."""
    import errno
    import os

    root = node_root(tmp_path, {"/home/ai/.bashrc": "export HSA_OVERRIDE_GFX_VERSION=9.4.2\n"})
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).startswith(str(root / "home/ai") + "/"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(nodefacts.os, "stat", stat)
    found = sources(root, ["ai"])
    assert found["settings"] == []
    assert found["errors"][0] == "/home/ai/.bash_profile: Permission denied"
    c = check(judge(with_sources(facts()) | {"environment_sources": found}), "env.node_sources")
    assert c.status == WARN and c.detail.startswith(
        "could not read /home/ai/.bash_profile: Permission denied"
    )
