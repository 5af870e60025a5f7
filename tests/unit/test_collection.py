"""The collection r9700ctl.nodes (issue 24): one version with the r9700ctl package, built and
installed offline by ansible-galaxy with what a site needs, its playbooks and documentation usable
from the installed copy, and its plugins' one line when the r9700ctl package is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import collection_plugins
import pytest
import yaml
from ansible.errors import AnsibleFilterError

import r9700ctl
from r9700ctl import paths

ROOT = paths.collection_root()
PLAYBOOKS = sorted(p.stem for p in (ROOT / "playbooks").glob("*.yml"))
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())


def ansible_env(collections: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}


def test_the_collection_the_package_and_the_requirements_name_one_version() -> None:
    """The plugins import r9700ctl at the collection's own version: galaxy.yml, requirements.txt (what
    ansible-builder installs, through meta/execution-environment.yml) and the package agree."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == (paths.COLLECTION_NAMESPACE, paths.COLLECTION_NAME)
    assert galaxy["version"] == r9700ctl.__version__
    package = collection_plugins.plugin("plugin_utils", "r9700ctl_package")
    assert package.required_version() == r9700ctl.__version__
    ee = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert (ROOT / ee["dependencies"]["python"]).read_text().count(f"r9700ctl=={r9700ctl.__version__}") == 1


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection as a site gets it: built from this checkout, installed offline into a temporary path."""
    base = tmp_path_factory.mktemp("collection")
    tarball = collection_plugins.build(base / "built")
    collection_plugins.install(tarball, base / "collections")
    return base / "collections"


def test_the_installed_collection_carries_roles_plugins_playbooks_and_its_requirements(
    installed: Path,
) -> None:
    """What `ansible-galaxy collection install` puts on a site's controller: every role, plugin and
    playbook, the files ansible-builder reads, and none of the controller's package, tests or docs."""
    collection = installed / "ansible_collections" / "r9700ctl" / "nodes"
    manifest = json.loads((collection / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == (
        "r9700ctl",
        "nodes",
        r9700ctl.__version__,
    )
    assert sorted(p.name for p in (collection / "roles").iterdir() if p.is_dir()) == ROLES
    assert sorted(p.stem for p in (collection / "playbooks").glob("*.yml")) == PLAYBOOKS
    for plugin in (
        "action/r9700_preflight.py",
        "action/r9700_scratch_stage.py",
        "action/r9700_scratch_collect.py",
        "action/r9700_scratch_run.py",
        "filter/r9700_power.py",
        "filter/r9700_containers.py",
        "lookup/r9700_node_program.py",
        "modules/r9700_preflight.py",
        "modules/r9700_scratch_stage.py",
        "modules/r9700_scratch_collect.py",
        "modules/r9700_scratch_run.py",
        "plugin_utils/r9700ctl_package.py",
    ):
        assert (collection / "plugins" / plugin).is_file(), plugin
    for kept in ("requirements.txt", "meta/execution-environment.yml", "meta/runtime.yml", "README.md"):
        assert (collection / kept).is_file(), kept
    for left_out in ("r9700ctl", "tests", "docs", "bench", "scripts", "pyproject.toml"):
        assert not (collection / left_out).exists(), left_out


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_each_playbook_of_the_installed_collection_parses_by_its_full_name(
    installed: Path, playbook: str
) -> None:
    """A site runs `ansible-playbook r9700ctl.nodes.provision`: every playbook, its roles and their
    plugins must resolve from the installed copy alone."""
    done = subprocess.run(
        [
            collection_plugins.ansible_tool("ansible-playbook"),
            "--syntax-check",
            "-i",
            "localhost,",
            f"r9700ctl.nodes.{playbook}",
        ],
        env=ansible_env(installed),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_execution_environment_gets_r9700ctl_at_the_collections_version(installed: Path) -> None:
    """ansible-builder reads the installed collection's meta/execution-environment.yml: the Python
    requirements it would put into an execution environment (AWX, ansible-navigator) are r9700ctl
    at the collection's version, which the plugins need."""
    done = subprocess.run(
        [collection_plugins.ansible_tool("ansible-builder"), "introspect", "--sanitize", str(installed)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = yaml.safe_load(done.stdout)
    assert found["python"] == [f"r9700ctl=={r9700ctl.__version__}  # from collection r9700ctl.nodes"]
    assert found["system"] == []


def test_ansible_doc_documents_every_role_of_the_installed_collection(installed: Path) -> None:
    """ansible-doc reads the roles' argument specs: the variables' documentation a site sees."""
    done = subprocess.run(
        [
            collection_plugins.ansible_tool("ansible-doc"),
            "-t",
            "role",
            "--json",
            *(f"r9700ctl.nodes.{role}" for role in ROLES),
        ],
        env=ansible_env(installed),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    documented = json.loads(done.stdout)
    assert sorted(documented) == [f"r9700ctl.nodes.{role}" for role in ROLES]
    power = documented["r9700ctl.nodes.r9700_power"]["entry_points"]["main"]["options"]
    assert power["r9700_power_cap_w"]["description"]


def test_a_plugin_fails_with_one_line_naming_the_package_when_r9700ctl_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site's Ansible without the r9700ctl package (an execution environment built without the
    collection's requirements): the filter and the action fail with one line naming the package,
    the version and the fix, and no traceback reaches the output."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # Python runs sitecustomize at start-up: the package is then absent for ansible-playbook.
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['r9700ctl'] = None\n")
    play = tmp_path / "site.yml"
    play.write_text(
        textwrap.dedent("""\
        - name: A site's play
          hosts: localhost
          gather_facts: false
          tasks:
            - name: Plan the power caps
              ansible.builtin.debug:
                msg: "{{ {} | r9700ctl.nodes.r9700_power_plan(None, {}, [], None) }}"
              ignore_errors: true
            - name: Judge the node
              r9700ctl.nodes.r9700_preflight: {}
        """)
    )
    collections = paths.collections_path(tmp_path / "collections")
    env = {**ansible_env(collections), "PYTHONPATH": str(blocker)}
    done = subprocess.run(
        [collection_plugins.ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    line = (
        f"r9700ctl.nodes needs the Python package r9700ctl {r9700ctl.__version__} on the controller, and "
        "importing it failed (import of r9700ctl halted; None in sys.modules): "
        f"pip install r9700ctl=={r9700ctl.__version__} into the Python that runs Ansible ({sys.executable}); "
        "an execution environment gets it from the collection's requirements.txt"
    )
    assert output.count(line) >= 2, output  # the filter's task and the action's
    assert "Traceback" not in output


# The roles that run the node program (r9700-node) on a node; r9700ctl passes it as an extra var.
NODE_PROGRAM_ROLES = {"r9700_lifecycle", "r9700_containers", "r9700_power", "r9700_node_record"}


def test_every_play_running_the_node_program_packs_it_when_nothing_passed_it() -> None:
    """A site's own ansible-playbook run gets no extra var r9700_node_program from r9700ctl: every
    play of the collection whose roles run the node program sets it to the collection's lookup
    (a play var, which r9700ctl's extra var outranks). Without it, the first such role stopped a
    plain run of r9700ctl.nodes.provision at its assertion (r9700_lifecycle step before)."""
    plays_found = 0
    for playbook in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(playbook.read_text()):
            roles = {str(entry["role"]).rsplit(".", 1)[-1] for entry in play.get("roles", [])}
            if roles & NODE_PROGRAM_ROLES:
                plays_found += 1
                assert play.get("vars", {}).get("r9700_node_program") == (
                    "{{ lookup('r9700ctl.nodes.r9700_node_program') }}"
                ), f"{playbook.name}: {play['name']}"
    assert plays_found >= 6


def test_the_node_program_lookup_packs_one_runnable_file_for_the_run_and_ansible_removes_it(
    installed: Path, tmp_path: Path
) -> None:
    """lookup('r9700ctl.nodes.r9700_node_program') on a site's controller: the node program packed
    once in the run's local temporary directory (every reference the same path), byte-identical to
    what r9700ctl packs, runnable (r9700-pci-devices on a fake sysfs tree), and gone after the run."""
    from r9700ctl import agentpack

    devices = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:03:00.0"
    devices.mkdir(parents=True)
    for name, value in (("vendor", "0x1002"), ("device", "0x7551"), ("class", "0x030000")):
        (devices / name).write_text(value + "\n")
    play = tmp_path / "site.yml"
    play.write_text(
        textwrap.dedent(f"""\
        - name: A site's play
          hosts: localhost
          gather_facts: false
          vars:
            r9700_node_program: "{{{{ lookup('r9700ctl.nodes.r9700_node_program') }}}}"
          tasks:
            - name: Read the fake sysfs tree with the node program
              ansible.builtin.command:
                argv:
                  - "{sys.executable}"
                  - "{{{{ r9700_node_program }}}}"
                  - r9700-pci-devices
                  - --root
                  - "{tmp_path}"
              register: read
              changed_when: false
            - name: Checksum the packed file
              ansible.builtin.stat:
                path: "{{{{ r9700_node_program }}}}"
                checksum_algorithm: sha256
              register: packed
            - name: Write what the lookup gave, twice, what the program read and the file's checksum
              ansible.builtin.copy:
                content: >-
                  {{{{ [r9700_node_program, lookup('r9700ctl.nodes.r9700_node_program'), read.stdout,
                  packed.stat.checksum] | to_json }}}}
                dest: "{tmp_path}/seen.json"
                mode: "0644"
        """)
    )
    local_tmp = tmp_path / "local-tmp"
    done = subprocess.run(
        [
            collection_plugins.ansible_tool("ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(play),
        ],
        env={**ansible_env(installed), "ANSIBLE_LOCAL_TEMP": str(local_tmp)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    first, second, read, checksum = json.loads((tmp_path / "seen.json").read_text())
    assert first == second and Path(first).name == "r9700-node"
    assert Path(first).parent.parent == local_tmp  # Ansible's ansible-local-PID... directory
    assert [d["vendor_name"] for d in json.loads(read)["devices"]] == ["AMD"]
    ours = agentpack.node_program(tmp_path / "r9700-node").read_bytes()
    assert checksum == hashlib.sha256(ours).hexdigest()  # the bytes r9700ctl packs for its own runs
    assert list(local_tmp.iterdir()) == []  # ansible-playbook removed its local directory at exit


def test_a_plugin_refuses_an_r9700ctl_of_another_version_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collection 0.1.0 with r9700ctl 0.2.0 judges with another manifest and another preflight than
    its roles expect: refused, naming both versions and the fix."""
    package = collection_plugins.plugin("plugin_utils", "r9700ctl_package")
    monkeypatch.setattr(r9700ctl, "__version__", "9.9.9")
    with pytest.raises(AnsibleFilterError) as refused:
        package.require(AnsibleFilterError, "r9700ctl.envlist")
    assert str(refused.value) == (
        f"r9700ctl.nodes {package.required_version()} needs the Python package r9700ctl "
        f"{package.required_version()} on the controller, and {sys.executable} has r9700ctl 9.9.9: "
        f"pip install r9700ctl=={package.required_version()} into the Python that runs Ansible "
        f"({sys.executable}); an execution environment gets it from the collection's requirements.txt"
    )


def pip(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(600)
def test_the_wheel_carries_the_collection_the_cli_runs(tmp_path: Path) -> None:
    """`pip install .` users get the collection inside the package (r9700ctl/_content, galaxy.yml
    at its root), and r9700ctl's collections path makes its playbooks run by their full names."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip(["wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("r9700ctl-*.whl")
    pip(["install", "-q", "--no-deps", "--target", str(target), str(wheel)])
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent("""\
            import subprocess, sys
            from pathlib import Path
            from r9700ctl import paths
            from r9700ctl.ansible_run import quiet_python_warnings
            print(paths.collection_root())
            collections = paths.collections_path(Path(sys.argv[1]))
            # as the CLI runs Ansible: its collections path, Ansible's unactionable warnings off
            env = {"ANSIBLE_COLLECTIONS_PATH": str(collections), "PATH": "/usr/bin:/bin",
                   "PYTHONWARNINGS": quiet_python_warnings({})}
            command = [sys.argv[2], "--syntax-check", "-i", "localhost,", paths.playbook("provision.yml")]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            print(done.returncode, done.stderr)
            """)
    )
    done = subprocess.run(
        [
            sys.executable,
            str(probe),
            str(tmp_path / "collections"),
            collection_plugins.ansible_tool("ansible-playbook"),
        ],
        cwd=tmp_path,  # not the checkout: its r9700ctl/ would be imported first
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    root, outcome = done.stdout.splitlines()[:2]
    assert Path(root) == target / "r9700ctl" / "_content" and (Path(root) / "galaxy.yml").is_file()
    assert outcome.strip() == "0", done.stdout


def test_the_readme_lists_the_role_variables_as_the_argument_specs_declare_them() -> None:
    """Regenerate with: python -m r9700ctl.collection_docs README.md"""
    from r9700ctl import collection_docs

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[
        readme.index(collection_docs.BEGIN) : readme.index(collection_docs.END) + len(collection_docs.END)
    ]
    assert block == collection_docs.render_variables()


def test_the_readme_block_is_rewritten_in_place(tmp_path: Path) -> None:
    """The generator replaces only the block between its markers, and says how to call it otherwise."""
    from r9700ctl import collection_docs

    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{collection_docs.BEGIN}\nstale\n{collection_docs.END}\n\n## Next\n")
    assert collection_docs.main([str(readme)]) == 0
    assert readme.read_text() == f"# Title\n\n{collection_docs.render_variables()}\n\n## Next\n"
    assert collection_docs.main([]) == 64
    readme.write_text("# A README without the block\n")
    assert collection_docs.main([str(readme)]) == 64
