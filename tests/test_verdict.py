import json
import math

import pytest

from companion.verdict import Verdict, VerdictError


def make(tmp_path):
    return Verdict("paper/nb", parameters={"d": 3}, results_dir=tmp_path)


def test_comparisons(tmp_path):
    v = make(tmp_path)
    assert v.check("a", quantity="q", predicted=1.0, measured=1.05, tolerance=0.1, reason="r").passed
    assert not v.check("b", quantity="q", predicted=1.0, measured=1.2, tolerance=0.1, reason="r").passed
    assert v.check("c", quantity="q", predicted=2.0, measured=2.1, tolerance=0.06, comparison="rel", reason="r").passed
    assert not v.check("d", quantity="q", predicted=2.0, measured=2.2, tolerance=0.06, comparison="rel", reason="r").passed
    assert v.check("e", quantity="q", predicted=1.0, measured=0.5, tolerance=0.0, comparison="upper", reason="r").passed
    assert not v.check("f", quantity="q", predicted=1.0, measured=1.5, tolerance=0.1, comparison="upper", reason="r").passed
    assert v.check("g", quantity="q", predicted=1.0, measured=1.5, tolerance=0.0, comparison="lower", reason="r").passed
    assert not v.check("h", quantity="q", predicted=1.0, measured=math.nan, tolerance=10, reason="r").passed


def test_finish_writes_records_and_raises_on_failure(tmp_path):
    v = make(tmp_path)
    v.check("ok", quantity="q", predicted=0.0, measured=1e-17, tolerance=1e-12, reason="round-off")
    v.check("bad", quantity="q", predicted=0.0, measured=1.0, tolerance=1e-12, reason="round-off")
    with pytest.raises(VerdictError, match="1 of 2 claim"):
        v.finish(display=False)
    lines = (tmp_path / "paper__nb.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert [r["claim"] for r in recs] == ["ok", "bad"]
    assert recs[0]["passed"] is True and recs[1]["passed"] is False
    assert recs[0]["parameters"] == {"d": 3}
    assert set(recs[0]) >= {"notebook", "claim", "quantity", "predicted", "measured", "tolerance", "passed", "parameters"}


def test_misuse_is_rejected(tmp_path):
    v = make(tmp_path)
    with pytest.raises(VerdictError, match="no claim"):
        v.finish(display=False)
    with pytest.raises(ValueError, match="identifier"):
        v.check("not an id", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(ValueError, match="reason"):
        v.check("x", quantity="q", predicted=0, measured=0, tolerance=0, reason=" ")
    with pytest.raises(ValueError, match="comparison"):
        v.check("x", quantity="q", predicted=0, measured=0, tolerance=0, comparison="close", reason="r")
    v.check("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(ValueError, match="twice"):
        v.check("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")


def test_no_results_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPANION_RESULTS_DIR", raising=False)
    v = Verdict("paper/nb")
    v.check("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    assert v.write() is None
