"""pre_execute computes the mesa notebooks' shared training runs before a mesa page runs (with the run cache on)."""

from __future__ import annotations

import pytest
from _site import copy_book_frame

from companion.site import book

from _util import FIXTURES


@pytest.mark.slow  # runs the book's page machinery: not in the fast suite (make test-fast)
def test_a_mesa_page_to_run_warms_the_run_cache_first(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path / "runs"))
    calls = []
    monkeypatch.setattr(book, "paper_runs", lambda: ["one run"])
    monkeypatch.setattr(book, "warm_run_cache", lambda jobs, log=None: calls.append(jobs) or 0.0)
    root = tmp_path / "mini"
    copy_book_frame(root, ["mesa/toy"], execute="cache")
    toy = (FIXTURES / "toy.md").read_text().replace("n: int = 2000", "n: int = 300")
    (root / "notebooks" / "mesa").mkdir(parents=True, exist_ok=True)
    (root / "notebooks" / "mesa" / "toy.md").write_text(toy.replace('Verdict("toy"', 'Verdict("mesa/toy"'))
    done = book.pre_execute(root, jobs=1)
    assert calls == [1] and set(done) == {"notebooks/mesa/toy.md"}
