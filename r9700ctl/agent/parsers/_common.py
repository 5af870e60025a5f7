"""Helpers every parser shares: reading a file without raising, skipping what is not
the tool's output, turning the many spellings of a number into one, and the GPU record the SMI
tools' parsers share.

Recorded outputs arrive with a first line naming their public source, with Python
warnings that amd-smi prints before its JSON, or cut short. None of that may raise:
a parser reports "could not read FILE: reason" in its result instead.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

# Values amd-smi, rocm-smi and nvidia-smi print for "no reading".
NOT_AVAILABLE = frozenset({"", "n/a", "na", "none", "not supported", "[not supported]", "[n/a]", "unknown"})

# A file larger than this is not a tool output; reading it whole would only waste memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024

# How many lines starting with "{" or "[" to try as the start of the document; garbage
# with thousands of them must not cost quadratic time.
MAX_JSON_CANDIDATES = 20

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\d\s].*?)?\s*$")

R = TypeVar("R")


def cannot_read(source: str, reason: str) -> str:
    """The one wording of a parse failure; callers turn it into a finding."""
    return f"could not read {source}: {reason}"


def failure(result: Callable[..., R]) -> Callable[[str, str], R]:
    """A parser's `make_failed` (never_raises, from_file): its result type, built with `source` and
    the error, for a text it could not read."""

    def failed(source: str, reason: str) -> R:
        return result(source=source, error=cannot_read(source, reason))

    return failed


def read_text(path: str | Path) -> tuple[str | None, str | None]:
    """The file's text (undecodable bytes replaced) or an error message; never raises."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_INPUT_BYTES:
            return None, cannot_read(p.name, f"file is {size} bytes, more than any tool output")
        data = p.read_bytes()
    except FileNotFoundError:
        return None, cannot_read(p.name, "file not found")
    except IsADirectoryError:
        return None, cannot_read(p.name, "is a directory, not a file")
    except OSError as exc:
        return None, cannot_read(p.name, exc.strerror or type(exc).__name__)
    if b"\x00" in data[:4096]:
        return None, cannot_read(p.name, "binary data, not text output of a tool")
    return data.decode("utf-8", errors="replace"), None


def never_raises(make_failed: Callable[[str, str], R]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate parse(text, source) so an unexpected exception becomes a result with .error.

    The parsers are written to cope with odd input; this is the net under them, so a
    shape nobody has seen yet still ends as a finding and never as a traceback.
    """

    def wrap(fn: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(fn)
        def parse(text: Any, source: str = "input", *args: Any, **kwargs: Any) -> R:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            if not isinstance(text, str):
                return make_failed(source, f"expected text, got {type(text).__name__}")
            if looks_binary(text):
                return make_failed(source, "binary data, not the text output of a tool")
            try:
                return fn(text, source, *args, **kwargs)
            except Exception as exc:  # the promise of this module: nothing escapes
                return make_failed(source, f"unexpected content ({type(exc).__name__}: {exc})")

        return parse

    return wrap


def looks_binary(text: str) -> bool:
    """NUL bytes, or more than 1 in 10 characters unprintable or undecodable."""
    sample = text[:65536]
    if "\x00" in sample:
        return True
    if not sample:
        return False
    odd = sum(1 for c in sample if c == "\ufffd" or (not c.isprintable() and c not in "\n\r\t"))
    return odd * 10 > len(sample)


def from_file(parse: Callable[[str, str], R], make_failed: Callable[[str, str], R], path: str | Path) -> R:
    """Read `path` and hand its text to `parse`; a missing or unreadable file is a result too."""
    text, error = read_text(path)
    if error is not None or text is None:
        return make_failed(Path(path).name, (error or "").split(": ", 1)[-1])
    return parse(text, Path(path).name)


def is_source_line(line: str) -> bool:
    """The first line of a recorded fixture ("# source: ...") or another comment line."""
    return line.lstrip().startswith("#")


def json_payload(text: str) -> tuple[Any, list[str], str | None]:
    """Decode the JSON document in `text`, skipping leading lines that are not JSON.

    Returns (document, skipped lines, error). amd-smi prints Python SyntaxWarnings and
    the like before its JSON; fixtures carry a "# source:" line. Both are skipped. Text
    after the document (a trailing log line) is ignored.
    """
    lines = text.splitlines()
    decoder = json.JSONDecoder()
    best_error: tuple[int, str] | None = None
    candidates = 0
    for i, line in enumerate(lines):
        if not line.lstrip().startswith(("{", "[")):
            continue
        candidates += 1
        if candidates > MAX_JSON_CANDIDATES:
            break
        body = "\n".join(lines[i:]).lstrip()
        try:
            document, _end = decoder.raw_decode(body)
        except json.JSONDecodeError as exc:
            # A warning line can start with "[" too ("[WARNING] ..."): if decoding failed on
            # that first line, look further. A failure further down means the document
            # started here and is broken or cut short; inner "{" lines must not be taken
            # for a document of their own.
            if exc.lineno > 1:
                skipped = [ln for ln in lines[:i] if ln.strip()]
                where = f"line {exc.lineno + i} ({exc.msg})"
                if body[exc.pos :].strip():
                    return None, skipped, f"JSON is broken at {where}"
                # Cut short (a `| head`, a full disk): keep what came before, say so.
                return _close_truncated(body), skipped, f"JSON is cut short at {where}; read what came before"
            if best_error is None:
                best_error = (exc.pos, f"no JSON document in it (line {i + 1} is not JSON: {exc.msg})")
            continue
        skipped = [ln for ln in lines[:i] if ln.strip()]
        return document, skipped, None
    skipped = [ln for ln in lines if ln.strip()]
    if best_error is not None:
        return None, skipped, best_error[1]
    return None, skipped, "no JSON document in it"


def json_report(text: str, source: str, result: Callable[..., R]) -> tuple[Any, R]:
    """The JSON document in `text` (json_payload) and the result to fill from it: its `source`, the
    lines skipped before the document and, when the JSON is broken or cut short, the error (a
    cut-short document still comes back with what it held; a broken one as None)."""
    document, skipped, error = json_payload(text)
    report = result(source=source, skipped_lines=skipped)
    if error is not None:
        report.error = cannot_read(source, error)
    return document, report


def _close_truncated(body: str) -> Any:
    """The longest prefix of a cut-short JSON document that ends on an element boundary,
    closed with the brackets still open; None when there is no such prefix."""
    stack: list[str] = []
    in_string = escaped = False
    cut: tuple[int, list[str]] | None = None
    for i, char in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append("]" if char == "[" else "}")
        elif char in "]}":
            if not stack:
                return None
            stack.pop()
        elif char == ",":
            cut = (i, list(stack))
    if cut is None:
        return None
    position, still_open = cut
    try:
        return json.loads(body[:position] + "".join(reversed(still_open)))
    except json.JSONDecodeError:
        return None


def number(value: Any) -> float | int | None:
    """A number from 42, 42.0, "42", "42.0 W", "0x1f", {"value": 42, "unit": "W"}; None for N/A."""
    num, _unit = quantity(value)
    return num


def quantity(value: Any) -> tuple[float | int | None, str]:
    """(number, unit) from any of the shapes the tools print; (None, "") when there is none."""
    if isinstance(value, dict):
        unit = value.get("unit")
        num, parsed_unit = quantity(value.get("value"))
        return num, unit if isinstance(unit, str) and unit else parsed_unit
    if isinstance(value, bool):
        return None, ""
    if isinstance(value, (int, float)):
        return value, ""
    if not isinstance(value, str):
        return None, ""
    text = value.strip().strip("()")
    if text.lower() in NOT_AVAILABLE:
        return None, ""
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text, 16), ""
    match = _NUMBER.match(text)
    if not match:
        return None, ""
    raw, unit = match.group(1), (match.group(2) or "").strip()
    num: float | int = float(raw) if any(c in raw for c in ".eE") else int(raw)
    return num, unit


def text_value(value: Any) -> str | None:
    """A string, or None for the tools' ways of saying "no value"."""
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return None if text.lower() in NOT_AVAILABLE else text


def to_mib(num: float | int | None, unit: str) -> float | None:
    """Memory size in MiB from a number and the unit the tool printed (B, KB, MB, GB...).

    amd-smi's "MB" is MiB (32624 MB for 32 GiB of GDDR6 minus reserved), so the binary
    meaning is used for every unit, as the tools do.
    """
    if num is None:
        return None
    factors = {"": 1.0, "b": 1 / 2**20, "kb": 1 / 1024, "kib": 1 / 1024, "mb": 1.0, "mib": 1.0}
    factors |= {"gb": 1024.0, "gib": 1024.0, "tb": 2**20, "tib": 2**20}
    factor = factors.get(unit.strip().lower())
    return None if factor is None else float(num) * factor


def normalise_bdf(text: str | None) -> str | None:
    """ "0000:03:00.0" from "03:00.0", "0000:F3:00.0" or "00000000:4F:00.0" (nvidia-smi)."""
    if not text:
        return None
    match = re.search(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", text)
    if not match:
        return None
    domain = (match.group(1) or "0000")[-4:]
    return f"{domain}:{match.group(2)}:{match.group(3)}.{match.group(4)}".lower()


@dataclass
class GpuRecord:
    """The facts about one GPU that more than one SMI tool reports, under one name each (issue 20
    item 9: temperature_hotspot_c was temperature_junction_c in rocm-smi's record, power_w was
    socket_power_w or power_draw_w). amd-smi's, rocm-smi's and nvidia-smi's records extend it, so
    code that reads one reads them all; None where that output did not say (or the tool never does:
    nvidia-smi has no edge or hotspot sensor)."""

    bdf: str | None = None
    name: str | None = None
    serial: str | None = None
    vbios_version: str | None = None
    pcie_speed_gts: float | None = None
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    power_cap_max_w: float | None = None
    temperature_edge_c: float | None = None
    temperature_hotspot_c: float | None = None
    temperature_mem_c: float | None = None
    vram_total_mib: float | None = None


@dataclass
class AmdGpuRecord(GpuRecord):
    """What AMD's two tools (amd-smi, rocm-smi) both report beyond that: the GPU's index, ids and gfx
    target, VRAM in use, PCIe replays, NUMA placement and the firmware versions by name."""

    index: int | None = None
    device_id: str | None = None
    subsystem_id: str | None = None
    gfx_target: str | None = None
    vram_used_mib: float | None = None
    pcie_replay_count: int | None = None
    numa_node: int | None = None
    numa_affinity: int | None = None
    firmware: dict[str, str] = field(default_factory=dict)
