r"""Theorem 3.2 (:prf:ref:`cot-thm-3-2`, notebook ``cot/thm3_2_construction``): with CoT, one LSA layer runs k steps
of gradient descent, error :math:`L_k(\eta) = \E\tr(I-\eta S)^{2k}`.

The decisive claim: ``replicates`` full CoT transformers trained from random weights by the book's trainer, their
error after k CoT steps against the exact :math:`L_k(\eta)` of the loop-equation moments
(:func:`companion.cot.theory.gd.gd_error_wishart`), with k - 1 and k + 1 steps as the competitors (:func:`trained_cot`).
Then the construction's CoT inference on fresh prompts (:func:`construction_errors`) against: the exact formula at
the same k; the median of an independent sample of the per-prompt k-step law (:func:`law_medians`); the
Marchenko--Pastur limit through a finite-d fit (:func:`mp_limit_fit`, with the quadrature checked against the
closed-form moments, :func:`mp_quadrature_pair`); and the geometric bound :math:`d\rho_{\rm MP}^{2k}`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.params import ParameterError, TrainingDiverged
from companion.plotting import legend_outside, new_figure
from companion.seeds import COT_PROMPTS
from companion.stats import ROUNDOFF, Z_LEVEL, combine, critical, median_se

from ...text import tex_number
from ..data import make_generator, sample_prompts
from ..model import construction, cot_effective_blocks, cot_inference
from ..paper import COT_MODELS
from ..stats import MAX_DOUBLINGS, RULE_PROMPTS, even_part_energy, model_errors, nearer_neighbour, replicate_errors, rule_prompts, trained_vs_prediction
from ..theory import gd, mp, no_cot, wishart
from ..train import cached_train_full, threads1

__all__ = ["CLAIMS", "RESULT", "NEIGHBOUR", "IDENTITY_LIMIT", "RULE_SHARE", "neighbours", "rule_horizons", "converge_cot", "optimisation_left",
           "unconverged_reason", "rule_words", "trained_cot", "learned_steps",
           "construction_errors", "law_medians", "median_pair", "mp_quadrature_pair", "mp_limit_fit", "inverse_d_fit", "decay_curves",
           "record_trained", "record_exact", "record_law", "record_mp", "record_decay", "figure", "figure_mp",
           "manifest", "verdict_words", "star_words"]

LAW = ClaimSpec("cot32_law_k{k}", "statistical", "monte_carlo", prediction="companion.cot.theory.gd.gd_error_samples",
                falsifier="one GD step instead of $k$ (median of the one-step law)",
                supporting="the construction's errors against an independent sample of the same $k$-step GD law: two "
                           "samples of one law, a check of the construction's code and of the sampler "
                           "(`cot32_exact_k*` tests the theorem's prediction itself)")
#: the competitor of the trained and the construction claims: the nearer of L_{k-1}, L_{k+1}
NEIGHBOUR = "one GD step more or less (the nearer of $L_{k-1}$, $L_{k+1}$)"
#: the competitor of the Marchenko-Pastur limit: no spread of the spectrum
IDENTITY_LIMIT = r"$S = I$ ($\gamma\to0$): $(1 - \eta)^{2k}$"
TRAINED = ClaimSpec("cot32_trained_k{k}", "statistical", "trained", headline=True,
                    prediction="companion.cot.theory.gd.gd_error_wishart", falsifier=NEIGHBOUR, experiment=COT_MODELS)
EXACT = ClaimSpec("cot32_exact_k{k}", "statistical", "monte_carlo", prediction="companion.cot.theory.gd.gd_error_wishart",
                  falsifier=NEIGHBOUR)
CLAIMS = (
    TRAINED,
    EXACT,
    LAW,
    ClaimSpec("cot32_mp_quadrature", "numerics", "closed_form", prediction="companion.cot.theory.mp.mp_moment"),
    ClaimSpec("cot32_mp_limit", "statistical", "monte_carlo", headline=True, prediction="companion.cot.theory.mp.gd_error_mp",
              falsifier=IDENTITY_LIMIT),
    ClaimSpec("cot32_decay_bound", "bound", "monte_carlo", prediction="companion.cot.theory.mp.mp_rate"),
)

#: the stopping rule of the trained claim: a doubling of the horizon moves the error, and the even part's energy
#: is, at most this share of the claim's standard error (:func:`converge_cot`)
RULE_SHARE = 0.25

RESULT = ResultSpec(paper="cot", number="Theorem 3.2", title="with CoT, one LSA layer runs multi-step gradient descent",
                    label="cot-thm-3-2", notebook="cot/thm3_2_construction", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_thm32", "fig_cot_thm32_mp"),
                    sweep=r"CoT: the error of $k$-step CoT over $(k, \eta)$")


def manifest(k_list, k_eval: int) -> list[str]:
    """The claim ids the notebook records: the trained and exact claims at ``k_eval``, one law claim per k of
    ``k_list``, and the fixed ones."""
    return ([TRAINED.id.format(k=k_eval), EXACT.id.format(k=k_eval)] + [LAW.id.format(k=k) for k in k_list]
            + ["cot32_mp_quadrature", "cot32_mp_limit", "cot32_decay_bound"])


def neighbours(k: int, eta: float, d: int, n: int) -> dict:
    r"""The exact :math:`L_{k-1}(\eta)`, :math:`L_k(\eta)`, :math:`L_{k+1}(\eta)`
    (:func:`companion.cot.theory.gd.gd_error_wishart`, :math:`k \ge 1`) and the competitor of the claims at k: the
    nearer neighbour (:func:`companion.cot.stats.nearer_neighbour`, the rule :prf:ref:`cot-thm-4-2` uses too).

    Returns
    -------
    dict
        ``dict(pred, km1, kp1, near, near_k)``.
    """
    km1, pred, kp1 = (gd.gd_error_wishart(j, eta, d, n) for j in (k - 1, k, k + 1))
    near_k, near = nearer_neighbour(k, pred, {k - 1: km1, k + 1: kp1})
    return dict(pred=pred, km1=km1, kp1=kp1, near=near, near_k=near_k)


def rule_horizons(steps: int) -> list[int]:
    r"""The horizons of the stopping rule of :func:`trained_cot`: a check run of ``steps // 2`` Adam steps, then
    ``steps`` and its doublings, :math:`T_j = 2^{j-1}\,T` for :math:`j = 1, \dots,` 1 + :data:`~companion.cot.stats.MAX_DOUBLINGS`."""
    if steps < 2:
        raise ParameterError("steps", f"must be ≥ 2 (the stopping rule compares with a run of steps // 2); got {steps}")
    return [steps // 2] + [steps * 2**j for j in range(MAX_DOUBLINGS + 1)]


def converge_cot(d: int, n: int, k_train: int, k: int, eta: float, *, steps: int, lr: float, lr_final: float,
                 replicates: int, eval_batch: int, seed: int, objective: str = "cot") -> dict:
    r"""The stopping rule of the trained claim of :prf:ref:`cot-thm-3-2`: train the replicates at the horizons of
    :func:`rule_horizons` (every run from the same seeds, through the run cache) until a doubling no longer moves
    what the claim measures. With ``objective = "no_cot"`` the same rule for no-CoT models (one layer, target
    :math:`w^\star`; ``k_train`` = ``k`` = 1, ``eta`` unused), whose minimiser's estimate is linear in the labels too.

    On the training's own :data:`~companion.cot.stats.RULE_PROMPTS` prompts (:func:`companion.cot.stats.rule_prompts`, stream
    ``cot.train_eval``, never the claim's), with :math:`\bar e_j` the replicates' mean error after k CoT steps of
    the run with horizon :math:`T_j` and :math:`E_j` their mean :func:`companion.cot.stats.even_part_energy` (zero at
    the construction, whose k-step estimate is linear in the labels), the run has converged when

    .. math:: |\bar e_j - \bar e_{j-1}| \le \sigma\,\frac{s_j}{\sqrt N},\qquad E_j \le \sigma\,\frac{s_j}{\sqrt N},

    :math:`\sigma` = :data:`RULE_SHARE`, :math:`s_j` the spread of the per-prompt errors there and N =
    ``eval_batch`` the claim's prompts (so :math:`s_j/\sqrt N` is a lower bound of the claim's standard error). A
    doubling of the horizon then moves the error by less than that share of the claim's band, and no even part,
    which every minimiser lacks, is left to bias it. The rule reads the training's prompts only, never the
    prediction. The last-quarter drift of one run does not see this: near the stability edge the error keeps
    moving from one horizon to the next while a run's own last quarter is flat.

    Returns
    -------
    dict
        ``runs`` (the last training result), ``steps`` (its horizon), ``converged``, ``change``
        (:math:`\bar e_j - \bar e_{j-1}`), ``even`` (:math:`E_j`), ``se_rule`` (:math:`s_j/\sqrt N`) and
        ``history`` (per horizon: steps, mean error, even energy); a diverged training raises
        :class:`companion.params.TrainingDiverged`.
    """
    if objective not in ("cot", "no_cot"):
        raise ParameterError("objective", f"must be 'cot' or 'no_cot'; got {objective!r}")
    data_step = (eta,) if objective == "cot" else ()  # a no-CoT run has no data step (its cache key neither)
    history, prev, prompts = [], None, None
    for T in rule_horizons(steps):
        res = cached_train_full(objective, d, n, k_train, *data_step, steps=T, lr=lr, lr_final=lr_final, batch=64,
                                seed=seed, eval_every=max(1, T // 20), eval_batch=200, replicates=replicates)
        prompts = rule_prompts(res, RULE_PROMPTS) if prompts is None else prompts
        err = np.concatenate([model_errors(objective, res.replicate(r), prompts, k) for r in range(res.replicates)])
        mean, even = float(np.mean(err)), float(np.mean(even_part_energy(objective, res, prompts, k)))
        se_rule = float(np.std(err, ddof=1)) / math.sqrt(eval_batch) if np.all(np.isfinite(err)) else math.inf
        history.append(dict(steps=T, mean=mean, even=even))
        change = math.nan if prev is None else mean - prev
        converged = (prev is not None and math.isfinite(se_rule) and abs(change) <= RULE_SHARE * se_rule
                     and even <= RULE_SHARE * se_rule)
        if converged:
            break
        prev = mean
    return dict(runs=res, steps=T, converged=bool(converged), change=change, even=even, se_rule=se_rule,
                history=history)


def trained_cot(d: int, n: int, k_train: int, k: int, eta: float, *, steps: int, lr: float, lr_final: float,
                replicates: int, eval_batch: int, seed: int) -> dict:
    r"""The decisive test of :prf:ref:`cot-thm-3-2` on trained transformers.

    ``replicates`` full-parameter CoT LSAs (all :math:`2(2d+2)^2` entries) are trained side by side from random
    weights on the teacher-forced CoT loss (6) with ``k_train`` positions and data step ``eta``
    (:func:`companion.cot.train.train_full` through the run cache, so a page that trains the same models shares
    the run), under the stopping rule :func:`converge_cot`. By :prf:ref:`cot-thm-4-1` training converges to the
    construction with the *data's* step, so the prediction is :math:`L_k(\eta)` at that ``eta``, computed exactly
    (:func:`neighbours`), never from the learned weights. Each replicate runs k autoregressive CoT steps on its own
    ``eval_batch // replicates`` fresh prompts (stream ``COT_EVAL``); the errors are compared with the prediction by
    :func:`companion.cot.stats.trained_vs_prediction` (the wider of the seed and prompt bands).

    Near the stability edge the teacher-forced targets (the GD trajectory) grow like :math:`|1-\eta\lambda|^{k}` on
    the prompts with :math:`\eta\lambda_{\max}(S) > 2`, and the training loss is dominated by them: when the trainer
    stops a diverging run (:class:`companion.params.TrainingDiverged`), there is no trained model to test, and the
    result says so (``diverged``: the trainer's message; the page records the trained claim as not applicable with
    it) instead of stopping the page. Any other bad input still stops the page. A training that has not converged
    at the last horizon is no model of the theorem either (``unconverged``; not applicable too).

    Returns
    -------
    dict
        :func:`companion.cot.stats.trained_vs_prediction` with ``runs`` (the training result), ``rule`` (the
        :func:`converge_cot` outcome without the runs) and the :func:`neighbours` under ``"exact"``; or
        ``{"diverged": message, "exact": ...}``; or ``{"unconverged": rule, "exact": ...}``; with
        ``replicates = 0`` (nothing trained: the Sweeps page's map of the construction's law)
        ``{"skipped": reason, "exact": ...}``.
    """
    exact = neighbours(k, eta, d, n)
    if replicates == 0:
        return dict(skipped="no models trained at this point (replicates = 0)", exact=exact)
    try:
        out = converge_cot(d, n, k_train, k, eta, steps=steps, lr=lr, lr_final=lr_final, replicates=replicates,
                           eval_batch=eval_batch, seed=seed)
    except TrainingDiverged as exc:
        return dict(diverged=exc.message, exact=exact)
    runs = out.pop("runs")
    if not out["converged"]:
        return dict(unconverged=out, exact=exact)
    errors = replicate_errors("cot", runs, k, eval_batch // replicates, seed)
    return dict(trained_vs_prediction(errors, exact["pred"]), runs=runs, rule=out, exact=exact)


def learned_steps(runs, d: int) -> np.ndarray:
    r"""The step each trained replicate implements, read off its weights, :math:`-\tr(V_{31}W_{13})/d` (invariant
    under the rescaling symmetry): a diagnostic of :prf:ref:`cot-thm-3-2`, never the prediction's step."""
    return np.array([-np.trace(cot_effective_blocks(runs.replicate(r).W_KQ, runs.replicate(r).W_PV, d)["V31W13"]) / d
                     for r in range(runs.replicates)])


def construction_errors(d: int, n: int, eta: float, K: int, num: int, seed: int) -> np.ndarray:
    """Per-prompt squared errors of CoT inference with the construction of :prf:ref:`cot-thm-3-2` after
    0..K steps on ``num`` fresh prompts, shape (num, K+1)."""
    with threads1(), torch.no_grad():
        prompts = sample_prompts(num, d, n, make_generator(COT_PROMPTS(seed)))
        W_KQ, W_PV = construction(d, eta)
        w_hat = cot_inference(prompts, W_KQ, W_PV, K)
        return ((w_hat - prompts.w_star[:, None, :]) ** 2).sum(-1).numpy()


def median_pair(a, b) -> tuple[float, float, float]:
    """Medians of two independent samples and the combined order-statistic standard error."""
    ma, sa = median_se(a)
    mb, sb = median_se(b)
    return ma, mb, combine(sa, sb)


def law_medians(err: np.ndarray, k_list, eta: float, eigs: np.ndarray, rng: np.random.Generator) -> tuple[dict, dict]:
    r"""The per-prompt k-step law on an independent sample of spectra ``eigs``,
    :math:`\sum_j(1-\eta\lambda_j)^{2k}z_j^2` with :math:`z \sim N(0, I)` (:func:`companion.cot.theory.gd.gd_error_samples`),
    for every k of ``k_list`` and k = 1 (the falsifier), in increasing k; and for each k of ``k_list`` the median
    of the construction's errors ``err[:, k]`` against the median of the law (:func:`median_pair`).

    Returns
    -------
    tuple
        ``(law, med)``: ``law[k]`` the sample, ``med[k] = (model, prediction, combined se)``.
    """
    law = {k: gd.gd_error_samples(k, eta, eigs, rng) for k in sorted(set(k_list) | {1})}
    return law, {k: median_pair(err[:, k], law[k]) for k in k_list}


def mp_quadrature_pair(eta: float, gamma: float) -> tuple[float, float]:
    r"""The Marchenko--Pastur limit at k = 2 by quadrature (:func:`companion.cot.theory.mp.gd_error_mp`) and from the
    closed-form moments, :math:`\sum_{p\le 4}\binom4p(-\eta)^p\int\lambda^p\,d\mathrm{MP}_\gamma`."""
    return mp.gd_error_mp(2, eta, gamma), sum(math.comb(4, p) * (-eta) ** p * mp.mp_moment(p, gamma) for p in range(5))


def decay_curves(d: int, ratios, eta: float, K: int, num: int, rng: np.random.Generator) -> dict:
    r"""Geometric decay of :math:`\E\tr(I-\eta S)^{2k}` for k = 0..K at :math:`n = \max(d, \mathrm{round}(r d))` for each
    ratio r, from ``num`` Monte-Carlo spectra each: ``{n: (mean over k, median over k)}``."""
    out = {}
    for r in ratios:
        nn = max(d, int(round(r * d)))
        e = wishart.sample_S_eigs(d, nn, num, rng)
        per = np.stack([gd.gd_trace(eta, e, k) for k in range(K + 1)], axis=1)
        out[nn] = (per.mean(0), np.median(per, axis=0))
    return out


def mp_limit_fit(k: int, eta: float, d: int, n: int, levels: int, num: int, rng: np.random.Generator) -> dict:
    r"""Monte-Carlo :math:`\frac1d\E\tr(I-\eta S)^{2k}` at :math:`(2^j d, 2^j n)`, :math:`j <` ``levels``, from
    ``num / 4^j`` draws (so :math:`\gamma = d/n` is exact at every level), and the weighted least-squares fit
    :math:`a + b/d + c/d^2`. The expectation of a linear spectral statistic of a real Wishart matrix has an
    expansion in powers of :math:`1/d` at fixed :math:`\gamma` whose :math:`1/d` term does not vanish (it does for
    complex matrices); the :math:`1/d^2` term is the next one, and a fit without it leaves a bias of the order of
    the intercept's standard error at the sizes the pages run. The intercept
    :math:`a` estimates the Marchenko--Pastur limit of :prf:ref:`cot-thm-3-2`; its standard error propagates the
    Monte-Carlo errors; ``dof`` = ``levels`` - 3 is the fit's residual degrees of freedom (0 at three levels: the
    curve passes through the points).

    Returns
    -------
    dict
        ``dict(ds, values, ses, a, a_se, b, c, chi2, dof)``.
    """
    ds, vals, ses = [], [], []
    for j in range(levels):
        dj, nj = d * 2**j, n * 2**j
        # the variance of (1/d) tr f(S) falls like 1/d^2: num / 4^j draws keep the standard error level-independent
        m, se = gd.gd_error_mc(k, eta, wishart.sample_S_eigs(dj, nj, max(200, num // 4**j), rng))
        ds.append(dj)
        vals.append(m / dj)
        ses.append(se / dj)
    ds, vals, ses = np.array(ds, float), np.array(vals), np.array(ses)
    return dict(ds=ds, values=vals, ses=ses, **inverse_d_fit(ds, vals, ses))


def inverse_d_fit(ds, values, ses) -> dict:
    r"""The weighted least-squares fit :math:`a + b/d + c/d^2` of ``values`` (standard errors ``ses``) at the
    dimensions ``ds`` (at least three): ``dict(a, a_se, b, c, chi2, dof)``, ``a_se`` the intercept's standard error
    propagated from ``ses`` and ``dof`` the residual degrees of freedom."""
    ds, values, ses = (np.asarray(x, dtype=float) for x in (ds, values, ses))
    X = np.stack([np.ones_like(ds), 1 / ds, 1 / ds**2], axis=1)
    Wt = 1 / ses**2
    cov = np.linalg.inv(X.T @ (X * Wt[:, None]))
    coef = cov @ (X.T @ (Wt * values))
    chi2 = float(np.sum(Wt * (values - X @ coef) ** 2))
    return dict(a=float(coef[0]), a_se=float(np.sqrt(cov[0, 0])), b=float(coef[1]), c=float(coef[2]), chi2=chi2,
                dof=len(ds) - 3)


# ------------------------------------------------------------------------------------------------ the verdict



def _trainer_words(message: str) -> str:
    """The trainer's refusal (:class:`companion.params.TrainingDiverged` of :func:`companion.cot.train.train_full`)
    in the page's words, its numbers typeset; a message of another form is quoted as it is."""
    m = re.match(r"training diverged at step (\d+) \(loss (\S+), initial (\S+)\) with lr = ([^;]+);", message)
    if m is None:
        return f"The trainer stopped: `{message}`."
    step, loss, first, lr = m.groups()
    return (rf"The trainer stopped the run at Adam step {step}: loss ${tex_number(float(loss), '.4g')}$ against "
            rf"${tex_number(float(first), '.4g')}$ at the start, learning rate ${tex_number(float(lr), '.4g')}$.")


def _times(a: float, b: float) -> str:
    """``a`` as a multiple of ``b`` in words."""
    return f"{a / b:.3g} times" if b > 0 and math.isfinite(a / b) else f"${tex_number(a, '.4g')}$ against"


def _share(x: float, se: float) -> str:
    """``|x|`` in units of ``se``, for a reason."""
    ok = math.isfinite(x) and math.isfinite(se) and se > 0
    return f"{abs(x) / se:.2g}" if ok else "an unmeasured number of"


def optimisation_left(rule: dict) -> float:
    """The optimisation error a converged run of :func:`converge_cot` leaves, added to a trained claim's floor: the
    last doubling's change of the rule's mean error plus the even part's energy."""
    return abs(rule["change"]) + rule["even"]


def unconverged_reason(rule: dict) -> str:
    """The reason of a trained claim whose :func:`converge_cot` did not stop by its last horizon (not applicable)."""
    return (rf"no converged model to test: after {rule['steps']} Adam steps a doubling of the horizon still moved "
            rf"the error by {_share(rule['change'], rule['se_rule'])} SE, the even part "
            rf"{_share(rule['even'], rule['se_rule'])} SE (allowed: {RULE_SHARE:g})")


def rule_words(rule: dict) -> str:
    """The stopping rule's outcome (:func:`converge_cot`) in words: the horizons, the error and the even part."""
    runs = "; ".join(rf"{h['steps']} steps: ${tex_number(h['mean'], '.4g')}$, even part ${tex_number(h['even'], '.3g')}$"
                     for h in rule["history"])
    verdict = "met" if rule["converged"] else "not met"
    return (rf"Stopping rule (`converge_cot`, fixed before the calibrated runs): {verdict} at {rule['steps']} Adam steps; "
            rf"the replicates' mean error after $k$ CoT steps on the training's own prompts, by horizon: {runs}; "
            rf"allowed: {RULE_SHARE:g} times the lower bound ${tex_number(rule['se_rule'], '.3g')}$ of the claim's "
            "standard error, for the last doubling's change and for the even part.")


def _round_off(d: int) -> str:
    return rf"round-off $d\cdot10^{{-13}} = {tex_number(ROUNDOFF * d, '.4g')}$"


def record_trained(v, model: dict, k: int, *, d: int, eta: float, replicates: int, eval_batch: int):
    r"""Record the headline claim ``cot32_trained_k{k}`` on the verdict ``v`` and return its record: the mean error
    of the trained CoT transformers (``model``: :func:`trained_cot`) after k CoT steps against the exact
    :math:`L_k(\eta) = \E\tr(I-\eta S)^{2k}`, at ``Z_LEVEL`` SE (the wider of the seed and the prompt bands) plus round-off,
    the nearer of :math:`L_{k-1}`, :math:`L_{k+1}` the competitor. Not applicable when no model was trained
    (``replicates = 0``) or training diverged near the stability edge."""
    ex = model["exact"]
    claim = f"cot32_trained_k{k}"
    untrained = model.get("diverged") or model.get("skipped") or model.get("unconverged")
    if untrained is not None:
        if "unconverged" in model:
            u = model["unconverged"]
            reason = unconverged_reason(u)
            detail = (rule_words(u) + " The theorem speaks of the trained model gradient flow converges to; a longer "
                      "horizon (`steps`) may reach it.")
        elif "skipped" in model:
            reason = ("no model trained at this point (`replicates` is 0): the page maps the construction's law "
                      "alone")
            detail = f"`trained_cot`: {model['skipped']}."
        else:
            reason = (rf"no trained model to test: training diverged at $\eta = {eta:g}$, near the stability edge, "
                      r"where the teacher-forced GD targets grow on the prompts with $\eta\lambda_{\max}(S) > 2$")
            detail = (_trainer_words(model["diverged"]) + r" Near the edge the GD trajectory of the prompts with "
                      r"$\eta\lambda_{\max}(S) > 2$ grows like $|1-\eta\lambda|^k$ and dominates the "
                      "teacher-forced loss.")
        return v.not_applicable(claim, kind="statistical",
                                quantity=rf"trained CoT transformers ({replicates} seeds) after $k = {k}$ CoT steps",
                                reason=reason, detail=detail)
    R = len(model["means"]) if "means" in model else 1
    seeds = math.isfinite(model["dof"])
    band = f"{Z_LEVEL:.3g} SE of the seed spread (Student-t)" if seeds else f"{Z_LEVEL:.3g} SE over the evaluation prompts"
    other = (rf"the prompts-only standard error ${tex_number(model['se_prompts'], '.4g')}$ (normal), a lower bound" if seeds else
             rf"the seed spread ${tex_number(model.get('se_seeds', math.nan), '.4g')}$ on $R - 1 = {R - 1}$ degrees of freedom")
    near_k = ex["near_k"]
    far_k = 2 * k - near_k
    far = ex["km1"] if far_k == k - 1 else ex["kp1"]
    z_far = abs((model["mean"] - far) / model["se"])
    cfg, rule = model["runs"].config, model["rule"]
    return v.statistical(
        claim,
        quantity=rf"trained CoT transformers ({R} seeds): mean error after $k = {k}$ CoT steps against the exact "
                 r"$\E\tr(I - \eta S)^{2k}$",
        predicted=ex["pred"], measured=model["mean"], se=model["se"], dof=model["dof"],
        floor=ROUNDOFF * d + optimisation_left(rule),
        falsifier=NEIGHBOUR, falsifier_value=ex["near"], headline=True,
        reason=rf"mean error of {R} trained models after $k = {k}$ CoT steps vs the exact $L_{{{k}}}(\eta)$; "
               f"band: {band}, the wider of two bands, + optimisation error left, round-off",
        detail=rf"Standard error ${tex_number(model['se'], '.4g')}$ from {model['se_from']}: the wider of two valid bands at the "
               rf"level of {Z_LEVEL:.3g} normal SE (critical value ${tex_number(critical(Z_LEVEL, model['dof']), '.4g')}$); the other was {other}. "
               rf"Each of the {R} models ran $k$ autoregressive CoT steps on its own {eval_batch // R} fresh prompts. "
               rf"Prediction exact: $L_{{{k}}}(\eta) = {tex_number(ex['pred'], '.4g')}$ from the loop-equation moments of the "
               rf"Wishart $S$ (`gd_error_wishart`) at the data's step $\eta = {eta:g}$, never from the learned "
               rf"weights. Competitor $L_{{{near_k}}} = {tex_number(ex['near'], '.4g')}$, the nearer neighbour; the other, "
               rf"$L_{{{far_k}}} = {tex_number(far, '.4g')}$, lies {z_far:.0f} SE away. Floor: the optimisation error "
               rf"left, the last doubling's change ${tex_number(abs(rule['change']), '.4g')}$ plus the even part's energy "
               rf"${tex_number(rule['even'], '.4g')}$, and {_round_off(d)}. Training: "
               rf"full CoT LSAs (all $2(2d+2)^2$ entries) from random weights side by side, {cfg['steps']} Adam steps "
               rf"(learning rate ${tex_number(cfg['lr'], '.4g')}$) on the teacher-forced CoT loss (6) with "
               rf"{cfg['k']} positions. " + rule_words(rule))


def record_exact(v, model_kt, ex: dict, k: int, *, d: int, num_model: int):
    r"""Record ``cot32_exact_k{k}`` on the verdict ``v`` and return its record: the construction's mean error after
    k CoT steps (``model_kt = (mean, se)`` over ``num_model`` prompts) against the exact :math:`L_k(\eta)`
    (``ex``: :func:`neighbours`), at ``Z_LEVEL`` SE over the prompts plus round-off; the competitor as in
    :func:`record_trained`."""
    return v.statistical(
        f"cot32_exact_k{k}",
        quantity=rf"construction: mean error after $k = {k}$ CoT steps against the exact formula",
        predicted=ex["pred"], measured=model_kt[0], se=model_kt[1], floor=ROUNDOFF * d,
        falsifier=NEIGHBOUR, falsifier_value=ex["near"],
        reason=rf"mean error of the construction on {num_model} prompts against the exact $L_{{{k}}}(\eta)$; band: "
               f"{Z_LEVEL:.3g} SE over the prompts, plus round-off",
        detail=rf"Standard error ${tex_number(model_kt[1], '.4g')}$ of the mean over the {num_model} i.i.d. prompts, normal "
               rf"critical value {Z_LEVEL:.3g}. Prediction $L_{{{k}}}(\eta) = {tex_number(ex['pred'], '.4g')}$ from the loop-equation moments "
               rf"(`gd_error_wishart`). Competitor $L_{{{ex['near_k']}}} = {tex_number(ex['near'], '.4g')}$, the nearer of "
               rf"$L_{{{k - 1}}} = {tex_number(ex['km1'], '.4g')}$ and $L_{{{k + 1}}} = {tex_number(ex['kp1'], '.4g')}$. Floor: "
               f"{_round_off(d)}.")


def star_words(trained: bool, replicates: int, kt: int) -> str:
    """The figure caption's words on the trained models' star (Markdown, for ``{glue:md}``): what it shows, or that
    no trained model is drawn (``replicates`` 0, or training that diverged or did not converge)."""
    if not trained:
        return "trained models' mean, not drawn here (none was trained to its stopping rule at these parameters)"
    return rf"mean of the {replicates} trained CoT models at $k = {kt}$ (star, $\pm 2$ standard errors)"


def verdict_words(records, model: dict, kt: int, eta_learned, *, eta: float, replicates: int, steps: int,
                  k_train: int) -> str:
    r"""The verdict paragraph's sentences on the trained models, the construction and the law (Markdown, for
    ``{glue:md}``), from the records: the trained claim ``cot32_trained_k{kt}`` with its neighbours' distances and the
    models' learned step (``eta_learned``: :func:`learned_steps`), or why no model was compared; the construction's
    ``cot32_exact_k{kt}``; how many ``cot32_law_k*`` claims pass."""
    by = {r.claim: r for r in records}
    rec_t, rec_e = by[f"cot32_trained_k{kt}"], by[f"cot32_exact_k{kt}"]
    ex = model["exact"]

    def status(rec) -> str:
        return f"**{rec.status.replace('_', ' ')}**"

    if rec_t.status == "not_applicable":
        trained = f"No trained model is compared at these parameters: {rec_t.reason}."
    else:
        z = {j: abs((model["mean"] - ex[j]) / model["se"]) for j in ("km1", "kp1")}
        trained = (rf"Trained from random weights ({steps} Adam steps on the CoT loss with {k_train} positions), the "
                   rf"{replicates} CoT transformers' mean error after $k = {kt}$ CoT steps is ${rec_t.measured:.4f}$ "
                   rf"against the exact ${rec_t.predicted:.4f}$ ({status(rec_t)}), while one step less would give "
                   rf"${ex['km1']:.4f}$ (${z['km1']:.0f}$ standard errors away) and one step more ${ex['kp1']:.4f}$ "
                   rf"(${z['kp1']:.0f}$ standard errors away). Read off the weights, the models' step "
                   rf"$-\tr(V_{{31}}W_{{13}})/d$ is ${float(np.mean(eta_learned)):.4f}$ on average (largest deviation "
                   rf"from $\eta$: ${tex_number(float(np.abs(np.asarray(eta_learned) - eta).max()), '.1e')}$): the data's "
                   "step, as Theorem 4.1 predicts; the prediction does not use it.")
    law = [r for r in records if r.claim.startswith("cot32_law_k")]
    passed = sum(r.status == "passed" for r in law)
    return (rf"{trained} The construction itself against the same exact value: ${rec_e.measured:.4f}$ "
            rf"({status(rec_e)}). For longer chains the construction's median error against an independent sample of "
            rf"the $k$-step law: {passed} of the {len(law)} claims `cot32_law_k*` pass.")


def record_law(v, med: dict, law: dict, k_list, *, d: int, num_model: int) -> None:
    r"""Record ``cot32_law_k{k}`` on the verdict ``v`` for every k of ``k_list``: the median of the construction's
    errors after k CoT steps against the median of an independent sample of the k-step law (``med``, ``law``:
    :func:`law_medians`), at ``Z_LEVEL`` combined order-statistic SE plus round-off; the falsifier is the median of the
    one-step law."""
    one = float(np.median(law[1]))
    for k in k_list:
        m_model, m_pred, se = med[k]
        v.statistical(
            f"cot32_law_k{k}",
            quantity=rf"median error after $k = {k}$ CoT steps against the median of the $k$-step GD law",
            predicted=m_pred, measured=m_model, se=se, floor=ROUNDOFF * d, falsifier=LAW.falsifier,
            falsifier_value=one,
            reason="median of the construction's errors against the median of an independent sample of the "
                   f"$k$-step law; band: {Z_LEVEL:.3g} SE of the two medians (order statistics), plus round-off",
            detail=rf"The law $\sum_j(1-\eta\lambda_j)^{{2k}}z_j^2$, $z\sim\Nor(0, I)$, on {len(law[k])} independent "
                   rf"spectra of $S$ (`gd_error_samples`), against the construction's errors on {num_model} prompts; "
                   r"medians, because rare prompts dominate the mean at larger $\eta$. Standard error "
                   rf"${tex_number(se, '.4g')}$: the order-statistic standard errors of the two medians (`median_se`) in "
                   rf"quadrature, normal critical value {Z_LEVEL:.3g}. Falsifier: the median of the one-step law, "
                   rf"${tex_number(one, '.4g')}$. Floor: {_round_off(d)}.")


def record_mp(v, mp_k2, fit: dict, mp_k: float, k: int, *, eta: float, gamma: float, levels: int) -> None:
    r"""Record on the verdict ``v`` the numerics claim ``cot32_mp_quadrature`` (the Marchenko–Pastur quadrature at
    k = 2 against the closed-form moments, ``mp_k2``: :func:`mp_quadrature_pair`) and the headline
    ``cot32_mp_limit``: the intercept of the finite-d fit (``fit``: :func:`mp_limit_fit`, at k) against the
    Marchenko–Pastur integral ``mp_k``, at ``Z_LEVEL`` SE of the intercept plus the quadrature error; the falsifier is
    :math:`S = I`, :math:`(1-\eta)^{2k}`."""
    v.numerics("cot32_mp_quadrature",
               quantity=r"Marchenko–Pastur quadrature against the closed-form moments at $k = 2$",
               predicted=mp_k2[1], measured=mp_k2[0], tolerance=1e-9,
               reason=r"$\int(1-\eta\lambda)^4\,d\mathrm{MP}_\gamma$ by quadrature against the binomial sum of the "
                      "closed-form moments; band: the quadrature's error control",
               detail=rf"`gd_error_mp` (Gauss–Kronrod quadrature, relative tolerance $10^{{-12}}$) against "
                      r"$\sum_{p\le4}\binom4p(-\eta)^p\int\lambda^p\,d\mathrm{MP}_\gamma$ (`mp_moment`) at "
                      rf"$\gamma = d/n = {gamma:.4g}$, $\eta = {eta:g}$; absolute tolerance $10^{{-9}}$.")
    fal = (1 - eta) ** (2 * k)
    v.statistical(
        "cot32_mp_limit",
        quantity=rf"intercept of the fit $a + b/d + c/d^2$ of $\frac1d\E\tr(I - \eta S)^{{2k}}$, $k = {k}$, against the "
                 "Marchenko–Pastur integral",
        predicted=mp_k, measured=fit["a"], se=fit["a_se"], floor=1e-9, falsifier=IDENTITY_LIMIT,
        falsifier_value=fal, headline=True,
        reason=rf"Monte Carlo at {levels} sizes $(2^j d, 2^j n)$ extrapolated to $d\to\infty$; band: {Z_LEVEL:.3g} SE of the "
               "weighted least-squares intercept, plus the quadrature error",
        detail=rf"Monte Carlo of $\frac1d\E\tr(I-\eta S)^{{2k}}$ at $(2^j d, 2^j n)$, $j < {levels}$, with "
               rf"$\gamma = d/n = {gamma:.4g}$ fixed and 4 times fewer draws per doubling of $d$ (the variance falls "
               r"like $1/d^2$), and the weighted least-squares fit $a + b/d + c/d^2$ (`mp_limit_fit`: the first three "
               r"terms of the expansion of a real Wishart linear statistic in $1/d$). Standard error "
               rf"${tex_number(fit['a_se'], '.4g')}$ of the intercept from the Monte-Carlo errors, normal critical value {Z_LEVEL:.3g}; "
               rf"$\chi^2 = {fit['chi2']:.3g}$ on {fit['dof']} degrees of freedom. Floor $10^{{-9}}$, the quadrature "
               rf"error. Falsifier $(1-\eta)^{{2k}} = {tex_number(fal, '.4g')}$.")


def record_decay(v, err: np.ndarray, k_list, rho: float, *, d: int):
    r"""Record the bound ``cot32_decay_bound`` on the verdict ``v`` and return its record: the median of the
    construction's errors (``err``: :func:`construction_errors`) after :math:`\max(k_{\rm list})` steps below
    :math:`d\rho_{\rm MP}^{2k}` (``rho``: :func:`companion.cot.theory.mp.mp_rate`), at ``Z_LEVEL`` order-statistic SE plus
    round-off."""
    kb = max(k_list)
    m_kb, se_kb = median_se(err[:, kb])
    bound = d * rho ** (2 * kb)
    return v.bound(
        "cot32_decay_bound", quantity=rf"median error after $k = {kb}$ steps $\le d\rho_{{\rm MP}}^{{2k}}$",
        bound=bound, measured=m_kb, comparison="upper", se=se_kb, floor=ROUNDOFF * d,
        reason="the geometric bound, which holds on spectra inside the Marchenko–Pastur support, against the median "
               "prompt; band: 4 order-statistic SE, plus round-off",
        detail=rf"Median of the construction's errors after $k = {kb}$ steps on {err.shape[0]} prompts, "
               rf"order-statistic standard error ${tex_number(se_kb, '.4g')}$ (`median_se`), normal critical value {Z_LEVEL:.3g}. Bound "
               rf"$d\rho_{{\rm MP}}^{{2k}} = {tex_number(bound, '.4g')}$ with $\rho_{{\rm MP}} = {rho:.4g}$ (`mp_rate`), "
               f"{_times(bound, m_kb)} the median. Floor: {_round_off(d)}.")


def figure(err, k_list, med: dict, decay: dict, rho: float, eta: float, d: int, n: int, trained=None):
    """``fig_cot_thm32``: (a) the construction's error against k with the exact (loop-equation moments, k up to 12),
    independent-law, MP-limit and bound curves, and the trained models' mean error ``trained = (k, mean, se)``;
    (b) the geometric decay of the mean and median for several n/d (``decay[n] = (mean, median)``)."""
    K, gam = err.shape[1] - 1, d / n
    ks = np.arange(K + 1)
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.5, height=3.0)
    ax0.semilogy(ks, err.mean(0), "-", label="CoT construction (mean)")
    ax0.semilogy(ks, np.median(err, axis=0), "--", label="CoT construction (median)")
    kx = np.arange(1, min(K, 12) + 1)
    ax0.plot(kx, [gd.gd_error_wishart(int(k), eta, d, n) for k in kx], "ko", ms=5, mfc="none", label="exact (moments)")
    if trained is not None:
        ax0.errorbar([trained[0]], [trained[1]], yerr=[2 * trained[2]], fmt="*", ms=11, color="C1",
                     label="trained CoT models (±2 SE)")
    ax0.plot(k_list, [med[k][1] for k in k_list], "s", ms=4, mfc="none", color="C2", label="independent law (median)")
    ax0.semilogy(ks, [d * mp.gd_error_mp(int(k), eta, gam) for k in ks], ":", color="C3", label="d × MP limit")
    ax0.semilogy(ks, d * rho ** (2 * ks), "-.", color="C4", lw=0.8, label=r"bound $d\rho_{\rm MP}^{2k}$")
    ax0.axhline(no_cot.no_cot_floor(d, n), color="k", lw=0.8, ls="-.", label="no-CoT floor")
    ax0.set_xlabel("CoT steps k")
    ax0.set_ylabel(r"$\|\hat w_k - w^\star\|^2$")
    ax0.set_title(f"(a) d = {d}, n = {n}")
    for c, (nn, (mean, median)) in enumerate(decay.items()):
        steps = np.arange(len(mean))
        ax1.semilogy(steps, mean, "-", color=f"C{c}", label=f"n/d = {nn / d:g}")
        ax1.semilogy(steps, median, "--", color=f"C{c}", lw=0.8)
    ax1.set_xlabel("CoT steps k")
    ax1.set_ylabel(r"$E\,\mathrm{tr}(I-\eta S)^{2k}$")
    ax1.set_title("(b) geometric decay (— mean, -- median)")
    legend_outside(fig, "below", ncol=3)
    return fig


def figure_mp(fit: dict, mp_k: float, k: int, ratio: float):
    r"""``fig_cot_thm32_mp``: the Monte-Carlo values of :math:`\E\tr(I-\eta S)^{2k}/d` against 1/d (``fit``:
    :func:`mp_limit_fit`), the fit a + b/d + c/d² and the Marchenko-Pastur integral at 1/d = 0."""
    fig, ax = new_figure(width=4.2, height=3.0)
    xs = np.linspace(0, 1.05 / fit["ds"][0], 50)
    ax.errorbar(1 / fit["ds"], fit["values"], yerr=2 * fit["ses"], fmt="o", ms=4, mfc="none", label="Monte Carlo (±2 SE)")
    ax.plot(xs, fit["a"] + fit["b"] * xs + fit["c"] * xs**2, "-", lw=1, label="fit a + b/d + c/d²")
    ax.plot([0], [mp_k], "k*", ms=10, label="Marchenko–Pastur integral")
    ax.set_xlabel("1 / d   (n/d fixed)")
    ax.set_ylabel(r"$E\,\mathrm{tr}(I-\eta S)^{2k}\,/\,d$")
    ax.set_title(f"k = {k}, n/d = {ratio:g}")
    legend_outside(ax, "below", ncol=2)
    return fig
