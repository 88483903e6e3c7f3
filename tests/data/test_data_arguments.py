"""A data module's ``data.*`` arguments read from its source (no import) are those of the imported class, and the
reading falls back to the import wherever the source does not state them plainly."""

import sys
import textwrap

import pytest

from mixbench.core.errors import ConfigError
from mixbench.data import get_datamodule_class, list_datamodules
from mixbench.data.arguments import data_arguments, datamodule_arguments, declared_arguments


@pytest.mark.parametrize("name", list_datamodules())
def test_every_builtin_loader_is_read_from_its_source_as_imported(name):
    from mixbench.data import _DATAMODULES

    declared = declared_arguments(_DATAMODULES[name])
    assert declared is not None, f"{name}: its arguments are no longer readable from the source (compose would import it)"
    imported = data_arguments(get_datamodule_class(name))
    assert list(declared.items()) == list(imported.items())  # names, order and defaults
    assert "batch_size" in declared and "seed" not in declared


SOURCE = """
import os

SIZE = 32
LATER = 1
STD = (0.5, 0.5)


def bump():
    global LATER
    LATER = 2


class Base:
    def __init__(self, path: str = "embedded", batch_size: int = SIZE, *, std=STD, workers=None, seed=0):
        pass


class Inherits(Base):
    pass


class Computed:
    def __init__(self, batch_size=os.cpu_count()):
        pass


class Rebound:
    def __init__(self, batch_size=LATER):
        pass


class Loose:
    def __init__(self, batch_size=1, **rest):
        pass
"""


@pytest.fixture
def loaders(tmp_path, monkeypatch):
    (tmp_path / "my_loaders.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_loaders"
    sys.modules.pop("my_loaders", None)


def test_source_reading_resolves_constants_and_inheritance_without_importing(loaders):
    expected = {"path": "embedded", "batch_size": 32, "std": (0.5, 0.5), "workers": None}
    assert declared_arguments(f"{loaders}:Base") == expected
    assert declared_arguments(f"{loaders}:Inherits") == expected
    assert loaders not in sys.modules


@pytest.mark.parametrize("cls", ["Computed", "Rebound", "Loose", "Missing"])
def test_what_the_source_does_not_say_plainly_is_not_guessed(loaders, cls):
    assert declared_arguments(f"{loaders}:{cls}") is None


def test_the_fallback_imports_the_class(loaders, monkeypatch):
    import mixbench.data

    for name, cls in (("test_rebound", "Rebound"), ("test_loose", "Loose")):  # registered for this test only
        monkeypatch.setitem(mixbench.data._DATAMODULES, name, f"{loaders}:{cls}")
    assert datamodule_arguments("test_rebound") == {"batch_size": 1}  # the value the import sees
    assert loaders in sys.modules
    with pytest.raises(ConfigError, match="declare every argument"):
        datamodule_arguments("test_loose")
    with pytest.raises(ConfigError, match="unknown data loader 'nope'"):
        datamodule_arguments("nope")
