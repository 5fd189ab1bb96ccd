"""The experiments page (companion.cot.results.experiments): the claims it records at each n from the rows of
cot_vs_no_cot.

Meant to fail on a plausible bug: the CoT claim tested where divergent prompts are expected among the evaluation
prompts (or set aside where none are), the competitor taken from the prediction instead of one GD step fewer, the
no-CoT claim's falsifier not the proportional floor, a claim id outside the page's manifest."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.cot.results import experiments
from companion.cot.theory import gd, no_cot
from companion.stats import ROUNDOFF
from companion.verdict import Verdict


def _rule(converged=True, change=-2e-4, even=1e-4):
    """A stopping rule's outcome (companion.cot.results.thm3_2.converge_cot, without the runs)."""
    return dict(converged=converged, steps=2000, change=change, even=even, se_rule=2e-3, history=[])


def _row(n, unstable, d=3, rule_cot=None, rule_noc=None):
    """A row of cot_vs_no_cot with the numbers the verdict reads (the trained models' summaries given)."""
    m_cot = dict(mean=0.101, se=0.002, dof=3.0, pred=0.1, se_from="the spread of 4 training seeds")
    m_noc = dict(mean=no_cot.no_cot_floor(d, n) + 0.01, se=0.01, dof=math.inf, pred=no_cot.no_cot_floor(d, n),
                 se_from="the evaluation prompts")
    return dict(n=n, eta=0.3, m_cot=m_cot, m_noc=m_noc, unstable=unstable, prev=gd.MCEstimate(0.2, 0.001, 0.15, 5000),
                floor_mp=no_cot.no_cot_floor_mp(d, n), rule_cot=rule_cot or _rule(), rule_noc=rule_noc or _rule())


def test_cot_claim_is_set_aside_where_divergent_prompts_are_expected_and_falsified_by_one_step_fewer():
    runs = [_row(9, unstable=0.0), _row(12, unstable=1e-3)]  # 1e-3 x 2000 prompts: two divergent prompts expected
    v = Verdict("cot/experiments", manifest=experiments.manifest([9, 12]), parameters={})
    cot = experiments.record_pairs(v, runs, replicates=4, eval_batch=2000, d=3)
    assert [r.claim for r in cot] == ["cotexp_cot_n9", "cotexp_cot_n12"]
    assert cot[0].status != "not_applicable" and cot[1].status == "not_applicable"
    assert (cot[0].predicted, cot[0].measured, cot[0].falsifier_value) == (0.1, 0.101, 0.2)
    by_id = {r.claim: r for r in v.records}
    for n in (9, 12):
        noc = by_id[f"cotexp_no_cot_n{n}"]
        assert noc.predicted == no_cot.no_cot_floor(3, n) and noc.falsifier_value == no_cot.no_cot_floor_mp(3, n)
    assert set(by_id) == set(experiments.manifest([9, 12]))


def test_a_kind_whose_stopping_rule_did_not_stop_is_not_tested_and_the_optimisation_error_left_joins_the_floor():
    runs = [_row(9, 0.0, rule_cot=_rule(converged=False)), _row(12, 0.0, rule_noc=_rule(converged=False)),
            _row(15, 0.0, rule_cot=_rule(change=3e-4, even=1e-4), rule_noc=_rule(change=-5e-4, even=2e-4))]
    v = Verdict("cot/experiments", manifest=experiments.manifest([9, 12, 15]), parameters={})
    experiments.record_pairs(v, runs, replicates=4, eval_batch=2000, d=3)
    status = {r.claim: r.status for r in v.records}
    assert status["cotexp_cot_n9"] == "not_applicable" != status["cotexp_no_cot_n9"]
    assert status["cotexp_no_cot_n12"] == "not_applicable" != status["cotexp_cot_n12"]
    floors = {r.claim: r.floor for r in v.records}
    assert floors["cotexp_cot_n15"] == pytest.approx(3e-4 + 1e-4 + 3 * ROUNDOFF)
    assert floors["cotexp_no_cot_n15"] == pytest.approx(5e-4 + 2e-4 + 3 * ROUNDOFF)


@pytest.fixture(scope="module")
def row():
    """One n of the page at tiny sizes, trained for real (both kinds, 3 replicates each)."""
    return experiments.cot_vs_no_cot(2, 4, 0.3, 2, steps=30, lr=0.005, lr_final=0.2, lr_no_cot=0.01,
                                     lr_final_no_cot=0.1, replicates=3, eval_batch=300, num_mc=1000, seed=5,
                                     rng=np.random.default_rng(5))


def test_the_no_cot_side_is_replicated_like_the_cot_side(row):
    """Both kinds are trained ``replicates`` times and each replicate is evaluated on its own prompts, so the no-CoT
    claim's band can be the seed spread (one model had only its prompts, which leave training variability out)."""
    assert row["noc"].replicates == 3 and len(row["m_noc"]["means"]) == 3
    assert row["m_noc"]["mean"] == pytest.approx(float(np.mean(row["m_noc"]["means"])))
    assert len(row["m_cot"]["means"]) == 3


def test_each_kind_is_trained_on_its_own_loss_under_the_stopping_rule(row):
    """Both kinds stop by the rule of Thm 3.2 (a horizon of its list, the run's own), the no-CoT models on the
    no-CoT loss, the CoT models on the CoT loss with k positions."""
    from companion.cot.results import thm3_2

    assert row["noc"].config["objective"] == "no_cot" and row["cot"].config["objective"] == "cot"
    assert row["cot"].config["k"] == 2 and row["cot"].config["eta"] == 0.3
    for kind in ("cot", "noc"):
        rule = row[f"rule_{kind}"]
        assert "runs" not in rule and rule["steps"] == row[kind].config["steps"] in thm3_2.rule_horizons(30)[1:]
        assert len(rule["history"]) >= 2


def test_the_verdict_words_follow_the_records():
    """The prose's clauses come from the records: the first pair's CoT claim with its falsifier's distance, or why it
    does not apply (it glued NaN there), and the no-CoT claims counted by status (it said "stay on their floors")."""
    from types import SimpleNamespace as R

    recs = [R(claim="cotexp_cot_n20", status="passed", z_falsifier=-12.34, reason=""),
            R(claim="cotexp_no_cot_n20", status="passed"), R(claim="cotexp_cot_n40", status="passed", z_falsifier=3.0),
            R(claim="cotexp_no_cot_n40", status="not_resolvable")]
    w = experiments.verdict_words(recs)
    assert "$12.3$ standard errors away (claim **passed**)" in w["cot_0"]
    assert w["no_cot"] == "of the 2 no-CoT claims, 1 not resolvable, 1 passed"
    recs[0] = R(claim="cotexp_cot_n20", status="not_applicable", z_falsifier=None, reason="divergent prompts expected")
    assert "does not apply" in experiments.verdict_words(recs)["cot_0"]
    recs[3] = R(claim="cotexp_no_cot_n40", status="passed")
    assert experiments.verdict_words(recs)["no_cot"] == "2 of the 2 no-CoT claims passed"
