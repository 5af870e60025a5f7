"""The root command line: fast help, version, every command's help, and the error contract.

Errors become one line and an exit code only in r9700ctl.cli.main(); these tests go through
it (in process, or as a real child process where time and imports are what is measured).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import types

import click
import pytest
from click.testing import CliRunner

from r9700ctl import __version__
from r9700ctl.cli import COMMANDS, cli, main
from r9700ctl.errors import not_built

HEAVY_MODULES = ("ansible", "ansible_runner", "paramiko", "rich", "torch")


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["r9700ctl", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


def test_root_help_costs_under_half_a_second_of_cpu() -> None:
    """--help must not pay for Ansible's import (about a second of CPU): best of three, in a real child.

    CPU time of the child, not wall time: on a loaded CI machine the wall clock measures the
    neighbours, while the CPU the child burns still tells a heavy import from a light one.
    """
    timings = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-m", "r9700ctl", "--help"], capture_output=True, text=True, timeout=30
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        timings.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        assert done.returncode == 0, done.stderr
    assert min(timings) < 0.5, timings


@pytest.mark.parametrize(
    "args", [["--help"], *([name, "--help"] for name in COMMANDS)], ids=lambda a: " ".join(a)
)
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    """Command modules import Ansible, rich and friends inside their functions, not at import time."""
    probe = (
        "import sys\n"
        "from r9700ctl.cli import cli\n"
        f"try:\n    cli.main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY_MODULES!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_version_names_the_tool_and_its_version(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, capsys, "--version") == (0, f"r9700ctl, version {__version__}\n", "")


def test_root_help_lists_every_command_and_the_exit_codes() -> None:
    result = CliRunner().invoke(cli, ["--help"], prog_name="r9700ctl", catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output.startswith("Usage: r9700ctl [OPTIONS] COMMAND [ARGS]...\n")
    for name in COMMANDS:
        assert f"\n  {name} " in result.output
    for code in ("0 all good", "1 warnings only", "2 something failed", "3 could not run"):
        assert code in result.output
    assert "4 validate: inconclusive" in result.output  # README's table has it too
    assert "64 bad invocation or bad input" in result.output
    assert "130 interrupted" in result.output
    assert "_R9700CTL_COMPLETE=bash_source r9700ctl" in result.output


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_has_a_help_text_with_an_example(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"], prog_name="r9700ctl", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: r9700ctl {name} ")
    assert "example" in result.output.lower()
    assert (
        CliRunner().invoke(cli, [name, "-h"], prog_name="r9700ctl", catch_exceptions=False).output
        == result.output
    )


@pytest.fixture
def demo_command(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A command registered the way the real ones are (COMMANDS: 'module:attribute')."""
    module = types.ModuleType("r9700ctl_test_demo")

    @click.command()
    @click.option("--how", default="not-built")
    def demo(how: str) -> None:
        """Demo command."""
        if how == "not-built":
            raise not_built("demo")
        if how == "crash":
            raise RuntimeError("boom")
        if how == "ctrl-c":
            raise KeyboardInterrupt

    module.demo = demo  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(COMMANDS, "demo", f"{module.__name__}:demo")
    return module


def test_a_command_not_built_yet_says_so_in_one_line_and_exits_3(
    demo_command: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, capsys, "demo") == (
        3,
        "",
        f"error: 'demo' is not built yet in r9700ctl {__version__} "
        "(see the README's roadmap; nothing was changed)\n",
    )


def test_an_internal_error_is_one_line_without_a_traceback(
    demo_command: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("R9700CTL_DEBUG", raising=False)
    assert run_main(monkeypatch, capsys, "demo", "--how", "crash") == (
        3,
        "",
        "error: internal error: RuntimeError: boom (rerun with R9700CTL_DEBUG=1 for details)\n",
    )


def test_ctrl_c_exits_130(
    demo_command: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(monkeypatch, capsys, "demo", "--how", "ctrl-c")
    assert (code, out, err.splitlines()[-1]) == (130, "", "interrupted")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["nope"], "error: No such command 'nope'. (try 'r9700ctl --help')\n"),
        (["provision"], "error: Missing argument 'INVENTORY'. (try 'r9700ctl provision --help')\n"),
        (
            ["provision", "x.ini", "--zzz"],
            "error: No such option '--zzz'. (try 'r9700ctl provision --help')\n",
        ),
    ],
    ids=["unknown command", "missing argument", "unknown option"],
)
def test_a_bad_invocation_is_one_line_and_exit_64(
    args: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(monkeypatch, capsys, *args) == (64, "", line)


@pytest.mark.parametrize("args", [[], ["lab"], ["monitoring"]], ids=["root", "lab", "monitoring"])
def test_a_group_without_a_command_prints_its_help_not_an_error(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: r9700ctl {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND [ARGS]...")
    assert "Commands:" in out
