"""`companion results`: export with one column per parameter and per claim's numbers, a line plot with
error bars over one parameter, a heat map over two, rejected points marked; old and new verdict records
both read (the newer fields `status`, `se`, ... are optional). No notebook runs here: the sweep's
results.jsonl is written by the test."""

import csv
import json

import pytest

from companion import cli
from companion.run import table as sweep_table


def _record(claim, measured, predicted, passed, **extra):
    rec = {"notebook": "toy", "claim": claim, "quantity": "q", "predicted": predicted, "measured": measured,
           "tolerance": 0.1, "comparison": "abs", "error": abs(measured - predicted), "passed": passed,
           "reason": "r", "parameters": {}}
    rec.update(extra)
    return rec


@pytest.fixture
def sweep(tmp_path):
    """A 3 x 2 grid over (T, eta) with two claims; new-style records (status, se) for T=10, old-style
    for the others; one failing verdict at (T=40, eta=0.2) and one crashed point at (T=40, eta=0.4)."""
    lines = []
    for T in (10, 20, 40):
        for eta in (0.2, 0.4):
            pid = f"p_T={T}_eta={eta}"
            params = {"T": T, "eta": eta, "seed": 1}
            if (T, eta) == (40, 0.4):
                lines.append({"point": pid, "parameters": params, "status": "error", "error": "RuntimeError: boom",
                              "records": []})
                continue
            ok = (T, eta) != (40, 0.2)
            extra = {"status": "passed" if ok else "failed", "se": 0.01 * T, "kind": "theory"} if T == 10 else {}
            recs = [_record("ab", 0.2 - 1 / T + eta, 0.2 + eta, ok, **extra), _record("loss", T * eta, T * eta, True)]
            lines.append({"point": pid, "parameters": params, "status": "ok" if ok else "failed", "error": None,
                          "records": recs})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


def test_csv_has_one_column_per_parameter_and_per_claim_number(sweep, tmp_path, capsys):
    assert cli.main(["results", str(sweep), "--csv", str(tmp_path / "out.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "out.csv")))
    assert len(rows) == 6  # one row per point
    cols = set(rows[0])
    assert {"T", "eta", "seed", "status", "ab.measured", "ab.predicted", "ab.passed", "loss.measured"} <= cols
    assert "ab.se" in cols and "ab.status" in cols  # newer fields exported when present
    by = {(r["T"], r["eta"]): r for r in rows}
    assert float(by["10", "0.2"]["ab.se"]) == pytest.approx(0.1) and by["20", "0.2"]["ab.se"] == ""
    assert by["40", "0.2"]["ab.passed"] == "False" and by["40", "0.4"]["status"] == "error"
    assert by["40", "0.4"]["error"] == "RuntimeError: boom" and by["40", "0.4"]["ab.measured"] == ""
    assert cli.main(["results", str(sweep), "--csv", str(tmp_path / "long.csv"), "--long"]) == 0
    assert len(list(csv.DictReader(open(tmp_path / "long.csv")))) == 5 * 2 + 1  # one per point and claim


def test_line_plot_with_error_bars_and_failures_marked(sweep, tmp_path, capsys):
    table = sweep_table.load(sweep)
    assert table.swept() == ["T", "eta"] and table.claims() == ["ab", "loss"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    captured = {}
    orig = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)  # keep the figure to look at it
    try:
        what = sweep_table.plot(table, tmp_path / "line.png", x="T", claim="ab")
    finally:
        plt.close = orig
    assert (tmp_path / "line.png").stat().st_size > 5000
    assert "over T (3 values, 2 rejected point(s) marked)" in what
    ax = captured["fig"].axes[0]
    # error bars: two points share each T (eta varies), so the spread gives the bars
    err = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    assert err and len(err[0].get_segments()) == 3
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "predicted" in labels and sweep_table.REJECTED_LABEL in labels


def test_a_statement_that_does_not_hold_is_marked_like_a_failure(tmp_path):
    """does_not_hold rejects the paper's statement at that point: the plot marks it as it marks a failure; a
    not_resolvable or not_applicable record is not marked."""
    statuses = {1: "passed", 2: "does_not_hold", 4: "not_resolvable", 8: "failed", 16: "not_applicable"}
    lines = [{"point": f"p{T}", "parameters": {"T": T}, "status": "ok",
              "records": [_record("ab", 1.0, 1.0, st == "passed", status=st)]} for T, st in statuses.items()]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    what = sweep_table.plot(sweep_table.load(tmp_path), tmp_path / "h.png")
    assert "(5 values, 2 rejected point(s) marked)" in what


def test_line_plot_uses_the_records_standard_errors(tmp_path):
    lines = [{"point": f"p{T}", "parameters": {"T": T}, "status": "ok",
              "records": [_record("ab", 1.0, 1.0, True, se=0.05 * T)]} for T in (1, 2, 4)]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    import matplotlib.pyplot as plt

    captured = {}
    orig = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        sweep_table.plot(sweep_table.load(tmp_path), tmp_path / "se.svg")
    finally:
        plt.close = orig
    ax = captured["fig"].axes[0]
    seg = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"][0].get_segments()
    half = sorted(round((s[1][1] - s[0][1]) / 2, 6) for s in seg)
    assert half == [0.05, 0.1, 0.2]
    assert (tmp_path / "se.svg").read_text().lstrip().startswith("<?xml")


def test_heat_map_over_two_parameters(sweep, tmp_path, capsys):
    assert cli.main(["results", str(sweep), "--plot", str(tmp_path / "heat.svg"), "--x", "T", "--y", "eta",
                     "--claim", "loss"]) == 0
    out = capsys.readouterr().out
    assert "heat map of loss measured over (T, eta) (3 x 2, 1 rejected cell(s) marked)" in out  # the crash
    assert (tmp_path / "heat.svg").stat().st_size > 5000


@pytest.mark.parametrize("argv,msg", [
    (["--x", "Q"], "--x 'Q': not a parameter of this sweep; its parameters are: T, eta, seed"),
    (["--claim", "abx"], "--claim 'abx': not a claim of this sweep; its claims are: ab, loss"),
    (["--x", "T", "--y", "T"], "--y 'T': must differ from --x"),
])
def test_plot_options_are_checked(sweep, tmp_path, capsys, argv, msg):
    assert cli.main(["results", str(sweep), "--plot", str(tmp_path / "f.png"), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "f.png").exists()


def test_a_skipped_line_is_named_and_the_exit_status_says_so(sweep, capsys):
    with open(sweep / "results.jsonl", "ab") as fh:
        fh.write(b'{"point": "p_T=99", "status": "ok", "parameters": {"T"')  # torn
    assert cli.main(["results", str(sweep)]) == 1
    err = capsys.readouterr().err
    assert f"{sweep / 'results.jsonl'} line 7: skipped (cut short by a crash mid-write)" in err
