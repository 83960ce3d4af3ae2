"""`batchsim.gpu.yaml_load.safe_load` is `yaml.safe_load`: the same objects, the same errors."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
import yaml

import batchsim.gpu.yaml_load as yaml_load_module
from batchsim.gpu.yaml_load import safe_load

_ROOT = Path(__file__).resolve().parents[2]
_SHIPPED = sorted([*(Path(str(files("batchsim.hardware_profiles")))).rglob("*.yaml"),
                   *(_ROOT / "experiments").glob("*.yaml")])

_DOCUMENTS = [
    "a: 1\nb: [1.5, 2e3, .inf, -.nan, null, ~, yes, 'no']\nc: {d: 2023-11-16}\n",
    "- 0x1f\n- 0o17\n- 1_000\n- +12\n- 3.\n- !!str 7\n",
    "key: |\n  text\n  lines\nother: >-\n  folded\n  text\n",
    "",
]
_INVALID = ["a: [1, 2\n", "a: 1\n a: 2\n", "key: value: other\n", "\t- tab\n", "!!python/int 3\n"]


@pytest.mark.parametrize("path", _SHIPPED, ids=lambda p: p.name)
def test_shipped_files_load_to_the_same_objects(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    expected = yaml.safe_load(text)
    assert repr(safe_load(text)) == repr(expected)


@pytest.mark.parametrize("text", _DOCUMENTS)
def test_documents_load_to_the_same_objects(text: str) -> None:
    assert repr(safe_load(text)) == repr(yaml.safe_load(text))


@pytest.mark.parametrize("text", _INVALID)
@pytest.mark.parametrize("fast", [True, False])
def test_an_invalid_document_raises_what_safe_load_raises(
        text: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:  # PyYAML built without libyaml
        monkeypatch.setattr(yaml_load_module, "_FAST_LOADER", None)
    with pytest.raises(yaml.YAMLError) as expected:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as got:
        safe_load(text)
    assert str(got.value) == str(expected.value)
    assert type(got.value) is type(expected.value)


def test_without_libyaml_it_is_safe_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_load_module, "_FAST_LOADER", None)
    assert safe_load(_DOCUMENTS[0]) == yaml.safe_load(_DOCUMENTS[0])
