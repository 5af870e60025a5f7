"""Read the agent's data files (manifest.yaml, thresholds.yaml) on a node that has no PyYAML.

The files keep to a plain YAML subset: block mappings and `- item` lists by indentation,
comments, scalars (int, float, true/false/yes/no, null/~, quoted or bare strings), flow
collections (`[a, b]`, `{k: v}`, which may continue on the next lines) and block scalars
(`key: >-` folded, `key: |` literal). `parse_yaml_subset` reads exactly that and raises
DataFileError (with file:line) on anything else; a unit test holds it equal to yaml.safe_load
on the shipped files. PyYAML is never imported here, so the agent behaves the same on every node.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


class DataFileError(Exception):
    """A data file is missing or outside the supported YAML subset (message carries file:line)."""


_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?$")
_BOOL = {
    **{w: True for w in ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON")},
    **{w: False for w in ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF")},
}
_NULL = {"", "~", "null", "Null", "NULL"}


def _scalar(text: str, where: str) -> Any:
    text = text.strip()
    if text[:1] in "\"'":
        value, rest = _quoted(text, 0, where)
        if rest.strip():
            raise DataFileError(f"{where}: text after a quoted string: {rest.strip()!r}")
        return value
    if text[:1] in "&*!|>%@`":
        raise DataFileError(f"{where}: YAML feature {text[0]!r} is not supported in agent data files")
    if text in _NULL:
        return None
    if text in _BOOL:
        return _BOOL[text]
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text) and any(c.isdigit() for c in text):
        return float(text.replace("_", ""))
    if text in (".inf", ".Inf", "+.inf"):
        return float("inf")
    if text in ("-.inf", "-.Inf"):
        return float("-inf")
    if text in (".nan", ".NaN"):
        return float("nan")
    return text


def _quoted(text: str, start: int, where: str) -> tuple[str, str]:
    """Parse a quoted string at text[start]; return (value, text after the closing quote)."""
    quote = text[start]
    out = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if quote == "'" and c == "'":
            if text[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), text[i + 1 :]
        if quote == '"' and c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/"}.get(nxt, "\\" + nxt))
            i += 2
            continue
        if quote == '"' and c == '"':
            return "".join(out), text[i + 1 :]
        out.append(c)
        i += 1
    raise DataFileError(f"{where}: unterminated {quote}quoted{quote} string")


def _strip_comment(line: str) -> str:
    """Drop a trailing `# comment` that is outside quotes."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
        elif c in "\"'" and (i == 0 or line[i - 1] in " \t[{,:"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_key(text: str, where: str) -> tuple[str, str] | None:
    """Split `key: value` (or `key:`) at the first mapping colon; None when it is not a mapping line."""
    if text[:1] in "\"'":
        key, rest = _quoted(text, 0, where)
        rest = rest.lstrip()
        if rest == ":" or rest.startswith(": "):
            return key, rest[1:].strip()
        return None
    match = re.match(r"^([^\s:#\[\]{},][^:#]*?)\s*:(\s+|$)", text)
    if not match:
        return None
    return match.group(1), text[match.end() :].strip()


def _flow(text: str, where: str) -> Any:
    value, rest = _flow_value(text, 0, where)
    if text[rest:].strip():
        raise DataFileError(f"{where}: unexpected text after a flow collection: {text[rest:].strip()!r}")
    return value


def _flow_value(text: str, i: int, where: str) -> tuple[Any, int]:
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        raise DataFileError(f"{where}: flow collection ends early")
    if text[i] == "[":
        items: list[Any] = []
        i += 1
        while True:
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "]":
                return items, i + 1
            item, i = _flow_value(text, i, where)
            items.append(item)
            i = _flow_sep(text, i, "]", where)
            if text[i - 1] == "]":
                return items, i
    if text[i] == "{":
        mapping: dict[Any, Any] = {}
        i += 1
        while True:
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "}":
                return mapping, i + 1
            key, i = _flow_value(text, i, where)
            while i < len(text) and text[i] == " ":
                i += 1
            if i >= len(text) or text[i] != ":":
                raise DataFileError(f"{where}: expected ':' in a flow mapping")
            value, i = _flow_value(text, i + 1, where)
            mapping[key] = value
            i = _flow_sep(text, i, "}", where)
            if text[i - 1] == "}":
                return mapping, i
    if text[i] in "\"'":
        value, rest = _quoted(text, i, where)
        return value, len(text) - len(rest)
    end = i
    while (
        end < len(text)
        and text[end] not in ",]}"
        and not (text[end] == ":" and text[end + 1 : end + 2] in (" ", ""))
    ):
        end += 1
    return _scalar(text[i:end], where), end


def _flow_sep(text: str, i: int, close: str, where: str) -> int:
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] in ("," + close):
        return i + 1
    raise DataFileError(f"{where}: expected ',' or '{close}' in a flow collection")


def _open_brackets(text: str) -> int:
    """How many [ and { are still open at the end of `text` (quotes respected)."""
    depth, quote = 0, ""
    for c in text:
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
    return depth


def _value(text: str, where: str) -> Any:
    return _flow(text, where) if text[:1] in "[{" else _scalar(text, where)


_BLOCK_SCALAR = re.compile(r"^([|>])([-+]?)$")


def parse_yaml_subset(text: str, name: str = "<data>") -> Any:
    """Parse the YAML subset described in the module docstring."""
    return _SubsetParser(text, name).parse()


class _SubsetParser:
    """Indentation-driven parser over the significant lines (comments and blanks dropped);
    block scalars (`key: >-`, `key: |`) read the raw lines, where `#` is text."""

    def __init__(self, text: str, name: str) -> None:
        self.name = name
        self.raw = text.splitlines()
        # (line number, indent, text without comment)
        self.lines: list[tuple[int, int, str]] = []
        for number, raw in enumerate(self.raw, start=1):
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                raise DataFileError(f"{name}:{number}: tab in indentation")
            stripped = _strip_comment(raw)
            if not stripped.strip() or stripped.strip() == "---":
                continue
            self.lines.append((number, len(stripped) - len(stripped.lstrip()), stripped.strip()))

    def parse(self) -> Any:
        if not self.lines:
            return None
        value, index = self._block(0, self.lines[0][1])
        if index != len(self.lines):
            raise DataFileError(f"{self.name}:{self.lines[index][0]}: unexpected indentation")
        return value

    def _block(self, index: int, indent: int) -> tuple[Any, int]:
        number, _, text = self.lines[index]
        if text.startswith("- ") or text == "-":
            return self._sequence(index, indent)
        if _split_key(text, f"{self.name}:{number}") is None:
            if len(self.lines) == index + 1 or self.lines[index + 1][1] < indent:
                return _value(text, f"{self.name}:{number}"), index + 1
            raise DataFileError(f"{self.name}:{number}: expected 'key: value'")
        return self._mapping(index, indent)

    def _mapping(self, index: int, indent: int) -> tuple[dict, int]:
        result: dict[Any, Any] = {}
        while index < len(self.lines):
            number, line_indent, text = self.lines[index]
            where = f"{self.name}:{number}"
            if line_indent < indent:
                break
            if line_indent > indent:
                raise DataFileError(f"{where}: unexpected indentation")
            split = _split_key(text, where)
            if split is None:
                raise DataFileError(f"{where}: expected 'key: value'")
            key, rest = split
            if key in result:
                raise DataFileError(f"{where}: duplicate key {key!r}")
            index += 1
            block = _BLOCK_SCALAR.match(rest)
            if block:
                result[key], index = self._block_scalar(number, indent, block.group(1), block.group(2))
            elif rest:
                if rest[:1] in "[{":
                    rest, index = self._join_flow(rest, index)
                result[key] = _value(rest, where)
            elif index < len(self.lines) and self.lines[index][1] > indent:
                result[key], index = self._block(index, self.lines[index][1])
            elif (
                index < len(self.lines)
                and self.lines[index][1] == indent
                and self.lines[index][2].startswith("- ")
            ):
                result[key], index = self._sequence(index, indent)
            else:
                result[key] = None
        return result, index

    def _join_flow(self, text: str, index: int) -> tuple[str, int]:
        """A flow collection continued on the following lines: join them until the brackets close."""
        while _open_brackets(text) > 0 and index < len(self.lines):
            text += " " + self.lines[index][2]
            index += 1
        return text, index

    def _block_scalar(self, number: int, indent: int, style: str, chomp: str) -> tuple[str, int]:
        """`>` (folded) or `|` (literal) text on the raw lines below line `number`."""
        body: list[str] = []
        end = number  # 1-based number of the last raw line of the scalar
        for offset, raw in enumerate(self.raw[number:], start=number + 1):
            if raw.strip() and len(raw) - len(raw.lstrip()) <= indent:
                break
            body.append(raw)
            end = offset
        while body and not body[-1].strip():
            body.pop()
        content_indent = min((len(r) - len(r.lstrip()) for r in body if r.strip()), default=0)
        rows = [r[content_indent:] if r.strip() else "" for r in body]
        if style == "|":
            text = "\n".join(rows)
        else:
            text, pending = "", ""
            for row in rows:
                if not row:
                    text += "\n"
                    pending = ""
                    continue
                text += pending + row
                pending = " "
        if chomp != "-" and rows:
            text += "\n"
        index = next((i for i, line in enumerate(self.lines) if line[0] > end), len(self.lines))
        return text, index

    def _sequence(self, index: int, indent: int) -> tuple[list, int]:
        items: list[Any] = []
        while index < len(self.lines):
            number, line_indent, text = self.lines[index]
            if line_indent != indent or not (text.startswith("- ") or text == "-"):
                break
            item = text[1:].strip()
            where = f"{self.name}:{number}"
            if _split_key(item, where) is not None:
                raise DataFileError(
                    f"{where}: mappings inside '- ' lists are not supported in agent data files"
                )
            items.append(_value(item, where))
            index += 1
        return items, index


def load_yaml(path: Path) -> Any:
    """Load a data file with the subset parser (never PyYAML: the agent imports only the stdlib)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_yaml_subset(text, str(path))


@functools.lru_cache(maxsize=8)
def load_data(name: str) -> Any:
    """A file of r9700ctl/data/ (cached)."""
    return load_yaml(DATA_DIR / name)


def gpu_models() -> dict[str, dict[str, Any]]:
    """The manifest's GPU models by "vendor:device" PCI id (lower case); {} if the manifest is missing."""
    try:
        manifest = load_data("manifest.yaml") or {}
    except DataFileError:
        return {}
    return {str(k).lower(): dict(v or {}) for k, v in (manifest.get("gpus") or {}).items()}


def gfx_name(gfx_target_version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as an LLVM target: 120001 -> gfx1201."""
    major, rest = divmod(int(gfx_target_version), 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"
