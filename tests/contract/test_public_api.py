"""The public surface: every exported name imports, the top level stays light, every error is
an RSEFastError, and a misspelled option fails loudly."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import rse_fast
from rse_fast import errors

PACKAGES = [
    "rse_fast",
    "rse_fast.llm",
    "rse_fast.rse",
    "rse_fast.methods",
    "rse_fast.eval",
    "rse_fast.serve",
    "rse_fast.local",
    "rse_fast.testing",
    "rse_fast.kernels",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_imports(package):
    module = importlib.import_module(package)
    assert module.__all__, f"{package} exports nothing"
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing
    assert set(module.__all__) <= set(dir(module))


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        rse_fast.NoSuchThing  # noqa: B018


def test_import_rse_fast_stays_light():
    code = (
        "import sys, rse_fast\n"
        "heavy = [m for m in ('numpy', 'aiohttp', 'onnxruntime', 'numba') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_voting_method_does_not_load_rse_kernels():
    code = (
        "import sys\nfrom rse_fast import make_method\nmake_method('sc'); make_method('bon')\n"
        "print(','.join(m for m in ('numba', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_version_comes_from_one_place():
    from importlib.metadata import version

    assert rse_fast.__version__ == version("rse-fast")


def test_every_exception_is_an_rse_fast_error():
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__
    ]
    assert len(classes) >= 15
    assert all(issubclass(c, errors.RSEFastError) for c in classes)


def test_unknown_config_option_names_it_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"'tua'.*valid options: .*tau_positive"):
        rse_fast.RSEConfig(rounds=2, tua=0.8)


def test_unknown_method_option_names_it_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"'paralel'.*valid options: .*parallel"):
        rse_fast.make_method("sc", paralel=4)
    with pytest.raises(ValueError, match=r"'judge'"):
        rse_fast.make_method("sc", judge=None)  # only the judging families take a judge
    assert rse_fast.make_method("bon", judge=None, parallel=2).parallel == 2


def test_method_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        rse_fast.Method()  # type: ignore[abstract]


def test_make_method_documents_every_rse_variant():
    from rse_fast.methods.catalog import make_method
    from rse_fast.methods.rse_method import VARIANTS

    doc = make_method.__doc__ or ""
    missing = [v for v in VARIANTS if f"``{v}``" not in doc]
    assert missing == []
