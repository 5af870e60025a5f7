"""The reason-code catalogue: every code the code names is in it, and every record is complete."""

import re
from pathlib import Path

from r9700ctl import codes

PACKAGE = Path(__file__).resolve().parents[2] / "r9700ctl"
NAMED = re.compile(r'"(CLUSTER_[A-Z_]+)"')


def test_every_record_has_its_meaning_cause_next_step_action_and_source():
    """load() refuses a record missing a field (a ValueError naming it); the catalogue loads."""
    loaded = codes.load()
    assert loaded and all(record.source and record.next for record in loaded.values())


def test_every_code_the_source_names_is_in_the_catalogue():
    """Bug it guards: a verdict whose code has no record would show no next step (KeyError at run time)."""
    named = {m for path in PACKAGE.rglob("*.py") for m in NAMED.findall(path.read_text())}
    assert named, "the cluster judges name their codes"
    assert sorted(named - set(codes.load())) == []
