"""Print the evidence of a built book as a referee reads it: per result page, every claim counted as evidence.

Reads the verdict records a build collected (``_build/results/all.jsonl`` after ``make book``, or a sweep's or
another build's ``all.jsonl``) and prints, per notebook, one Markdown row per evidence claim
(:func:`companion.report.is_evidence`: not an identity, not supporting): status, target, measured ± SE, the
prediction, the falsifier's value, the signed z to each (in the record's SE), the critical value, and the smallest
deviation the claim detects with probability 0.99 (``detectable``, and as a share of the prediction) with whether the
falsifier lies beyond it (``powered``). Then the counts an outside review asks for: passed trained evidence records
whose falsifier is rejected with power, and how many independent experiments they are (claims that read the same
trained models count once: :attr:`companion.claims.ClaimSpec.experiment`), with two marks of a weak falsifier that a
script can see (the value 0; a value equal to the prediction); whether a falsifier is one a sceptic would propose
is for the reader::

    python tools/evidence_table.py                      # the book built in this folder
    python tools/evidence_table.py path/to/all.jsonl --headline

Numbers only from the records; nothing is recomputed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from companion.text import short_number as _num

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "_build" / "results" / "all.jsonl"


def z_to(value, r: dict):
    """Signed (measured - value) / se of record ``r``; None without a measurement, a value or a standard error."""
    m, se = r.get("measured"), r.get("se")
    if value is None or m is None or not se:
        return None
    return (m - value) / se


def row(r: dict) -> str:
    """One Markdown row of an evidence record."""
    pred, det = r.get("predicted"), r.get("detectable")
    share = f" ({_num(det / abs(pred))})" if det is not None and pred else ""
    flags = "".join(f for f, on in (("H", r.get("headline")), ("E", r.get("experiment"))) if on)
    power = {True: "yes", False: "no"}.get(r.get("powered"), "–")
    return (f"| `{r['claim']}` {flags} | {r.get('status')} | {r.get('target') or '–'} | "
            f"{_num(r.get('measured'))} ± {_num(r.get('se'))} | {_num(pred)} | {_num(r.get('falsifier_value'))} | "
            f"{_num(z_to(pred, r))} | {_num(z_to(r.get('falsifier_value'), r))} | {_num(r.get('crit'))} | "
            f"{_num(det)}{share} | {power} |")


HEAD = ("| claim | status | target | measured ± SE | predicted | falsifier | z to prediction | z to falsifier | crit "
        "| detectable (share of prediction) | falsifier beyond it |\n|---|---|---|---|---|---|---|---|---|---|---|")


def tally(records: list[dict]) -> dict:
    """The counts of the summary: evidence records, passed trained ones, those rejecting a falsifier with power,
    and the independent experiments among the last."""
    from companion.report import is_evidence

    ev = [r for r in records if is_evidence(r)]
    trained = [r for r in ev if r.get("status") == "passed" and r.get("target") == "trained"]
    powered = [r for r in trained if r.get("falsifier_value") is not None and r.get("powered")]
    experiments = {r["experiment"] for r in powered if r.get("experiment")}
    return dict(evidence=len(ev), passed_trained=len(trained), powered=len(powered),
                experiments=len(experiments) + sum(1 for r in powered if not r.get("experiment")),
                at_zero=sum(1 for r in powered if r["falsifier_value"] == 0 != r.get("predicted")),
                at_prediction=sum(1 for r in ev if r.get("falsifier_value") is not None
                                  and r.get("falsifier_value") == r.get("predicted")))


def table(records: list[dict], headline_only: bool = False) -> str:
    """The whole Markdown text: a section per notebook, then the counts."""
    from companion.report import is_evidence

    pages = defaultdict(list)
    for r in records:
        if is_evidence(r) and (r.get("headline") or not headline_only):
            pages[r["notebook"]].append(r)
    out = []
    for nb in sorted(pages):
        out += [f"### {nb}", "", HEAD, *(row(r) for r in pages[nb]), ""]
    c = tally(records)
    out.append(f"{c['evidence']} evidence records; {c['passed_trained']} passed on trained models, {c['powered']} of "
               f"them rejecting a falsifier with power, in {c['experiments']} independent experiments; of those "
               f"{c['powered']}, {c['at_zero']} reject the value 0 (a referee asks whether 0 is a competitor anyone "
               f"proposes); {c['at_prediction']} evidence records name a falsifier equal to their prediction (a bound "
               "against itself). Flags: H headline, E reads an experiment shared with other claims.")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Per page, the evidence claims of a built book as a referee reads them.")
    parser.add_argument("records", nargs="?", default=str(DEFAULT),
                        help="the build's all.jsonl (default: _build/results/all.jsonl of this folder)")
    parser.add_argument("--headline", action="store_true", help="headline claims only")
    args = parser.parse_args(argv)
    path = Path(args.records)
    if not path.is_file():
        print(f"records: {path} is not a file (build the book first: make book)", file=sys.stderr)
        return 2
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        print(f"records: {path} is not JSON lines ({exc.msg}, line {exc.lineno})", file=sys.stderr)
        return 2
    print(table(records, headline_only=args.headline))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
