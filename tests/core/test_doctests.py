"""The ``>>>`` examples in gsd_core's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["gsd_core.block_verification", "gsd_core.checks", "gsd_core.exact", "gsd_core.lantern",
           "gsd_core.multidraft",
           "gsd_core.rules", "gsd_core.verification"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_the_paper_facing_functions_have_examples():
    finder = doctest.DocTestFinder()
    import gsd_core

    for obj in (gsd_core.verify, gsd_core.acceptance_rate, gsd_core.output_distribution,
                gsd_core.DynamicClusters, gsd_core.RankBinnedClusters, gsd_core.rules.member_table):
        tests = [t for t in finder.find(obj) if t.examples and t.name.endswith(obj.__qualname__)]
        assert tests, f"{obj.__qualname__} has no >>> example"
