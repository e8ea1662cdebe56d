"""The digits model's training command (``python -m gsd_train.digits train``) parses its stages
and refuses an unknown one by name, before any stage runs."""

import pytest

from gsd_train.digits.__main__ import main


def test_an_unknown_stage_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"unknown stages \['tokeniser'\]"):
        main(["train", "--out", str(tmp_path / "run"), "--stages", "tokeniser,ar"])
    assert not (tmp_path / "run" / "tokenizer.safetensors").exists()
