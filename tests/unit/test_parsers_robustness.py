"""Every parser on every recorded output, on truncated copies and on garbage: never a
traceback, and a one-line "could not read FILE: reason" wherever the input is unreadable.

The truncated copies and the garbage are made here at test time from the real recordings;
they are not recordings themselves.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from r9700ctl.agent.parsers import BUNDLE_FILES

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"

# tests/fixtures/<directory> -> the parser its files are for.
FIXTURE_PARSERS = {
    "amdsmi": "amdsmi:parse_file",
    "dkms": "dkms:parse_file",
    "dmesg": "dmesg:parse_file",
    "rccl": "rccl:parse_file",
    "nvidia_smi": "nvidia_smi:parse_file",
    "osrelease": "osrelease:parse_file",
}
# Formats whose end is marked, so a cut copy is always detectably incomplete.
CLOSED_FORMATS = (".json", ".xml")


def _resolve(spec: str) -> Callable[..., Any]:
    module, function = spec.split(":")
    return getattr(importlib.import_module(f"r9700ctl.agent.parsers.{module}"), function)


def _text_parser(spec: str) -> Callable[..., Any]:
    """parse_file -> parse, parse_json_file -> parse_json, parse_topo_file -> parse_topo."""
    module, function = spec.split(":")
    return _resolve(f"{module}:{function.removesuffix('_file')}")


def recorded_inputs() -> list[Any]:
    cases = []
    for path in sorted(RECORDED.glob("*/*")):
        if path.name in BUNDLE_FILES:
            cases.append(pytest.param(path, BUNDLE_FILES[path.name], id=f"{path.parent.name}/{path.name}"))
    for directory, spec in FIXTURE_PARSERS.items():
        for path in sorted((FIXTURES / directory).glob("*")):
            cases.append(pytest.param(path, spec, id=f"fixtures/{directory}/{path.name}"))
    return cases


ALL_INPUTS = recorded_inputs()
PARSERS = sorted(set(BUNDLE_FILES.values()) | set(FIXTURE_PARSERS.values()))


def test_every_recording_has_a_parser_and_there_are_enough_of_them():
    """Pins the set of inputs this file runs on, so a renamed recording cannot drop out silently."""
    assert len(ALL_INPUTS) >= 30


@pytest.mark.parametrize(("path", "spec"), ALL_INPUTS)
def test_every_real_recording_parses_without_raising(path, spec):
    result = _resolve(spec)(path)

    assert hasattr(result, "error")
    if result.error is not None:  # only recordings that are cut short may fail, and they say so
        assert "cut short" in result.error, result.error
        assert result.error.startswith(f"could not read {path.name}: ")


@pytest.mark.parametrize(("path", "spec"), ALL_INPUTS)
def test_a_copy_cut_in_half_never_raises_and_closed_formats_say_so(path, spec, tmp_path):
    text = path.read_text(encoding="utf-8")
    cut = tmp_path / path.name
    cut.write_text(text[: len(text) // 2], encoding="utf-8")

    result = _resolve(spec)(cut)

    assert hasattr(result, "error")
    if path.suffix in CLOSED_FORMATS:
        assert result.error is not None
        assert result.error.startswith(f"could not read {path.name}: ")


@pytest.mark.parametrize("spec", PARSERS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_garbage_bytes_give_an_error_not_a_traceback(spec, seed, tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(random.Random(seed).randbytes(4096))

    from_file = _resolve(spec)(garbage)
    from_text = _text_parser(spec)(garbage.read_bytes(), "garbage.bin")

    for result in (from_file, from_text):
        assert result.error is not None
        assert result.error.startswith("could not read garbage.bin: ")


@pytest.mark.parametrize("spec", PARSERS)
def test_a_missing_file_or_a_directory_is_an_error_naming_the_file(spec, tmp_path):
    missing = _resolve(spec)(tmp_path / "rocminfo.txt")
    directory = _resolve(spec)(tmp_path)

    assert missing.error == "could not read rocminfo.txt: file not found"
    assert directory.error == f"could not read {tmp_path.name}: is a directory, not a file"


@pytest.mark.parametrize("spec", PARSERS)
@pytest.mark.parametrize("value", [None, 42, ["a"]], ids=["none", "int", "list"])
def test_a_value_that_is_not_text_is_an_error(spec, value):
    result = _text_parser(spec)(value, "input")

    assert result.error == f"could not read input: expected text, got {type(value).__name__}"


@pytest.mark.parametrize("spec", PARSERS)
def test_valid_utf8_of_another_language_is_read_without_raising(spec):
    """Pins that non-ASCII text (a Chinese timestamp in ROCm/ROCm#5814's dmesg) is no crash."""
    result = _text_parser(spec)("[12月25 19:09] 测试 ünïcödé\n", "input")

    assert hasattr(result, "error")
