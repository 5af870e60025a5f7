"""`r9700ctl collect` without the lab: a real Ansible run of playbooks/collect.yml over a local
connection, then doctor --bundle on what it wrote; and the pure pieces around it (the --out
directory, stale files of an earlier collect, hosts that gave nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from r9700ctl import collect
from r9700ctl.bundle import diagnose_path
from r9700ctl.cli import cli
from r9700ctl.errors import BadInput

ROLE = Path(__file__).resolve().parents[2] / "roles" / "r9700_collect"


def test_out_must_be_a_directory_we_can_write(tmp_path):
    (tmp_path / "file").write_text("x")

    with pytest.raises(BadInput, match="--out must be a directory, this is a file") as caught:
        collect.prepare_out_dir(tmp_path / "file")

    assert caught.value.exit_code == 64
    assert collect.prepare_out_dir(tmp_path / "new" / "dir") == (tmp_path / "new" / "dir").resolve()


def test_a_second_collect_removes_the_first_ones_bundle_files_and_nothing_else(tmp_path):
    """An old rocminfo.txt must not pass for a new one when the tool is gone now."""
    for name in ("rocminfo.txt", "collect.json", "MISSING.txt", "notes-from-support.md"):
        (tmp_path / name).write_text("old")

    collect.remove_stale_bundle(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes-from-support.md"]


def test_an_unreachable_host_gets_a_missing_txt_that_names_the_reason(tmp_path):
    outcome = SimpleNamespace(
        status="UNREACHABLE", first_error="Gathering: ssh: connect to host 192.0.2.9: timed out"
    )

    bundle = collect._host_bundle("node9", tmp_path / "node9", outcome)

    assert (bundle.status, bundle.files) == ("UNREACHABLE", [])
    assert (tmp_path / "node9" / "MISSING.txt").read_text().splitlines() == [
        "# What r9700ctl collect could not record on node9",
        "*: host unreachable: Gathering: ssh: connect to host 192.0.2.9: timed out",
    ]
    assert bundle.missing["rocminfo.txt"] == outcome.first_error


def test_collect_over_a_local_connection_records_a_bundle_that_doctor_reads(tmp_path, monkeypatch):
    """The whole path without SSH: inventory check, runner, role, fetch, MISSING.txt, then the
    diagnosis. This machine has no ROCm tools, so they must be listed as missing, not fail."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[r9700_nodes]\n"
        f"localnode ansible_connection=local ansible_python_interpreter={sys.executable} "
        "r9700_collect_become=false\n"
    )
    out = tmp_path / "support"

    result = CliRunner().invoke(
        cli,
        ["collect", str(inventory), "--out", str(out), "--json", str(tmp_path / "c.json")],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "c.json").read_text())
    assert document["schema"] == "r9700ctl.collect/1"
    host = document["hosts"][0]
    assert (host["host"], host["status"]) == ("localnode", "COLLECTED")
    assert {"os-release", "uname.txt", "cmdline.txt", "id.txt", "env.txt"} <= set(host["files"])
    node = out / "localnode"
    rows = {r["file"]: r for r in json.loads((node / "collect.json").read_text())["files"]}
    assert rows["uname.txt"]["rc"] == 0 and rows["uname.txt"]["recorded"] is True
    if not Path("/usr/bin/nvidia-smi").exists():
        assert rows["nvidia-smi.xml"] == {
            "file": "nvidia-smi.xml",
            "command": "nvidia-smi -q -x",
            "as_root": False,
            "rc": 127,
            "recorded": False,
            "reason": "nvidia-smi: command not found",
        }
        assert "nvidia-smi.xml: nvidia-smi: command not found" in (node / "MISSING.txt").read_text()
    assert (node / "uname.txt").read_text().startswith("Linux ")
    keep = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["r9700_collect_env_keep"]
    for line in (node / "env.txt").read_text().splitlines():
        name = line.split("=", 1)[0]
        assert name in keep or any(k.endswith("_") and name.startswith(k) for k in keep), line
    assert "localnode" in result.output and "COLLECTED" in result.output

    report = diagnose_path(out).bundles[0]
    assert report.node == "localnode"
    assert report.versions["kernel"] == (node / "uname.txt").read_text().split()[2]
    assert not any(f.id in ("bundle.unreadable", "bundle.rule_error") for f in report.findings)


def collect_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("r9700ctl")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "r9700ctl"]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="100")
    return subprocess.run(
        [*command, "collect", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["inv.ini"], "error: Missing option '--out' / '-o'. (try 'r9700ctl collect --help')"),
        (
            ["inv.ini", "--out", "afile"],
            "error: afile: --out must be a directory, this is a file (give a directory)",
        ),
        (
            ["nope.ini", "--out", "support"],
            "error: nope.ini: inventory file not found (give the path of an INI or YAML inventory; "
            "inventory/example.ini shows the format)",
        ),
        (
            ["inv.ini", "--out", "support", "--group", "gpus"],
            "error: inv.ini: no group 'gpus' in this inventory (groups: r9700_nodes) (put the nodes under "
            "[gpus], or name their group with --group)",
        ),
        (
            ["inv.ini", "--out", "support", "--json", "no/c.json"],
            "error: no/c.json: --json: directory no does not exist (create the directory first or give "
            "another path)",
        ),
    ],
    ids=["no-out", "out-is-a-file", "no-inventory", "no-group", "json-dir-missing"],
)
def test_collect_bad_input_is_one_line_exit_64_and_contacts_nobody(tmp_path, args, line):
    (tmp_path / "inv.ini").write_text(
        "[r9700_nodes]\nnode1 ansible_host=192.0.2.1\n"
    )  # TEST-NET: never answers
    (tmp_path / "afile").write_text("x")

    result = collect_cli(*args, cwd=tmp_path)

    assert result.returncode == 64, result.stdout + result.stderr
    assert result.stderr.splitlines() == [line]
    assert result.stdout == ""
    assert not (tmp_path / "support").exists() or not any((tmp_path / "support").iterdir())


def test_the_closing_line_sends_to_doctor_bundle_only_when_something_was_recorded(tmp_path):
    from r9700ctl.collect import CollectReport, HostBundle
    from r9700ctl.report.collect import closing_line

    dead = HostBundle("n1", "UNREACHABLE", tmp_path / "n1", error="ssh: connect to host x: refused")
    assert closing_line(CollectReport(tmp_path, [dead])) == (
        f"no file recorded on any host (MISSING.txt in {tmp_path}/<host>/ says why); "
        "`r9700ctl doctor INVENTORY` checks reachability and sudo"
    )
    alive = HostBundle("n2", "OK", tmp_path / "n2", files=["lspci.txt"])
    assert closing_line(CollectReport(tmp_path, [dead, alive])).endswith(
        f"next: r9700ctl doctor --bundle {tmp_path}"
    )
