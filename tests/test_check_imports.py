"""tools/check_imports.py, which `make lint` runs, finds what it is there to refuse: an
import cycle, a function-local import of a project module, a private name shared
between modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import grimp
import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "check_imports.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("check_imports", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Write a package `loam_probe` from {module: source} and put it on sys.path."""

    def write(files: dict[str, str]) -> Path:
        root = tmp_path / "loam_probe"
        root.mkdir()
        (root / "__init__.py").write_text("")
        for name, source in files.items():
            (root / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        return root

    yield write
    for name in [m for m in sys.modules if m.startswith("loam_probe")]:
        del sys.modules[name]


def test_a_cycle_is_found_with_every_module_in_it(tool, package):
    package({
        "a": "from loam_probe import b\n",
        "b": "from loam_probe import c\n",
        "c": "from loam_probe import a\n",
        "d": "from loam_probe import a\n",
    })  # fmt: skip
    assert tool.cycles(grimp.build_graph("loam_probe")) == [["loam_probe.a", "loam_probe.b", "loam_probe.c"]]


def test_an_acyclic_package_has_none(tool, package):
    package({"a": "from loam_probe import b\n", "b": "import json\n"})
    assert tool.cycles(grimp.build_graph("loam_probe")) == []


def test_local_imports_of_project_modules_are_found_and_third_party_ones_allowed(tool, package):
    root = package({
        "a": (
            "def f():\n    from loam_probe import b\n    import json\n    return b, json\n"
            "async def g():\n    import loam_common.keys\n"
        ),
        "b": "",
    })  # fmt: skip
    assert tool.local_imports(root / "a.py") == [(2, "loam_probe (b)"), (6, "loam_common.keys")]


def test_private_names_of_another_module_are_found(tool, package):
    root = package({
        "a": "from loam_probe import b\nfrom loam_probe.b import _hidden\nb._helper()\nb.public()\n",
        "b": "def _helper(): ...\ndef _hidden(): ...\ndef public(): ...\n",
    })  # fmt: skip
    assert sorted(tool.private_uses(root / "a.py")) == [(2, "loam_probe.b._hidden"), (3, "b._helper")]
