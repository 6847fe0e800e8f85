"""The public surface: each package's and module's `__all__` names what it offers, and all of it exists."""

import importlib
import inspect
import os

import pytest

import oomwatch
import oomwatch.exporters

MODULES = [
    "oomwatch.snapshot",
    "oomwatch.sampler",
    "oomwatch.flight",
    "oomwatch.words",
    "oomwatch.threads",
    "oomwatch.sources.base",
    "oomwatch.exporters.metrics",
    "oomwatch.exporters.server",
    "oomwatch.exporters.labels",
    "oomwatch.exporters.status",
    "oomwatch.exporters.alertmanager",
    "oomwatch.exporters.recorder",
    "oomwatch.exporters.plot",
]


def test_daemon_package_exports_resolve():
    assert "__version__" in oomwatch.__all__
    for name in oomwatch.__all__:
        assert getattr(oomwatch, name) is not None, name
    assert sorted(set(oomwatch.__all__)) == sorted(oomwatch.__all__)


def test_exporters_package_lists_its_modules():
    for name in oomwatch.exporters.__all__:
        assert inspect.ismodule(importlib.import_module(f"oomwatch.exporters.{name}"))


@pytest.mark.parametrize("modname", MODULES)
def test_module_all_is_complete_and_exists(modname):
    mod = importlib.import_module(modname)
    assert hasattr(mod, "__all__"), f"{modname} has no __all__"
    for name in mod.__all__:
        assert hasattr(mod, name), f"{modname}.__all__ names {name!r}, which does not exist"
    defined = {
        name
        for name, obj in vars(mod).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == modname
    }
    assert defined <= set(mod.__all__), f"{modname}: public but not in __all__: {sorted(defined - set(mod.__all__))}"


def _parts(rel: str) -> list[str]:
    return [] if rel == "." else rel.split(os.sep)


def test_every_package_folder_is_installed():
    """A non-editable install ships only the packages pyproject lists: a new folder left out of the list works
    in a checkout and fails for every user (`No module named oomwatch.commands`)."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        folder_of = tomllib.load(f)["tool"]["setuptools"]["package-dir"]  # import name -> folder
    found = {
        ".".join([name, *_parts(os.path.relpath(d, os.path.join(root, folder)))])
        for name, folder in folder_of.items()
        for d, _, files in os.walk(os.path.join(root, folder))
        if "__init__.py" in files
    }
    assert found == listed
