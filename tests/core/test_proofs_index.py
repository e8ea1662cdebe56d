"""proofs/: one claim per file, each ending with the tests that check it, and those tests exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROOFS = sorted((ROOT / "proofs").glob("[0-9][0-9]_*.md"))
REFERENCE = re.compile(r"`(tests/(?:core|lab)/[\w/]+\.py)(?:::(\w+))?")


def test_the_numbered_claims_run_from_01_without_gaps():
    assert [p.name[:2] for p in PROOFS] == [f"{i:02d}" for i in range(1, len(PROOFS) + 1)]
    assert len(PROOFS) >= 10


def test_every_proof_ends_with_existing_tests():
    for proof in PROOFS:
        text = proof.read_text()
        assert "**Checked by:**" in text, proof.name
        tail = text.split("**Checked by:**")[-1]
        references = REFERENCE.findall(tail)
        assert references, proof.name
        for path, name in references:
            source = (ROOT / path).read_text()
            if name:
                assert re.search(rf"^def {name}\(", source, re.MULTILINE), (proof.name, path, name)
