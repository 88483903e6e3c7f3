"""Where things are, for every test module and helper: the repository, the test suite, its data files and the toy plugin
project (test modules never locate them from their own ``__file__``: test_suite_layout.py)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO_ROOT = TESTS.parent
DATA = SUPPORT / "data"  # small real data files (data/NOTICE.md)
PLUGINS = SUPPORT / "plugins"  # a project folder whose task registers a third model family (toyseq)
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"  # the full data sets, where a checkout has them beside it
