"""tools/evidence_table.py: the per-page evidence table of a built book, read from its records only."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("evidence_table", ROOT / "tools" / "evidence_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rec(claim, nb="cot/x", **kw):
    base = dict(notebook=nb, claim=claim, kind="statistical", status="passed", target="trained", predicted=1.0,
                measured=1.02, se=0.01, crit=3.93, falsifier_value=1.2, detectable=0.05, powered=True)
    return {**base, **kw}


def test_the_table_counts_trained_evidence_rejected_with_power_and_shared_models_once(tmp_path, capsys):
    tool = _tool()
    records = [
        _rec("a", experiment="models"), _rec("b", experiment="models"),  # one experiment, two readings
        _rec("c", nb="mesa/y", headline=True),
        _rec("d", powered=False),  # its falsifier within what the claim detects
        _rec("e", supporting="repeats a"),  # not evidence
        _rec("f", kind="identity"),  # not evidence
        _rec("g", target="monte_carlo"),
        _rec("h", status="not_resolvable"),
        _rec("i", falsifier_value=0.0, nb="mesa/y"),  # rejects 0
        _rec("j", falsifier_value=1.0, status="not_resolvable"),  # a falsifier equal to the prediction
    ]
    assert tool.tally(records) == dict(evidence=8, passed_trained=5, powered=4, experiments=3, at_zero=1,
                                       at_prediction=1)
    text = tool.table(records)
    assert text.index("### cot/x") < text.index("### mesa/y") and "`e`" not in text and "`f`" not in text
    row = next(line for line in text.splitlines() if line.startswith("| `a`"))
    # z to the prediction +2 and to the falsifier (1.02 - 1.2) / 0.01 = -18; detectable 0.05, 5 % of the prediction
    assert "| 2 | −18 | 3.93 | 0.05 (0.05) | yes |" in row, row  # companion.text.short_number
    assert [ln for ln in tool.table(records, headline_only=True).splitlines() if ln.startswith("| `")] == [
        next(ln for ln in text.splitlines() if ln.startswith("| `c`"))]
    path = tmp_path / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert tool.main([str(path)]) == 0 and "3 independent experiments" in capsys.readouterr().out
    assert tool.main([str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl is not a file" in capsys.readouterr().err
