"""r9700ctl's own YAML through libyaml: the same documents as yaml.safe_load, and as safe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from r9700ctl import fastyaml

ROOT = Path(__file__).resolve().parents[2]
OWN_FILES = sorted(
    [*(ROOT / "r9700ctl" / "data").glob("*.yaml"), *(ROOT / "roles").glob("*/defaults/main.yml"),
     *(ROOT / "roles").glob("*/meta/argument_specs.yml")]
)  # fmt: skip


def test_the_manifest_roles_and_data_files_load_as_yaml_safe_load_loads_them() -> None:
    assert len(OWN_FILES) > 20
    for path in OWN_FILES:
        text = path.read_text(encoding="utf-8")
        assert fastyaml.safe_load(text) == yaml.safe_load(text), path


def test_a_python_tag_is_refused_as_the_safe_loader_refuses_it() -> None:
    with pytest.raises(yaml.constructor.ConstructorError):
        fastyaml.safe_load("!!python/object/apply:os.system ['true']")
