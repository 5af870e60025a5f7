"""The role variables of the collection r9700ctl.nodes as Markdown, from the roles' argument specs.

README.md's section "Use it from your own Ansible" holds this text between two marker lines; a
test keeps the two equal. The argument specs are the one truth: Ansible validates a role's
variables against them when the role starts, ansible-doc prints them
(`ansible-doc -t role r9700ctl.nodes.ROLE`), and r9700ctl's inventory check reads them too.
Regenerate the README's block with `python -m r9700ctl.collection_docs README.md`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from r9700ctl import paths

BEGIN = "<!-- BEGIN role variables: generated from the argument specs by r9700ctl/collection_docs.py -->"
END = "<!-- END role variables -->"


def render_variables(roles_dir: Path | None = None) -> str:
    """Every role's entry points and their variables: type, default and the first line of the description."""
    roles_dir = roles_dir or paths.content_dir("roles")
    lines: list[str] = []
    for role in sorted(p for p in roles_dir.iterdir() if (p / "meta" / "argument_specs.yml").is_file()):
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text(encoding="utf-8")) or {}
        for entry, spec in (specs.get("argument_specs") or {}).items():
            options = {name: o for name, o in (spec.get("options") or {}).items() if not name.startswith("_")}
            title = f"{paths.COLLECTION}.{role.name}" + ("" if entry == "main" else f" (tasks_from: {entry})")
            lines += ["", f"**{title}**: {_cell(spec.get('short_description', ''))}", ""]
            if not options:
                lines.append("No variables.")
                continue
            lines += ["| variable | type | default | what it sets |", "|---|---|---|---|"]
            for name, option in sorted(options.items()):
                lines.append(f"| `{name}` | {_type(option)} | {_default(option)} | {_cell(_first(option))} |")
    return "\n".join([BEGIN, *lines, "", END])


def update_readme(text: str, block: str) -> str:
    """`text` with the lines from BEGIN to END replaced by `block`."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def _type(option: dict[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    if kind == "list" and option.get("elements"):
        kind = f"list of {option['elements']}"
    if option.get("choices"):
        kind += ": " + ", ".join(f"`{c}`" for c in option["choices"])
    return _cell(kind)


def _default(option: dict[str, Any]) -> str:
    if option.get("required"):
        return "required"
    if "default" not in option:
        return "(none)"
    return f"`{_cell(json.dumps(option['default']))}`"


def _first(option: dict[str, Any]) -> str:
    description = option.get("description") or ""
    first = description[0] if isinstance(description, list) and description else description
    return " ".join(str(first).split())


def _cell(text: str) -> str:
    """Text that stays in one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def main(argv: list[str]) -> int:
    """python -m r9700ctl.collection_docs README.md: rewrite the README's block in place."""
    if len(argv) != 1:
        print("usage: python -m r9700ctl.collection_docs README.md", file=sys.stderr)
        return 64
    readme = Path(argv[0])
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"{readme}: no block to replace: add the lines {BEGIN} and {END}", file=sys.stderr)
        return 64
    readme.write_text(update_readme(text, render_variables()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
