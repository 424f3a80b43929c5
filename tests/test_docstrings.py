"""Every public function and class (a module's ``__all__``) has a numpy-style docstring with an Examples section.

The examples themselves run as doctests (``pytest --doctest-modules`` over ``src/attnspec``, see pyproject.toml).
A name counts where it is defined (re-exports are checked in their home module). Modules not converted yet are
listed in ``NOT_YET`` (the visible gap); an entry whose module has no gap left fails the test, so the list only
shrinks.
"""
import importlib
import inspect
import pkgutil
import re

import pytest

import attnspec

EXAMPLES = re.compile(r"^Examples\n-{3,}\s*$", re.M)

#: Modules whose public names do not all have an Examples section yet, by the part of the package that owns them.
NOT_YET = {
    # empty: every module is documented; a module added without Examples must be documented, not listed
}


def _modules() -> list[str]:
    names = [attnspec.__name__]
    for m in pkgutil.walk_packages(attnspec.__path__, attnspec.__name__ + "."):
        if not m.name.rsplit(".", 1)[-1] == "__main__":   # running it is its import
            names.append(m.name)
    return sorted(names)


def _missing(module_name: str) -> list[str]:
    """Public functions and classes of the module without an Examples section in their docstring."""
    mod = importlib.import_module(module_name)
    out = []
    for name in getattr(mod, "__all__", ()):
        obj = getattr(mod, name, None)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != module_name:
            continue
        if not EXAMPLES.search(inspect.getdoc(obj) or ""):
            out.append(name)
    return out


@pytest.mark.parametrize("module_name", _modules())
def test_public_names_have_examples(module_name):
    missing = _missing(module_name)
    if module_name in NOT_YET:
        assert missing, f"{module_name} is documented now: remove it from NOT_YET in tests/test_docstrings.py"
    else:
        assert not missing, (f"{module_name}: public names without an 'Examples' section in their numpy-style "
                             f"docstring: {', '.join(missing)}")


def test_the_check_can_fail():
    def undocumented():
        """No example here."""

    assert not EXAMPLES.search(inspect.getdoc(undocumented))
    assert EXAMPLES.search(inspect.getdoc(_example))


def _example():
    """Something.

    Examples
    --------
    >>> 1 + 1
    2
    """
