"""A result names the code that wrote it: the version, and the commit in a checkout."""

from __future__ import annotations

from pathlib import Path

import rse_fast
from rse_fast.util.version import code_version


def test_the_code_version_names_the_package_and_its_commit():
    seen = code_version()
    assert seen.startswith(rse_fast.__version__)
    in_checkout = (Path(rse_fast.__file__).resolve().parent.parent / ".git").exists()
    assert ("+g" in seen) == in_checkout
