"""No file of the product cites a document that is not in this repository (issue 9 item 8).

The project's working notes (a facts sheet, a design note, research write-ups) stay outside the
repository; what a user needs from them is in docs/ with its public sources. A citation of
docs/<name>.md must name a page that exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Names of the notes outside the repository, as code and docs used to cite them.
OUTSIDE = re.compile(
    r"\b(FACTS\.md|DESIGN\.md|STYLE\.md|BRIEF\.md|PRODUCT\.md|research/\w+\.md)"
    r"|(?<![\w/])((?:validation|provisioning)\.md)"  # the research notes cited without their folder
)
DOCS_PAGE = re.compile(r"\bdocs/([\w-]+\.md)")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    files = []
    for name in filter(None, names):
        path = ROOT / name
        if path == Path(__file__) or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            path.read_text()
        except UnicodeDecodeError:
            continue  # binary
        files.append(path)
    return files


def test_no_tracked_file_cites_a_note_outside_the_repository():
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in tracked_text_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in OUTSIDE.finditer(line)
    ]
    assert cited == [], "cite the page in docs/ (or the public source) instead:\n" + "\n".join(cited)


def test_every_cited_docs_page_exists():
    missing = [
        f"{path.relative_to(ROOT)}:{number}: docs/{match.group(1)}"
        for path in tracked_text_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in DOCS_PAGE.finditer(line)
        if not (ROOT / "docs" / match.group(1)).is_file()
    ]
    assert missing == [], "\n".join(missing)
