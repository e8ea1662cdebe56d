"""gsd_lab's public surface (its ``__init__``): every name resolves, lazily, to the object its
module defines, and is named in the docstring; an unknown name is an AttributeError."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import gsd_lab


@pytest.mark.parametrize("name", sorted(gsd_lab.PUBLIC))
def test_each_public_name_is_its_modules_object_and_documented(name):
    module = importlib.import_module(gsd_lab.PUBLIC[name])
    assert getattr(gsd_lab, name) is getattr(module, name)
    assert f"``{name}``" in gsd_lab.__doc__
    assert name in gsd_lab.__all__ and name in dir(gsd_lab)


def test_an_unknown_name_is_refused():
    with pytest.raises(AttributeError, match="no attribute 'ungenerate'"):
        gsd_lab.ungenerate  # noqa: B018


def test_import_gsd_lab_loads_no_torch():
    code = "import sys, gsd_lab; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "False"


def test_the_lazy_verify_takes_the_rules_fast_paths():
    code = (
        "import gsd_lab, torch; from gsd_core import DynamicClusters; "
        "from gsd_lab.engine.capabilities import window_masses; "
        "p = torch.full((2, 4), 0.25, dtype=torch.float64); "
        "gsd_lab.verify(p, p[:1], torch.tensor([1]), DynamicClusters(2), "
        "generator=torch.Generator()); "
        "print(window_masses.dispatch(DynamicClusters) is not window_masses.dispatch(object))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "True"
