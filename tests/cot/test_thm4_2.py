"""Theorem 4.2 (companion.cot.theory.ood, companion.cot.results.thm4_2): the one-step formula and its optimum, the
spectral sufficient condition, the rows of ood_row, the claim bookkeeping (model_claim, growth_claim,
condition_claim), the figure, and the competitor rule it shares with Theorem 3.2 (companion.cot.stats.nearer_neighbour).

Each test is meant to fail on a plausible bug: the printed factor 2 in the one-step formula, swapped edges in the
condition, a paired difference against GD one step short, the farther neighbour as the competitor, a step count
below 0, the mean compared where the median should be, the Welch terms dropped, a claim tested where the theorem
says nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.cot import construction, make_generator, sample_prompts
from companion.cot.results import thm4_2
from companion.cot.stats import nearer_neighbour
from companion.cot.theory import gd, mp, no_cot, ood, wishart
from companion.stats import mean_se, welch


# ----------------------------------------------------------------------------- the theory of the page
def test_one_step_ood_formula_against_monte_carlo():
    d, n, num = 4, 12, 40_000
    rng = np.random.default_rng(3)
    Sigma = np.diag([0.5, 1.0, 1.5, 2.0])
    V = -0.4 * np.eye(d) + 0.05 * rng.standard_normal((d, d))
    S = wishart.sample_S(d, n, num, rng, Sigma)
    # E_w* ||(I + V S) w*||^2 = ||I + V S||_F^2
    per = np.sum((np.eye(d) + V @ S) ** 2, axis=(1, 2))
    pred = ood.one_step_ood_error(V, Sigma, n)
    assert abs(per.mean() - pred) <= 4 * per.std(ddof=1) / np.sqrt(num)
    # isotropic: the formula at V = -eta* I is the no-CoT floor
    assert ood.one_step_ood_error(-no_cot.eta_star(10, 20) * np.eye(10), np.eye(10), 20) == pytest.approx(
        no_cot.no_cot_floor(10, 20), rel=1e-13)


def test_one_step_ood_formula_against_monte_carlo_and_not_the_printed_factor_two():
    rng = np.random.default_rng(2)
    d, n = 4, 10
    Sigma = np.diag(np.linspace(0.5, 2.0, d))
    V = -no_cot.eta_star(d, n) * np.eye(d)
    S = wishart.sample_S(d, n, 100_000, rng, Sigma)
    m, se = mean_se(np.sum((np.eye(d) + V @ S) ** 2, axis=(1, 2)))
    assert abs(m - ood.one_step_ood_error(V, Sigma, n)) <= 4 * se
    assert abs(m - ood.one_step_ood_error(V, Sigma, n, factor=2.0)) > 4 * se


def test_sigma_optimal_one_step_predictor_minimises_the_ood_formula():
    Sigma, n = np.diag([0.5, 1.0, 2.0]), 7
    V = ood.one_step_optimal_V(Sigma, n)
    base = ood.one_step_ood_error(V, Sigma, n)
    rng = np.random.default_rng(10)
    for _ in range(20):
        E = 1e-3 * rng.standard_normal((3, 3))
        assert ood.one_step_ood_error(V + E, Sigma, n) >= base
    # isotropic case: Gamma^{-1} = eta* I and the optimum is the floor
    assert np.allclose(ood.one_step_optimal_V(np.eye(10), 20), -no_cot.eta_star(10, 20) * np.eye(10))


def test_spectral_condition_scales_the_mp_edges_by_the_covariance():
    d, n, eta = 3, 12, 0.4
    Sigma = np.diag([0.5, 1.0, 2.5])
    cond, rho = ood.spectral_condition(eta, Sigma, n)
    lo, hi = (1 - math.sqrt(d / n)) ** 2, (1 + math.sqrt(d / n)) ** 2
    assert cond == pytest.approx(eta * 2.5 * hi, rel=1e-14)
    assert rho == pytest.approx(max(abs(1 - eta * 0.5 * lo), abs(1 - eta * 2.5 * hi)), rel=1e-14)
    # at Sigma = I the rate is GD's on the Marchenko-Pastur support
    assert ood.spectral_condition(eta, np.eye(d), n)[1] == pytest.approx(mp.mp_rate(eta, d / n), rel=1e-14)


def test_ood_prompts_have_the_requested_covariance():
    Sigma = np.diag([0.5, 2.0])
    p = sample_prompts(40_000, 2, 3, make_generator(9), Sigma=Sigma)
    emp = torch.einsum("bdn,ben->de", p.X, p.X).numpy() / (40_000 * 3)
    np.testing.assert_allclose(emp, Sigma, atol=0.03)


# ----------------------------------------------------------------------------- ood_row on the construction
def test_ood_row_follows_gd_for_the_construction():
    class R:  # the exact construction as a "trained" model
        W_KQ, W_PV = construction(3, 0.3)

    rng = np.random.default_rng(1)
    row = thm4_2.ood_row(R, np.diag([0.5, 1.0, 1.5]), 0.3, [4, 8], 9, 4000, 4000, 7, rng)
    for k in (4, 8):
        (mm, ms, _), (ml, ls) = row["ks"][k]["model"], row["ks"][k]["law"]
        assert abs(mm - ml) <= 4 * math.hypot(ms, ls)
    m = row["mean"]
    # the construction is GD on every prompt: the paired difference vanishes to round-off, so the control-variate
    # mean is the independent prediction (a K - 1 step GD in the pairing would leave a difference of about 10 %)
    assert m["finite"] and abs(m["diff"]) <= 1e-9 * m["gd"] and m["measured"] == pytest.approx(m["pred"], rel=1e-9)
    assert abs(m["model"] - m["pred"]) <= 4 * math.hypot(m["pred_se"], m["se"] + m["model"] / math.sqrt(4000))
    assert m["next"] < m["pred"] < m["prev"]
    assert row["growth"]["model"] == row["growth"]["law"] == 0.0 and thm4_2.regime(row) == "inside"
    assert row["cond"] == pytest.approx(0.3 * 1.5 * (1 + math.sqrt(3 / 9)) ** 2)
    assert torch.get_num_threads() >= 1


def test_ood_row_mean_against_exact_wishart_moments_and_growth_beyond_the_boundary():
    class R:
        W_KQ, W_PV = construction(3, 0.3)

    rng = np.random.default_rng(2)
    row = thm4_2.ood_row(R, np.eye(3), 0.3, [2], 9, 2000, 40_000, 3, rng)
    m = row["mean"]  # E tr(I - eta S)^(2k) at k = 2 (prediction) and k = 1 (competitor), exactly
    assert abs(m["pred"] - gd.gd_error_wishart(2, 0.3, 3, 9)) <= 4 * m["pred_se"]
    assert m["prev"] == pytest.approx(gd.gd_error_wishart(1, 0.3, 3, 9), rel=0.02)
    row = thm4_2.ood_row(R, 6.0 * np.eye(3), 0.3, [2, 6], 9, 4000, 20_000, 3, rng)
    g = row["growth"]  # most prompts beyond the boundary: the construction's errors grow as GD's
    assert thm4_2.regime(row) == "beyond" and 0.5 < g["law"] < 1
    assert abs(g["model"] - g["law"]) <= 4 * math.hypot(g["se"], g["law_se"])
    assert g["model"] > thm4_2.in_distribution_growth(3, 9, 6, 0.3, 4000, rng) + 0.3
    # the pilot sample of the growth rule is a second, independent sample of the same law
    assert g["pilot"] != g["law"] and abs(g["pilot"] - g["law"]) <= 4 * math.sqrt(2) * g["law_se"]


# ----------------------------------------------------------------------------- the claims
@pytest.mark.parametrize("prev, nxt, want", [(1.5, 0.8, (4, 0.8)), (1.1, 0.5, (2, 1.1)), (0.7, 1.3, (4, 1.3)),
                                             (math.inf, 0.9, (4, 0.9))])
def test_nearer_neighbour_is_the_nearer_of_k_minus_1_and_k_plus_1(prev, nxt, want):
    assert nearer_neighbour(3, 1.0, {2: prev, 4: nxt}) == want


def test_nearer_neighbour_ties_go_to_k_plus_1_and_never_below_0():
    assert nearer_neighbour(3, 1.0, {2: 1.25, 4: 0.75}) == (4, 0.75)
    # at k = 0 there is no k - 1: a step count -1 (or k - 1 clipped to k itself, the prediction) is never chosen
    assert nearer_neighbour(0, 1.0, {-1: 1.0, 0: 1.0, 1: 0.4}) == (1, 0.4)
    assert nearer_neighbour(0, 1.0, {1: 0.4}) == (1, 0.4)
    assert nearer_neighbour(1, 1.0, {0: 1.1, 2: 0.5}) == (0, 1.1)


def _row(unstable=0.0, cond=1.5, K=4):
    return dict(K=K, R=10, d=5, unstable=unstable, cond=cond, rho=0.6,
                median=dict(model=(1.2, 0.02, 9.0), law=(1.19, 0.01), prev=1.5, next=1.1),
                growth=dict(model=0.3, se=0.02, dof=9.0, law=0.28, law_se=0.005, prompts=2000, spectra=5000,
                            pilot=0.28))


@pytest.mark.parametrize("unstable", [0.0, 0.2])
def test_model_claim_inside_and_near_compares_medians_with_the_nearer_competitor(unstable):
    """Inside the boundary too the medians are compared, not the means: a prompt beyond the boundary among the test
    prompts carries a paired mean difference and its spread alike (z about +-1 whatever the model does)."""
    r = _row(unstable)
    r["median"]["paired"] = (0.004, 0.001, 9.0)
    c = thm4_2.model_claim(r)
    assert c.form == "median" and c.applicable
    assert (c.falsifier_k, c.falsifier_value) == (5, 1.1)  # |1.1 - 1.19| < |1.5 - 1.19|: K + 1, not the farther K - 1
    r["median"].update(prev=1.25)
    assert (thm4_2.model_claim(r).falsifier_k, thm4_2.model_claim(r).falsifier_value) == (3, 1.25)


def test_model_claim_with_one_model_compares_the_unpaired_medians_with_welch():
    c = thm4_2.model_claim(_row(0.2))  # no replicate spread of the paired differences
    assert c.form == "median"
    assert (c.predicted, c.measured) == (1.19, 1.2)
    assert (c.se, c.dof) == welch((0.01, math.inf), (0.02, 9.0))
    assert c.se == pytest.approx(math.hypot(0.01, 0.02)) and 9.0 < c.dof < math.inf


def test_model_claim_pairs_the_medians_with_gd_on_the_same_prompts_and_the_laws_error_cancels():
    """With R > 1 replicates the median claim is the law's median plus the replicates' mean median difference to
    exact GD on their own prompts: the prompts' GD median can sit 15 % above the law's (seed 91 of the first domain
    point), which the unpaired medians would count against the model. Measured minus predicted is then the paired
    difference alone, so its band is the replicates' spread alone: adding the law's Monte-Carlo error (as the band
    did before) doubled it at the smoke point (calibrated root-mean-square z 0.49)."""
    r = _row(0.2)
    r["median"]["paired"] = (0.004, 0.001, 9.0)
    c = thm4_2.model_claim(r)
    assert c.form == "median" and c.measured == pytest.approx(1.19 + 0.004) and c.predicted == 1.19
    assert (c.se, c.dof) == (0.001, 9.0)
    assert c.measured - c.predicted == pytest.approx(0.004)
    r["median"]["paired"] = (math.nan, math.inf, math.inf)  # one model: the unpaired medians
    assert thm4_2.model_claim(r).measured == 1.2


def test_ood_row_pairs_the_medians_of_a_model_that_is_gd():
    """The construction is exact GD: the paired median differences vanish, replicate by replicate."""
    class R:  # two replicate copies of the exact construction
        W_KQ, W_PV = (torch.stack([w, w]) for w in construction(3, 0.4))

    row = thm4_2.ood_row(R, np.diag([0.5, 1.0, 1.5]), 0.4, [3], 9, 400, 500, 0, np.random.default_rng(0))
    pm, pse, pdof = row["median"]["paired"]
    assert abs(pm) < 1e-9 and pdof == 1


def test_model_claim_beyond_the_boundary_is_not_applicable_and_growth_claims_only_there():
    assert not thm4_2.model_claim(_row(0.5)).applicable and thm4_2.model_claim(_row(0.5)).form == ""
    assert not thm4_2.growth_claim(_row(0.0), 0.01).applicable
    g = thm4_2.growth_claim(_row(0.5), 0.01)
    assert g.form == "fraction" and (g.predicted, g.measured, g.falsifier_value) == (0.28, 0.3, 0.01)
    assert (g.se, g.dof) == welch((0.005, math.inf), (0.02, 9.0))


@pytest.mark.parametrize("law, prompts, spectra, few", [(0.28, 2000, 5000, []), (0.0008, 2000, 5000, ["prompts", "spectra"]),
                                                          (0.002, 2000, 5000, ["prompts"]), (0.9996, 20000, 5000, ["spectra"]),
                                                          (0.0, 2000, 5000, ["prompts", "spectra"])])
def test_growth_claims_need_five_expected_counts_from_the_law_alone(law, prompts, spectra, few):
    """Where the law's fraction p on the pilot sample predicts fewer than MIN_EXPECTED grown (or not grown) prompts
    among the model's test prompts or the law's spectra, the growth claim is not applicable, whatever the model and
    the prediction's sample say."""
    for model, predicted in ((law, law), (0.5, 0.3)):  # the rule reads the pilot and the sizes, nothing compared
        r = _row(0.1)
        r["growth"].update(pilot=law, law=predicted, model=model, prompts=prompts, spectra=spectra)
        g = thm4_2.growth_claim(r, 0.01)
        assert g.applicable == (not few)
        if few:  # the smaller expected count is named, in a reason short enough for the verdict table
            smaller = min(few, key=lambda w: min(law, 1 - law) * {"prompts": prompts, "spectra": spectra}[w])
            assert (f"among the model's {prompts} test prompts" if smaller == "prompts" else
                    f"among the law's {spectra} spectra") in g.why_not
            assert f"fewer than the {thm4_2.MIN_EXPECTED}" in g.why_not and len(g.why_not) <= 200


def test_condition_claim_is_the_geometric_bound_where_the_condition_holds():
    c = thm4_2.condition_claim(_row())
    assert c.form == "bound" and c.predicted == 5 * 0.6 ** 8 and (c.measured, c.se, c.dof) == (1.2, 0.02, 9.0)
    assert not thm4_2.condition_claim(_row(cond=2.0)).applicable


def test_model_claim_of_the_construction_against_ood_row():
    class R:  # two replicate copies of the exact construction as "trained" models
        W_KQ, W_PV = (torch.stack([w, w]) for w in construction(3, 0.3))

    row = thm4_2.ood_row(R, np.diag([0.5, 1.0, 1.5]), 0.3, [4], 9, 2000, 4000, 7, np.random.default_rng(1))
    md, c = row["median"], thm4_2.model_claim(row)
    assert thm4_2.regime(row) == "inside" and c.form == "median" and c.predicted == md["law"][0]
    assert abs(c.measured - c.predicted) < 1e-9 * c.predicted  # GD on the same prompts: the difference vanishes
    # GD decays geometrically: the median at K + 1 is nearer the median at K than the one at K - 1 is
    assert (c.falsifier_k, c.falsifier_value) == (5, md["next"])
    assert abs(md["next"] - md["law"][0]) < abs(md["prev"] - md["law"][0])
    assert thm4_2.condition_claim(row).predicted == 3 * row["rho"] ** 8
    # the numbers of the page's prose: this covariance is inside, none beyond
    text = thm4_2.prose_numbers({"0p5_1": row})
    assert text["h_sigma"] == "0.5:1" and text["b_sigma"] == "—" and set(text) == set(thm4_2.PROSE_KEYS)
    assert text["h_gap"] == f"{100 * abs(md['next'] / md['law'][0] - 1):.1f} %"
    assert text["h_stated"] == f"{row['stated'] / row['mean']['pred']:.3g}"


def _rows(model_beyond, law_beyond=3.5e9, k_list=(2, 8, 12)):
    """Two test covariances for the figure: one inside the boundary, one beyond it (unstable 0.99), the model's
    medians of the second given."""
    def row(law, model, unstable):
        return {"unstable": unstable, "ks": {k: {"law": (law[i],), "model": (model[i],)} for i, k in enumerate(k_list)}}
    return {"1_1": row([0.5, 0.05, 0.005], [0.5, 0.05, 0.006], 0.0),
            "4_4": row([10.0, 1e6, law_beyond], [12.0, 1e80, model_beyond], 0.99)}


@pytest.mark.parametrize("model", [1.8e250, math.inf, math.nan])
def test_figure_draws_a_model_that_outgrows_gd_by_hundreds_of_decades(model):
    """Beyond the boundary a trained model's median error can outgrow GD's by hundreds of decades (1.8e250 against
    3.5e9 at k = 12 on Sigma = 4I, seed 44 of the page's domain point), and a log axis spanning them overflows in
    matplotlib. The panel ends three decades above the GD law; the model's point sits on its top edge."""
    import matplotlib.pyplot as plt

    k_list = [2, 8, 12]
    rows = _rows(model)
    phase = thm4_2.phase_diagram(3, 4, 4, np.random.default_rng(0), num=50)
    fig = thm4_2.figure(rows, k_list, phase, 1.0, 4)
    fig.canvas.draw()  # the tick labels are computed here
    ax0 = fig.axes[0]
    assert ax0.get_ylim()[1] == thm4_2.axis_cap(rows, k_list, 1.0) == 1e13  # 3.5e9 -> 1e10, three decades up
    plt.close(fig)


def test_beyond_words_say_which_grows_faster():
    k_list = [2, 8, 12]
    assert thm4_2.beyond_words(_rows(1.8e250), k_list) == "grows faster than GD's (at k = 12)"
    assert thm4_2.beyond_words(_rows(math.nan), k_list) == "grows faster than GD's (at k = 12)"
    assert thm4_2.beyond_words(_rows(1e8), k_list) == "grows too, more slowly (at k = 12)"
    mixed = _rows(1.8e250)
    mixed["5_5"] = _rows(1e8)["4_4"]  # a second covariance beyond the boundary, where the model is slower
    assert thm4_2.beyond_words(mixed, k_list).startswith("grows more slowly than GD's on some test covariances and faster")
    rows = _rows(1e8)
    rows["4_4"]["unstable"] = 0.3  # near, not beyond: nothing to say
    assert thm4_2.beyond_words(rows, k_list).startswith("is not measured here")


def test_the_prose_numbers_beyond_the_boundary_carry_their_growth_claims_status():
    """The sentence beyond the boundary prints the growth fractions whether or not their claim applies; its status
    is glued beside them (it said "and so does the trained model" whatever the claim said)."""
    from types import SimpleNamespace as R

    rows = {"4_4": {"unstable": 0.8, "growth": dict(model=0.7, law=0.72, model_median=1e4, law_median=2e4)}}
    text = thm4_2.prose_numbers(rows, [R(claim="cot42_growth_4_4", status="not_applicable")])
    assert text["b_sigma"] == "4:4" and text["b_model"] == "0.700" and text["b_verdict"] == "not applicable"
    assert thm4_2.prose_numbers(rows)["b_verdict"] == "—"
