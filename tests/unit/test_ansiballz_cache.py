"""Module payloads kept from one r9700ctl run to the next (r9700ctl/ansiballz_cache.py and its callback).

Pinned: a second run loads the payload the first one kept instead of building it again; only
ansible.builtin's payloads are kept (never a playbook's own module), and none where a playbook
brings module_utils of its own; the directory's name changes with any source of those payloads; a
directory that is not this user's private one is never used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from r9700ctl import ansiballz_cache
from r9700ctl.ansible_run import FAILED, OK, RunRequest, _environment, run_playbook

PLAY = """\
- name: Payloads
  hosts: all
  gather_facts: false
  tasks:
    - name: A builtin module
      ansible.builtin.ping:
    - name: Another builtin module
      ansible.builtin.command: "true"
      changed_when: false
    - name: The playbook's own module
      hello:
"""
# A module beside the playbook (library/): ansible.legacy.hello, which the digest does not cover.
HELLO = """\
#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
AnsibleModule(argument_spec={}).exit_json(changed=False, said="hello")
"""


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "r9700ctl" / "ansiballz"


def run(tmp_path: Path, name: str):
    (tmp_path / "library").mkdir(exist_ok=True)
    (tmp_path / "library" / "hello.py").write_text(HELLO)
    (tmp_path / "play.yml").write_text(PLAY)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    request = RunRequest(playbook=tmp_path / "play.yml", inventory=inventory, runs_dir=tmp_path / name)
    return run_playbook(request).hosts["localhost"]


def test_a_second_run_loads_the_payload_the_first_one_kept(tmp_path: Path, cache_home: Path) -> None:
    assert run(tmp_path, "first").status == OK
    (kept,) = cache_home.iterdir()
    names = sorted(p.name for p in kept.iterdir())
    assert [n.split("-")[0] for n in names] == ["ansible.modules.command", "ansible.modules.ping"], names
    assert oct(kept.stat().st_mode & 0o777) == "0o700"
    # Plant command's payload under ping's name: a run that loads what was kept runs command's code
    # for the ping task, which fails for want of a command; a run that built its own would pass.
    ping = next(p for p in kept.iterdir() if p.name.startswith("ansible.modules.ping"))
    shutil.copyfile(next(p for p in kept.iterdir() if p.name.startswith("ansible.modules.command")), ping)
    second = run(tmp_path, "second")
    assert second.status == FAILED
    assert [t.task for t in second.failed_tasks] == ["A builtin module"], second.failed_tasks


def test_without_a_private_directory_of_this_user_nothing_is_kept_or_read(
    tmp_path: Path, cache_home: Path
) -> None:
    cache_home.mkdir(parents=True)
    cache_home.chmod(0o777)
    assert ansiballz_cache.prepare() is None
    request = RunRequest(playbook=tmp_path / "play.yml", inventory=tmp_path / "inventory.ini")
    assert ansiballz_cache.ENV not in _environment(request, tmp_path)
    assert run(tmp_path, "runs").status == OK
    assert list(cache_home.iterdir()) == []


def callback_module():
    """The callback plugin as ansible-playbook loads it (from its directory, not as r9700ctl's)."""
    path = ansiballz_cache.CALLBACK_DIR / "r9700ctl_ansiballz_cache.py"
    spec = importlib.util.spec_from_file_location("r9700ctl_ansiballz_cache_plugin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_directory_is_named_by_every_source_of_a_builtin_payload(tmp_path: Path) -> None:
    plugin = callback_module()
    ansible_dir = tmp_path / "ansible"
    for path in ("modules/ping.py", "module_utils/basic.py", "release.py", "executor/module_common.py"):
        (ansible_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (ansible_dir / path).write_text("x = 1\n")
    first = plugin.digest(str(ansible_dir))
    assert plugin.digest(str(ansible_dir)) == first
    util = ansible_dir / "module_utils" / "basic.py"
    util.write_text("x = 2\n")  # same size: the time tells
    os.utime(util, ns=(util.stat().st_atime_ns, util.stat().st_mtime_ns + 1))
    second = plugin.digest(str(ansible_dir))
    (ansible_dir / "modules" / "ping.py").write_text("x = 10\n")
    assert len({first, second, plugin.digest(str(ansible_dir))}) == 3


def test_module_utils_of_a_playbook_turn_the_kept_payloads_off(tmp_path: Path, cache_home: Path) -> None:
    """Ansible searches a playbook's module_utils/ before its own: payloads built with it are not kept."""
    (tmp_path / "module_utils").mkdir()
    assert run(tmp_path, "first").status == OK
    assert [list(d.iterdir()) for d in cache_home.iterdir()] in ([], [[]])


def test_only_the_newest_directories_of_other_ansible_cores_are_kept(tmp_path: Path) -> None:
    plugin = callback_module()
    for age in range(7):
        old = tmp_path / f"old{age}"
        old.mkdir()
        os.utime(old, (1_000_000 + age, 1_000_000 + age))
    plugin.prune(str(tmp_path), str(tmp_path / "old0"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old0", "old3", "old4", "old5", "old6"]
