r"""Theorem 4.1 (:prf:ref:`cot-thm-4-1`, notebook ``cot/thm4_1_dynamics``): gradient flow learns the CoT
construction, in two stages.

The reduced (v, w) flow for :math:`n \to \infty` and at finite n (:func:`stage_analysis`: the stage-1 separation
:math:`\varepsilon` from :func:`separation_parameter`, the slow-manifold time, the stage-2 rate :math:`\mu`, the
distance at the rate-derived horizon); the restricted matrix flow from Assumption 4.1 (:func:`matrix_flow`);
full-parameter training of independently seeded replicates against the k-step GD error (:func:`full_eval`); the
regime :math:`n \sim d\log d`, :math:`k \sim \log d` (:func:`regime_errors`, :func:`regime_decay_ratio`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate

from companion.claims import ClaimSpec, ResultSpec
from companion.params import ParameterError
from companion.plotting import legend_outside, new_figure
from companion.stats import ROUNDOFF, Z_LEVEL

from ...text import tex_number
from ..model import blocks, cot_effective_blocks
from ..paper import COT_MODELS
from ..stats import left_saddle, replicate_errors, trained_vs_prediction
from ..theory import dynamics, gd, mp, no_cot, wishart

__all__ = ["CLAIMS", "RESULT", "PREV_STEP", "ENTER", "TARGET", "FIT", "RATE_TOLS", "FLOW_TOLS", "MATRIX_TOLS",
           "UNSTABLE_TOLS", "data_step", "separation_parameter",
           "stage_analysis", "linear_limit", "matrix_flow", "regime_errors",
           "regime_decay_ratio", "regime_no_decay_ratio", "regime_unresolved", "full_eval", "trained_weights", "figures", "manifest",
           "REGIME_EXACT_K", "record_stages", "record_flows", "record_full_eval", "record_regime", "verdict_words", "design_words"]

FLOW = "companion.cot.theory.dynamics.reduced_flow_converged"
#: the falsifier of the trained-model claim: the construction one GD step short
PREV_STEP = r"one GD step fewer: $\E\tr(I - \eta S)^{2(k-1)}$"
#: the limit claims' flows end their approach at the distance ENTER from the construction, and run on until the
#: linearised flow predicts the distance TARGET (:func:`linear_limit`)
ENTER, TARGET = 1e-3, 1e-8
#: the distances on which the stage-2 rate is fitted: nonlinear terms change the local rate by a relative O(FIT[1])
FIT = (1e-8, 1e-5)
#: the integrator's tolerances (rtol, atol) of the reduced flows on which the stage-2 rate is fitted and the limit
#: measured (the tight flow), and the tenfold looser ones whose fit measures the first's integration error
#: (:func:`stage_analysis`)
RATE_TOLS = ((1e-13, 1e-16), (1e-12, 1e-15))
#: the tolerances of the reduced flows the figures draw; the limit's integration error is bounded by their change
FLOW_TOLS = (1e-11, 1e-14)
#: the matrix flow's tolerances: the solve on which the limit is measured, and the figure's, which bounds its error
MATRIX_TOLS = ((1e-12, 1e-15), (1e-10, 1e-13))
#: the tolerances at which a matrix flow outside the hypothesis (:func:`data_step` at least 2) is drawn
UNSTABLE_TOLS = (1e-6, 1e-8)
REGIME_DECAY = ClaimSpec("cot41_regime_decay", "qualitative", "monte_carlo",
                         prediction="companion.cot.results.thm4_1.regime_errors",
                         falsifier=r"no decay with $d$: each error equal to the one before",
                         undecided="the expected error before the last $d$ (exact Wishart moments, or the "
                                   "Marchenko-Pastur limit at large $k$) within the level's Monte-Carlo standard errors "
                                   "of 0: nothing the sample can see fall by as many more (`regime_unresolved`)")
REGIME = ClaimSpec("cot41_regime_d{d:num}", "bound", "monte_carlo", prediction="companion.cot.theory.mp.mp_rate")
CLAIMS = (
    ClaimSpec("cot41_separation", "qualitative", "ode", prediction="companion.cot.theory.dynamics.v_curvature",
              falsifier=r"no stage separation: $w$ relaxes with $v$, at the rate $\kappa(\sigma)$, to "
                        r"$1 - (1 - \sigma)\,10^{-3}$ by $t_1$"),
    ClaimSpec("cot41_stage1_time", "numerics", "ode", prediction="companion.cot.theory.dynamics.slow_manifold_time"),
    ClaimSpec("cot41_stage2_rate", "numerics", "ode", prediction="companion.cot.theory.dynamics.fixed_point_rate"),
    ClaimSpec("cot41_ode_limit", "numerics", "ode", prediction=FLOW),
    ClaimSpec("cot41_finite_n_limit", "numerics", "ode", prediction=FLOW),
    ClaimSpec("cot41_flow_eigenbasis", "identity", "ode", prediction="companion.cot.theory.dynamics.symmetrised_S_sample"),
    ClaimSpec("cot41_flow_limit", "numerics", "ode", prediction="companion.cot.results.thm4_1.matrix_flow"),
    ClaimSpec("cot41_full_eval", "statistical", "trained", headline=True, prediction="companion.cot.theory.gd.gd_error_mc",
              falsifier=PREV_STEP, experiment=COT_MODELS),
    REGIME_DECAY,
    REGIME,
)

RESULT = ResultSpec(paper="cot", number="Theorem 4.1", title="gradient flow learns the CoT construction in two stages",
                    label="cot-thm-4-1", notebook="cot/thm4_1_dynamics", module=__name__, claims=CLAIMS,
                    figures=("fig_cot_thm41_ode", "fig_cot_thm41_flow", "fig_cot_thm41_weights", "fig_cot_thm41_regime"),
                    sweep="")





def manifest(regime: list[dict]) -> list[str]:
    """The claim ids the notebook records: the fixed ones and one bound per dimension of the regime."""
    return ([c.id for c in CLAIMS if c is not REGIME] + [REGIME.id.replace(":num}", "}").format(d=r["d"]) for r in regime])


def _first_crossing(t, x, level):
    """First time x(t) reaches ``level`` (linear interpolation between grid points); nan if never."""
    i = int(np.argmax(x >= level))
    if x[i] < level:
        return float("nan")
    if i == 0:
        return float(t[0])
    return float(t[i - 1] + (level - x[i - 1]) * (t[i] - t[i - 1]) / (x[i] - x[i - 1]))


def separation_parameter(eta: float, k: int, sigma: float, lam=1.0, num: int = 60) -> float:
    r"""Singular-perturbation parameter of stage 1: :math:`\varepsilon = \max_{w\in[\sigma, 1/2]}\gamma(w)/\kappa(w)`,
    the largest ratio of the slow relative growth rate of w on the slow manifold,
    :math:`\gamma(w) = \dot w / w` with :math:`v = v_{\rm eq}(w)`, to the fast relaxation rate :math:`\kappa(w)` of v.
    Two well-separated stages need :math:`\varepsilon < 1`."""
    ws = np.geomspace(sigma, 0.5, num)
    return float(max(-dynamics.reduced_grad(dynamics.stage1_v(w, eta, k, lam), w, eta, k, lam)[1] / w / dynamics.v_curvature(w, eta, k, lam)
                     for w in ws))


def linear_limit(decades, mu: float, t2: float, T: float, final: float, final_loose: float) -> dict:
    r"""The limit claims' prediction and band: the distance :math:`D(T)` to the construction at the horizon against the
    linearised flow, started where the flow entered ``ENTER`` (time :math:`t_2`),

    .. math:: p = D(t_2)\,e^{-\mu (T - t_2)}.

    The log of :math:`D(T)/p` is the sum of the deviations of the flow's decades (each :math:`\ln(10)/\mu` long) from
    the rate :math:`\mu`. The first two are measured, :math:`\delta_j = \ln(D(t_2 + j\ln 10/\mu)/D(t_2 + (j-1)
    \ln 10/\mu)) + \ln 10` (``decades``, from the integrator's dense output); the nonlinear terms and the faster mode
    shrink from one decade to the next, so each later one deviates by at most :math:`|\delta_2|`, and the band is

    .. math:: |\ln(D(T)/p)| \le |\delta_1| + (N - 1)\,|\delta_2|, \qquad N = \log_{10}(D(t_2) / p),

    plus the integration error of :math:`D(T)`, bounded by its change on a solve at looser tolerances
    (``final_loose``). Returns ``dict(predicted, measured, tol, delta, solver, n_decades)``, ``tol`` relative, ``n_decades`` N."""
    Da, Db, Dc = (float(x) for x in decades)
    p = Da * math.exp(-mu * (T - t2))
    d1, d2 = math.log(Db / Da) + math.log(10.0), math.log(Dc / Db) + math.log(10.0)
    n_dec = math.log10(Da / p)
    solver = abs(final - final_loose) / p
    return dict(predicted=p, measured=final, tol=math.expm1(abs(d1) + (n_dec - 1) * abs(d2)) + solver,
                delta=(d1, d2), solver=solver, n_decades=n_dec)


def data_step(eta: float, lam) -> float:
    r"""The hypothesis of the flows on a sample of S: :math:`\eta\,\lambda_{\max}`, the largest step GD on the
    data takes relative to an eigenvalue of the sample (``lam``: eigenvalues, any shape). GD on every prompt of the
    sample converges iff it is below 2; then every :math:`\sum_{i<k}(1 - \eta\lambda)^i = (1 - (1 - \eta\lambda)^k)
    /(\eta\lambda)` is positive, so the stage-1 quasi-equilibrium :math:`v_{\rm eq}(0)` is negative (and, for the
    matrix flow, :math:`\sum_{i<k}\overline{S(I - \eta S)^iS} \succ 0`) and the flow takes the construction's branch
    of :math:`vw = -\eta`. A prompt with :math:`\eta\lambda > 2` contributes :math:`-((\eta\lambda - 1)^k - 1)/
    (\eta\lambda)` at even k, exponentially large; a few of them can turn :math:`v_{\rm eq}(0)` positive, and the
    flow leaves on the other branch (:math:`v > 0`, :math:`w \to -\infty`)."""
    return float(eta * np.max(lam))


def stage_analysis(eta: float, k: int, sigma: float, lam=1.0, target: float = TARGET, stages: bool = True,
                   horizon: float | None = None) -> dict:
    r"""The two stages of the reduced flow (:prf:ref:`cot-thm-4-1`) measured on the ODE and predicted.

    * stage 1: the relaxation time of v, :math:`t_1 = \ln(10^3)/\kappa(\sigma)` (v within 0.1 % of
      :math:`v_{\rm eq}`); the ODE's :math:`w(t_1)`; the time :math:`t_{1/2}` at which w reaches 1/2, measured and
      predicted by the slow-manifold reduction started from the ODE's state at :math:`t_1`;
    * stage 2: the late decay rate fitted on distances in :math:`[10^{-8}, 10^{-5}]` (``FIT``) and the predicted
      rate :math:`\mu` (:func:`companion.cot.theory.dynamics.fixed_point_rate`), and its allowance ``rate_tol``
      (relative), the sum of the fit's two measured errors: its integration error, the change of the fitted rate
      when the integrator's tolerances are loosened tenfold (``RATE_TOLS``: the rate is fitted on a flow integrated
      at rtol :math:`10^{-13}`, checked against one at :math:`10^{-12}`; ``rate_solver``), and the change of the
      local rate across the window, the difference of the rates fitted on its lower and upper halves in
      :math:`\ln` distance (nonlinear terms and the faster mode change the local rate with the distance;
      ``rate_window``); the distance at the rate-derived horizon.

    The limit: the distance ``final`` at the horizon, where the linearised flow predicts ``target``, and ``limit``
    (:func:`linear_limit`), both on the tight flow (``RATE_TOLS[0]``), its integration error bounded by the change
    from the figure's flow (``FLOW_TOLS``). A flow that does not come
    within ``ENTER`` of the construction in the budget of :func:`companion.cot.theory.dynamics.reduced_flow_converged`
    is not an exception: it is integrated to that budget, ``converged`` is False, ``limit`` None and ``final`` the
    distance reached (the limit claims then fail).

    A sample outside the theorem's hypothesis (:func:`data_step` at least 2: GD diverges on one of its prompts) is
    not integrated to convergence: ``hypothesis`` is False, the flow is drawn on ``[0, horizon]`` (default the
    convergence budget), ``limit`` is None and ``final`` nan (the limit claim does not apply); ``eta_lmax`` and
    ``veq0`` (:math:`v_{\rm eq}(0)`) say why.
    """
    num_t = 4001 if stages else 601
    eta_lmax, veq0 = data_step(eta, lam), dynamics.stage1_v(0.0, eta, k, lam)
    if eta_lmax >= 2:
        if stages:
            raise ValueError(f"stage_analysis: GD on the data diverges (eta lambda_max = {eta_lmax:.3g} >= 2); "
                             "the stages are analysed on stable data only")
        mu = dynamics.fixed_point_rate(eta, k, lam)
        T = dynamics.convergence_budget(mu, sigma) if horizon is None else float(horizon)
        t_, v_, w_, loss_ = dynamics.solve_reduced_flow(eta, k, sigma, T, lam=lam, num_t=num_t)
        return dict(t=t_, v=v_, w=w_, loss=loss_, T=T, t2=float("nan"), mu=mu, converged=False, hypothesis=False,
                    eta_lmax=eta_lmax, veq0=veq0, final=float("nan"), limit=None)
    try:
        r = dict(dynamics.reduced_flow_converged(eta, k, sigma, target, lam=lam, enter=ENTER, num_t=num_t,
                                                 rtol=FLOW_TOLS[0], atol=FLOW_TOLS[1]), converged=True)
    except ParameterError:  # not within the rate-derived budget: the limit claims record the distance reached
        mu = dynamics.fixed_point_rate(eta, k, lam)
        T = dynamics.convergence_budget(mu, sigma)
        t_, v_, w_, loss_ = dynamics.solve_reduced_flow(eta, k, sigma, T, lam=lam, num_t=num_t)
        r = dict(t=t_, v=v_, w=w_, loss=loss_, T=T, t2=float("nan"), mu=mu, converged=False)
    t, v, w = r["t"], r["v"], r["w"]
    final, limit, fine = float(max(abs(v[-1] + eta), abs(w[-1] - 1))), None, None
    if r["converged"]:
        fine = dynamics.reduced_flow_converged(eta, k, sigma, target, lam=lam, enter=ENTER, num_t=num_t,
                                               rtol=RATE_TOLS[0][0], atol=RATE_TOLS[0][1])
        final = fine["final"]
        limit = linear_limit(fine["decades"], r["mu"], r["t2"], r["T"], final, r["final"])
    r.update(hypothesis=True, eta_lmax=eta_lmax, veq0=veq0)
    if not stages:
        return dict(r, final=final, limit=limit)
    kap = dynamics.v_curvature(sigma, eta, k, lam)
    t1 = float(np.log(1e3) / kap)
    w1 = float(np.interp(t1, t, w))
    eps = separation_parameter(eta, k, sigma, lam)
    t_half = _first_crossing(t, w, 0.5)
    t_pred = t1 + dynamics.slow_manifold_time(eta, k, w1, lam=lam) if w1 < 0.5 else float("nan")
    rate, rate_solver, rate_window = _fitted_rate(r, eta, *FIT), float("nan"), float("nan")
    if r["converged"]:  # the rate on flows integrated more tightly than the figure's, at two tolerances
        loose = dynamics.reduced_flow_converged(eta, k, sigma, target, lam=lam, enter=ENTER, num_t=num_t,
                                                rtol=RATE_TOLS[1][0], atol=RATE_TOLS[1][1])
        rate = _fitted_rate(fine, eta, *FIT)
        mid = math.sqrt(FIT[0] * FIT[1])
        rate_solver = abs(rate - _fitted_rate(loose, eta, *FIT))
        rate_window = abs(_fitted_rate(fine, eta, FIT[0], mid) - _fitted_rate(fine, eta, mid, FIT[1]))
    mu = r["mu"]
    return dict(r, kappa=kap, t1=t1, w1=w1, eps=eps, t_half=t_half, t_pred=t_pred, rate=rate,
                rate_tol=(rate_solver + rate_window) / mu if r["converged"] else 0.0,
                rate_solver=rate_solver / mu, rate_window=rate_window / mu, final=final, limit=limit,
                veq=np.array([dynamics.stage1_v(x, eta, k, lam) for x in w]))


def _fitted_rate(flow: dict, eta: float, lo: float, hi: float) -> float:
    """The slope of a least-squares line through ln of the distance to (-eta, 1) on the flow's grid where it lies in
    (lo, hi) (nan on fewer than 5 points)."""
    dist = np.hypot(flow["v"] + eta, flow["w"] - 1)
    sel = (dist > lo) & (dist < hi)
    return float(-np.polyfit(flow["t"][sel], np.log(dist[sel]), 1)[0]) if sel.sum() >= 5 else float("nan")


def matrix_flow(d: int, n: int, num_S: int, eta: float, k: int, sigma: float, rng: np.random.Generator,
                target: float = TARGET, num_t: int = 121, horizon: float | None = None) -> dict:
    r"""The restricted matrix flow of :prf:ref:`cot-thm-4-1` from the Assumption 4.1 initialisation, on a fixed
    S sample symmetrised by Hadamard sign flips in the initial eigenbasis U, integrated to a horizon that follows
    from its own rate: :math:`\mu` is the smallest eigenvalue of the Hessian of the sample loss at
    :math:`(-\eta I, I)` in the U-diagonal coordinates (central differences of the exact gradient); the flow runs
    until its distance to :math:`(-\eta I, I)` (the largest entry) is below ``ENTER``, then
    :math:`\ln(\mathrm{ENTER}/\mathrm{target})/\mu` longer, where the linearised flow predicts ``target``; the
    limit (``final``) and its band (:func:`linear_limit`) on a solve at the tolerances ``MATRIX_TOLS[0]``, its
    integration error bounded by the change from the figure's solve (``MATRIX_TOLS[1]``).

    Returns
    -------
    dict
        ``dict(t, Vu, Wu, L, mu, T, off, final, converged, limit)`` (Vu, Wu in the basis U; ``off`` the largest
        off-diagonal entry; ``converged`` False when the flow did not come within ``ENTER`` of the construction by
        :math:`10^4/\mu`: then T is that budget, ``final`` the distance reached, which fails the limit claim, and
        ``limit`` None), and ``hypothesis``, ``eta_lmax`` (:func:`data_step` of the sample). A sample outside the
        theorem's hypothesis (``eta_lmax`` at least 2) is not integrated to convergence: the flow is drawn on
        ``[0, horizon]`` (default :math:`10^4/\mu`) at the figure's tolerances, ``converged`` is False, ``final``
        nan and ``limit`` None (the limit claim does not apply).
    """
    V0, W0 = dynamics.assumption41_init(d, sigma, rng)
    U = np.linalg.eigh(V0)[1]
    S = dynamics.symmetrised_S_sample(wishart.sample_S(d, n, num_S, rng), U)
    A = dynamics.gd_iterate_maps(S, eta, k)

    def diag_grad(p):
        V, W = (U * p[:d]) @ U.T, (U * p[d:]) @ U.T
        _, gV, gW = dynamics.restricted_loss_grad(V, W, S, A, eta)
        return np.concatenate([np.diag(U.T @ gV @ U), np.diag(U.T @ gW @ U)])

    p0 = np.concatenate([-eta * np.ones(d), np.ones(d)])
    h = 1e-6
    H = np.array([(diag_grad(p0 + h * e) - diag_grad(p0 - h * e)) / (2 * h) for e in np.eye(2 * d)])
    mu = float(np.linalg.eigvalsh((H + H.T) / 2)[0])
    I = np.eye(d)

    rhs = dynamics.restricted_flow_rhs(S, A, eta)
    y_star = np.concatenate([(-eta * I).ravel(), I.ravel()])

    def dist(y):
        return float(np.abs(y - y_star).max())

    def near(_t, y):
        return dist(y) - ENTER

    near.terminal, near.direction = True, -1
    y0 = np.concatenate([V0.ravel(), W0.ravel()])
    eta_lmax = data_step(eta, np.linalg.eigvalsh(S))
    hypothesis = eta_lmax < 2
    if hypothesis:
        sol = integrate.solve_ivp(rhs, (0.0, 1e4 / mu), y0, method="LSODA", events=near, rtol=1e-8, atol=1e-11)
        converged = bool(sol.t_events[0].size)
    else:
        converged = False
    # not near the construction within the budget 1e4 / mu: the limit claim records the distance reached there
    t2 = float(sol.t_events[0][0]) if converged else float("nan")
    if converged:
        T = t2 + float(np.log(ENTER / target) / mu)
    elif hypothesis:
        T = float(sol.t[-1])
    else:
        T = 1e4 / mu if horizon is None else float(horizon)
    t = np.linspace(0.0, T, num_t)
    # outside the hypothesis the round-off of the gradient grows with (eta lambda - 1)^(2k): drawn at looser tolerances
    rtol, atol = MATRIX_TOLS[1] if hypothesis else UNSTABLE_TOLS
    sol = integrate.solve_ivp(rhs, (0.0, T), y0, method="LSODA", t_eval=t, rtol=rtol, atol=atol)
    Vt = sol.y[: d * d].T.reshape(-1, d, d)
    Wt = sol.y[d * d:].T.reshape(-1, d, d)
    Vu = np.einsum("ji,tjk,kl->til", U, Vt, U)
    Wu = np.einsum("ji,tjk,kl->til", U, Wt, U)
    off = max(float(np.abs(M - np.einsum("tii->ti", M)[:, :, None] * I).max()) for M in (Vu, Wu))
    L = np.array([dynamics.restricted_loss_grad(V, W, S, A, eta)[0] for V, W in zip(Vt, Wt)])
    final = dist(sol.y[:, -1]) if hypothesis else float("nan")
    limit = None
    if converged:
        tight = integrate.solve_ivp(rhs, (0.0, T), y0, method="LSODA", rtol=MATRIX_TOLS[0][0],
                                    atol=MATRIX_TOLS[0][1], dense_output=True)
        decades = [dist(tight.sol(t2 + j * np.log(10.0) / mu)) for j in range(3)]
        final = dist(tight.y[:, -1])
        limit = linear_limit(decades, mu, t2, T, final, dist(sol.y[:, -1]))
    return dict(t=t, Vu=Vu, Wu=Wu, L=L, mu=mu, T=T, off=off, final=final, converged=converged, limit=limit,
                hypothesis=hypothesis, eta_lmax=eta_lmax)


#: the largest k at which the regime's expected error is computed exactly (:func:`regime_errors`): the exact
#: moments up to power 2k take under a second at 2k = 40 and 20 s at 60 (d = 64, n = 1100; 2-core AMD EPYC)
REGIME_EXACT_K = 20


def regime_errors(d_list, c_n: float, c_k: float, num: int, rng: np.random.Generator) -> list[dict]:
    r"""The regime of :prf:ref:`cot-thm-4-1`, :math:`n = \lceil c_n d\ln d\rceil`, :math:`k = \lceil c_k\ln d\rceil`, with the
    step :math:`\eta = 2/(\lambda_+ + \lambda_-)` that balances the Marchenko--Pastur edges (:math:`\gamma = d/n`):
    per d, the Monte-Carlo per-coordinate k-step GD error :math:`\frac1d\E\tr(I-\eta S)^{2k}` with its standard error,
    the edge bound :math:`\rho_{\rm MP}^{2k}`, and the design's expected error ``expected`` (what
    :func:`regime_unresolved` reads instead of the measured one): exact from the Wishart moments
    (:func:`companion.cot.theory.gd.gd_error_wishart`) up to k = :data:`REGIME_EXACT_K`, beyond it the
    Marchenko--Pastur limit (:func:`companion.cot.theory.mp.gd_error_mp`; below the exact value at small d, so that
    the rule leaves more undecided there, pass or miss alike)."""
    out = []
    for d in d_list:
        n = int(math.ceil(c_n * d * math.log(d)))
        k = int(math.ceil(c_k * math.log(d)))
        lo, hi = mp.mp_edges(d / n)
        eta = 2 / (lo + hi)
        m, se = gd.gd_error_mc(k, eta, wishart.sample_S_eigs(d, n, num, rng))
        expected = gd.gd_error_wishart(k, eta, d, n) / d if k <= REGIME_EXACT_K else mp.gd_error_mp(k, eta, d / n)
        out.append(dict(d=d, n=n, k=k, eta=eta, err=m / d, se=se / d, bound=mp.mp_rate(eta, d / n) ** (2 * k),
                        expected=expected))
    return out


def regime_decay_ratio(regime: list[dict]) -> float:
    """The largest ratio (err(next d) + ``Z_LEVEL`` SE) / (err(d) - ``Z_LEVEL`` SE) along the regime (:func:`regime_errors`): below 1
    when the error falls at every step of d by more than ``Z_LEVEL`` standard errors on each side."""
    return max((b["err"] + Z_LEVEL * b["se"]) / max(a["err"] - Z_LEVEL * a["se"], 1e-300) for a, b in zip(regime, regime[1:]))


def regime_no_decay_ratio(regime: list[dict]) -> float:
    """The falsifier's value of :func:`regime_decay_ratio`: the same statistic when the error does not decay with d
    (each next error equal to the one before, with its own standard error), above 1 by the ``Z_LEVEL``-SE margins."""
    return max((a["err"] + Z_LEVEL * b["se"]) / max(a["err"] - Z_LEVEL * a["se"], 1e-300) for a, b in zip(regime, regime[1:]))


def regime_unresolved(regime: list[dict]) -> str | None:
    """Why :func:`regime_decay_ratio` cannot decide, or ``None``, from the design (the rule reads no measured
    error): an expected error (other than the last; ``expected`` of :func:`regime_errors`) less than ``Z_LEVEL``
    Monte-Carlo standard errors above 0 leaves nothing the sample can see fall by as many more (the ratio
    would divide by the floor 1e-300 wherever the measured error is that low: 7.8e295 at seed 52 of the page's smoke
    point). It applies whether the comparison would pass or miss."""
    low = [a for a in regime[:-1] if a["expected"] - Z_LEVEL * a["se"] <= 0]
    if not low:
        return None
    return ("the expected error at " + ", ".join(f"$d = {a['d']}$ (${tex_number(a['expected'])}$, the Monte-Carlo SE "
                                                 f"${tex_number(a['se'], '.2g')}$)" for a in low)
            + f" is within {Z_LEVEL:.3g} SE of 0: a decay by more than {Z_LEVEL:.3g} SE from it cannot be measured with this sample")


def full_eval(runs, pred, k: int, eval_batch: int, seed: int, eta: float) -> dict:
    r"""The ``runs.replicates`` trained CoT models that left the zero saddle (:func:`companion.cot.stats.left_saddle`;
    the theorem starts from Assumption 4.1, not from the saddle), each on its own ``eval_batch // replicates`` fresh
    prompts (:func:`companion.cot.stats.replicate_errors`), against the Monte-Carlo k-step
    GD error ``pred`` (:func:`companion.cot.theory.gd.gd_error_mc`): :func:`companion.cot.stats.trained_vs_prediction`,
    with ``escape`` (the :class:`companion.cot.stats.Escape`)."""
    escape = left_saddle(runs, eta, k)
    errors = replicate_errors("cot", escape.kept, k, eval_batch // runs.replicates, seed)
    return dict(trained_vs_prediction(errors, pred.mean, pred.se), escape=escape)


def trained_weights(res, d: int, eta: float) -> dict:
    r"""The invariants of one trained model: :math:`W_{24}` (the rescaling :math:`c = -W_{24}`) and the relative
    deviation :math:`\max|V_{31}W_{13} + \eta I|/\eta` from the construction."""
    eff = cot_effective_blocks(res.W_KQ, res.W_PV, d)
    c = float(-blocks(res.W_KQ, d)["24"][0, 0])
    return dict(W24=-c, dev13=float(np.abs(eff["V31W13"] + eta * np.eye(d)).max() / eta))


# --------------------------------------------------------------------------------------------- the verdict
def record_stages(v, ode: dict) -> None:
    r"""The claims on the two stages of the reduced flow for :math:`n \to \infty` (``ode``, :func:`stage_analysis`):
    ``cot41_separation`` (:math:`w(t_1) < 1/2` after the relaxation time :math:`t_1 = \ln(10^3)/\kappa(\sigma)`, for
    :math:`\varepsilon < 1`), ``cot41_stage1_time`` (:math:`t_{1/2}` against the slow-manifold reduction, band
    :math:`2\varepsilon t_{1/2}`, for :math:`\varepsilon < 1/4`), ``cot41_stage2_rate`` (the late decay rate against
    :math:`\mu = \lambda_{\min}(H)`) and ``cot41_ode_limit`` (the distance to :math:`(-\eta, 1)` at the rate-derived
    horizon)."""
    eps = ode["eps"]
    if eps < 1:
        v.qualitative("cot41_separation",
                      quantity=r"$n\to\infty$: $w$ at the relaxation time $t_1 = \ln(10^3)/\kappa(\sigma)$ "
                               rf"($\varepsilon = {eps:.3f}$)",
                      predicted=0.5, measured=ode["w1"], comparison="upper", tolerance=0.0,
                      falsifier=CLAIMS[0].falsifier, falsifier_value=1 - (1 - float(ode["w"][0])) * 1e-3,
                      reason=r"stage 1 must outlast the fast relaxation of $v$ when $\varepsilon < 1$",
                      detail=rf"$t_1 = {tex_number(ode['t1'])}$ is the time in which $v$ comes within 0.1 % of "
                             r"$v_{\rm eq}(w)$ at the curvature $\kappa(\sigma)$; the ODE must still have "
                             rf"$w(t_1) < 1/2$ there (measured ${tex_number(ode['w1'], '.4g')}$).")
    else:
        v.not_applicable("cot41_separation", kind="qualitative", quantity=r"$n\to\infty$: stage 1",
                         reason=rf"$\varepsilon = {eps:.3f} \ge 1$: the slow–fast theory predicts no separate stage 1 "
                                "at these `eta_ode`, `k_ode`, `sigma`")
    if eps < 0.25:
        v.numerics("cot41_stage1_time",
                   quantity=r"$n\to\infty$: time $t_{1/2}$ at which $w$ reaches $1/2$, ODE vs slow-manifold reduction",
                   predicted=ode["t_pred"], measured=ode["t_half"], tolerance=2 * eps * ode["t_half"],
                   reason=r"first-order slow-manifold reduction, relative error $O(\varepsilon)$ with "
                          rf"$\varepsilon = {eps:.3f}$: band $2\varepsilon\,t_{{1/2}}$",
                   detail=r"prediction $t_1 + \int_{w(t_1)}^{1/2} dw/\dot w$ on the slow manifold "
                          r"$v = v_{\rm eq}(w)$, started from the ODE's state at $t_1$; the lag of $v$ behind "
                          r"$v_{\rm eq}$ changes the growth rate of $w$ by a relative $O(\varepsilon)$ over the "
                          r"whole stage, and the factor 2 covers the $O(\varepsilon^2)$ terms.")
    else:
        v.not_applicable("cot41_stage1_time", kind="numerics", quantity=r"$n\to\infty$: stage-1 time",
                         reason=rf"$\varepsilon = {eps:.3f} \ge 1/4$: the first-order reduction's error allowance "
                                r"$2\varepsilon\,t_{1/2}$ would exceed half the stage time; no quantitative prediction")
    v.numerics("cot41_stage2_rate",
               quantity=r"$n\to\infty$: late decay rate of the distance to $(-\eta, 1)$ vs $\mu = \lambda_{\min}(H)$",
               predicted=ode["mu"], measured=ode["rate"], tolerance=ode["rate_tol"], comparison="rel",
               reason=rf"rate fitted on distances ${tex_number(FIT[0])}$ to ${tex_number(FIT[1])}$; the band: its integration "
                      r"error and its change across the window, both measured",
               detail=r"$H$ is the Gauss–Newton Hessian $\sum_i \E[\lambda^2 g_i g_i^\T]$ of the reduced loss at "
                      r"$(-\eta, 1)$ (`companion.cot.theory.dynamics.fixed_point_rate`); the rate is the slope of a "
                      r"least-squares line through $\ln$ of the distance on the ODE's grid (at least 5 points), the flow "
                      rf"integrated by LSODA at rtol ${tex_number(RATE_TOLS[0][0])}$. Relative tolerance: the sum of the "
                      rf"fit's integration error, measured as its change at rtol ${tex_number(RATE_TOLS[1][0])}$ "
                      rf"(${tex_number(ode['rate_solver'], '.2g')}$), and of the change of the local rate across the "
                      rf"window, the rates on its lower and upper halves in $\ln$ distance differing by "
                      rf"${tex_number(ode['rate_window'], '.2g')}$ (nonlinear terms and the faster mode).")
    _limit(v, "cot41_ode_limit", ode, quantity=r"reduced ODE ($n\to\infty$): $\max(|v(T) + \eta|, |w(T) - 1|)$",
           rate=r"the rate $\mu$", solver=_solver_words(RATE_TOLS[0], FLOW_TOLS))


def _pow10(x: float) -> str:
    """``10^{e}`` for a power of ten x."""
    return f"10^{{{round(math.log10(x))}}}"


def _solver_words(measured: tuple, loose: tuple) -> str:
    """How a limit's integration error is bounded: the tolerances (rtol, atol) of its solve and of the looser one."""
    return f"LSODA at rtol ${_pow10(measured[0])}$, its error bounded by the change from rtol ${_pow10(loose[0])}$"


def _limit(v, claim: str, flow: dict, *, quantity: str, rate: str, solver: str) -> None:
    """A limit claim: the flow's distance to the construction at its horizon against the linearised flow from the
    distance ``ENTER`` (:func:`linear_limit`); a flow that never came within ``ENTER`` fails, with the distance it
    reached. ``quantity`` names the distance; " at T = <horizon>" follows it where the flow was integrated to its
    horizon, not where the claim does not apply (that flow is only drawn)."""
    lim = flow["limit"]
    if not flow.get("hypothesis", True):
        quantity += " (not integrated: outside the hypothesis)"
        veq = (rf"; $v_{{\rm eq}}(0) = {tex_number(flow['veq0'], '.3g')}$"
               rf"{' > 0: the flow leaves on the branch $v > 0$, $w < 0$' if flow['veq0'] > 0 else ''}"
               if "veq0" in flow else "")
        v.not_applicable(claim, kind="numerics", quantity=quantity,
                         reason=rf"GD on the data diverges on a prompt of this sample ($\eta\lambda_{{\max}} = "
                                rf"{flow['eta_lmax']:.3f} \ge 2$): outside the theorem's hypothesis",
                         detail=r"The theorem assumes GD on the data stable on every prompt of the sample, "
                                r"$\eta\lambda_{\max} < 2$ (`companion.cot.results.thm4_1.data_step`), which makes "
                                r"the stage-1 quasi-equilibrium negative" + veq + r". The flow was not integrated to "
                                rf"convergence (drawn to $T = {tex_number(flow['T'])}$).")
        return
    quantity += rf" at $T = {tex_number(flow['T'])}$"
    if lim is None:
        v.numerics(claim, quantity=quantity, predicted=TARGET, measured=flow["final"], tolerance=0.0, comparison="rel",
                   reason=rf"the flow did not come within ${_pow10(ENTER)}$ of the construction within its budget "
                          rf"$T = {tex_number(flow['T'])}$",
                   detail=f"The flow was integrated with {rate} to its budget $T = {tex_number(flow['T'])}$ and never came "
                          f"within ${_pow10(ENTER)}$ of the construction; the linearised flow does not apply.")
        return
    d1, d2 = lim["delta"]
    v.numerics(claim, quantity=quantity, predicted=lim["predicted"], measured=flow["final"], tolerance=lim["tol"],
               comparison="rel",
               reason=rf"the linearised flow from distance ${_pow10(ENTER)}$ at its rate; band: the first two "
                      r"decades' deviations from that rate, the later no larger, and the solver's error",
               detail=rf"The flow runs until its distance to the construction is ${_pow10(ENTER)}$ (time $t_2$), then "
                      rf"$\ln({_pow10(ENTER)}/{_pow10(TARGET)})/\mu$ longer, with {rate}; the prediction is "
                      r"$D(t_2)\,e^{-\mu(T - t_2)}$ (`companion.cot.results.thm4_1.linear_limit`). Relative band "
                      r"$e^{|\delta_1| + (N-1)|\delta_2|} - 1$ plus the solver's error: the flow's first two decades "
                      r"(each $\ln(10)/\mu$ long) deviate from the rate by "
                      rf"$\delta_1 = {tex_number(d1, '.2g')}$ and $\delta_2 = {tex_number(d2, '.2g')}$ in $\ln$ "
                      rf"distance, each of the $N - 1 = {lim['n_decades'] - 1:.0f}$ after the first by at most $|\delta_2|$; {solver} "
                      rf"(${tex_number(lim['solver'], '.2g')}$, relative).")


def record_flows(v, fin: dict, flow: dict, *, d: int, n: int, d_flow: int) -> None:
    r"""The limits of the other two flows at their rate-derived horizons: ``cot41_finite_n_limit`` (the reduced
    flow on a sample of spectra at finite :math:`(d, n)`, ``fin``), ``cot41_flow_eigenbasis`` (the restricted matrix
    flow stays diagonal in the initial eigenbasis :math:`U`: an implementation test) and ``cot41_flow_limit``
    (:math:`(V_{31}, W_{13}) \to (-\eta I, I)`, ``flow``, :func:`matrix_flow`)."""
    _limit(v, "cot41_finite_n_limit", fin,
           quantity=rf"reduced ODE ($d = {d}$, $n = {n}$): distance to the construction",
           rate=r"$\mu$ the rate of the loss on this sample of spectra",
           solver=_solver_words(RATE_TOLS[0], FLOW_TOLS))
    v.identity("cot41_flow_eigenbasis",
               quantity=r"matrix flow: max off-diagonal entry of $V_{31}$, $W_{13}$ in the initial eigenbasis",
               predicted=0.0, measured=flow["off"], tolerance=1e-8,
               reason=r"exact on the Hadamard-symmetrised sample (an implementation test); integrator atol "
                      rf"${_pow10(MATRIX_TOLS[1][1])}$ per entry",
               detail=r"The sample of $S$ is averaged over the sign flips $J = \diag(\pm1)$ in the basis $U$ given by "
                      r"the rows of a Hadamard matrix, so the off-diagonal part of the sample gradient cancels "
                      rf"exactly; LSODA with rtol ${_pow10(MATRIX_TOLS[1][0])}$, atol ${_pow10(MATRIX_TOLS[1][1])}$; "
                      r"tolerance $10^{-8}$.")
    _limit(v, "cot41_flow_limit", flow,
           quantity=rf"matrix flow ($d = {d_flow}$): $\max(|V_{{31}}(T) + \eta I|, |W_{{13}}(T) - I|)$",
           rate=r"$\mu$ the smallest eigenvalue of the Hessian of the sample loss at $(-\eta I, I)$ in the "
                r"$U$-diagonal coordinates (central differences of the exact gradient)",
           solver=_solver_words(*MATRIX_TOLS))


def _fold(ratio: float) -> str:
    """A ratio of tolerances in words: 100 -> 'hundredfold'."""
    words = {10: "tenfold", 100: "hundredfold", 1000: "thousandfold"}
    return words.get(round(ratio), f"{ratio:g}-fold")


def design_words() -> dict:
    r"""The derivation's design constants in words and formulas (Markdown, for ``{glue:md}``), computed from
    ``ENTER``, ``TARGET``, ``FIT`` and the tolerances: ``fit`` (the window of the rate fit), ``enter``, ``horizon``
    (:math:`\ln(\mathrm{ENTER}/\mathrm{TARGET})/\mu`), ``predicts``, ``later`` (the decades after the second, in
    words), ``band`` (:func:`linear_limit`'s band over the N decades), ``decades`` (N in words), ``looser`` (the
    ratio of the tolerances whose change bounds the limit's solver error) and ``rate_looser`` (the rate fit's)."""
    n_dec = round(math.log10(ENTER / TARGET))
    number = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    enter, target = _pow10(ENTER), _pow10(TARGET)
    folds = {_fold(FLOW_TOLS[0] / RATE_TOLS[0][0]), _fold(MATRIX_TOLS[1][0] / MATRIX_TOLS[0][0])}
    return dict(fit=f"${_pow10(FIT[0])}$ and ${_pow10(FIT[1])}$", enter=f"${enter}$",
                horizon=rf"$\ln({enter}/{target})/\mu$", predicts=rf"$D(t_2)\,e^{{-\mu(T - t_2)}} = {target}$",
                later=number.get(n_dec - 2, str(n_dec - 2)),
                band=rf"$|\ln(D(T)/{target})| \le |\delta_1| + {n_dec - 1}|\delta_2|$",
                decades=number.get(n_dec, str(n_dec)), looser=" or ".join(sorted(folds)),
                rate_looser=_fold(RATE_TOLS[1][0] / RATE_TOLS[0][0]))


def _words(rec, fmt: str = ".4g") -> str:
    """One record in words: its measurement against its prediction and its status, or why it does not apply."""
    if rec.status == "not_applicable":
        return f"not applicable: {rec.reason}"
    return (f"${tex_number(rec.measured, fmt)}$ against ${tex_number(rec.predicted, fmt)}$, "
            f"**{rec.status.replace('_', ' ')}**")


def verdict_words(records, ode: dict) -> dict:
    r"""The verdict paragraph's sentences on the flows, from the records (Markdown, for ``{glue:md}``): ``stages``
    (``cot41_separation``, ``cot41_stage1_time``, ``cot41_stage2_rate`` on the flow ``ode``) and ``limits`` (the three
    limit claims), each claim's numbers with its status, or why it does not apply."""
    by = {r.claim: r for r in records}
    sep = by["cot41_separation"]
    if sep.status == "not_applicable":
        first = f"{sep.reason} (**not applicable**)"
    else:
        first = (rf"$v$ has relaxed by $t_1 = {tex_number(ode['t1'], '.3g')}$, where $w = {tex_number(ode['w1'], '.4g')}$ "
                 rf"against the bound $\tfrac12$ of stage 1 (**{sep.status.replace('_', ' ')}**)")
    stages = (rf"In the reduced flow ($n \to \infty$) the separation parameter is $\varepsilon = {ode['eps']:.2f}$: "
              f"{first}. The stage-1 time against the slow-manifold prediction: "
              rf"{_words(by['cot41_stage1_time'], '.3g')}; the stage-2 rate against the Hessian's $\mu$: "
              f"{_words(by['cot41_stage2_rate'], '.6g')}.")
    limits = ("The distance to the construction at the rate-derived horizon against the linearised flow's: "
              rf"the reduced flow for $n \to \infty$, {_words(by['cot41_ode_limit'])}; at finite $n$, "
              f"{_words(by['cot41_finite_n_limit'])}; the restricted matrix flow, {_words(by['cot41_flow_limit'])}.")
    return dict(stages=stages, limits=limits)


def record_full_eval(v, model: dict, pred, prev, *, replicates: int, k: int, d: int) -> None:
    r"""``cot41_full_eval`` (the headline): the mean evaluation error of ``replicates`` independently seeded,
    full-parameter trained models that left the zero saddle (``model``, :func:`full_eval`) against the k-step GD error
    :math:`\E\tr(I-\eta S)^{2k}` (``pred``, an independent Monte-Carlo sample of spectra); the falsifier is the
    construction one GD step short, :math:`\E\tr(I-\eta S)^{2(k-1)}` (``prev``, on the same sample). The band has
    the round-off floor ``ROUNDOFF * d``."""
    floor = ROUNDOFF * d
    v.statistical("cot41_full_eval",
                  quantity=rf"full training ({replicates} seeds): mean evaluation error after $k = {k}$ CoT steps "
                           r"vs $\E\tr(I - \eta S)^{2k}$",
                  predicted=pred.mean, measured=model["mean"], se=model["se"], dof=model["dof"], floor=floor,
                  falsifier=PREV_STEP, falsifier_value=prev.mean, headline=True,
                  reason=rf"{Z_LEVEL:.3g} SE of the mean of {model['escape'].kept.replicates} trained models, over training "
                         "seeds or prompts (the "
                         "wider band), and of the independent Monte-Carlo prediction",
                  detail=f"{model['escape'].words()}. Level of {Z_LEVEL:.3g} normal standard errors; the wider of two valid bands "
                         f"decided: {model['se_from']}, "
                         "combined (Welch) with the standard error of the independent Monte-Carlo sample of spectra "
                         rf"(`companion.cot.stats.trained_vs_prediction`); round-off floor ${tex_number(floor)}$ "
                         rf"(${tex_number(ROUNDOFF)}\,d$ with $d = {d}$).")


def record_regime(v, regime: list[dict]) -> None:
    r"""The regime :math:`n = \lceil c_n d\ln d\rceil`, :math:`k = \lceil c_k\ln d\rceil` (``regime``,
    :func:`regime_errors`): one bound ``cot41_regime_d{d}`` per dimension (the per-coordinate k-step GD error below
    the Marchenko–Pastur edge bound :math:`\rho_{\rm MP}^{2k}`), and ``cot41_regime_decay`` (the error falls at every
    step of d, :func:`regime_decay_ratio`; undecided where an error is within ``Z_LEVEL`` SE of 0, :func:`regime_unresolved`)."""
    for r_ in regime:
        v.bound(f"cot41_regime_d{r_['d']}",
                quantity=rf"$d = {r_['d']}$, $n = {r_['n']}$, $k = {r_['k']}$: per-coordinate GD error "
                         r"$\le \rho_{\rm MP}^{2k}$",
                bound=r_["bound"], measured=r_["err"], comparison="upper", se=r_["se"], floor=ROUNDOFF,
                reason=f"geometric decay on spectra inside the Marchenko–Pastur support; {Z_LEVEL:.3g} Monte-Carlo standard errors",
                detail=r"Monte-Carlo mean of $\frac1d\E\tr(I-\eta S)^{2k}$ at the step "
                       rf"$\eta = 2/(\lambda_+ + \lambda_-) = {r_['eta']:.4g}$ that balances the edges, against "
                       rf"$\rho_{{\rm MP}}^{{2k}}$ (`companion.cot.theory.mp.mp_rate`); band {Z_LEVEL:.3g} SE plus the round-off floor "
                       rf"${tex_number(ROUNDOFF)}$.")
    v.qualitative("cot41_regime_decay",
                  quantity=rf"largest ratio $(\mathrm{{err}}(d') + z\,\mathrm{{SE}}) / (\mathrm{{err}}(d) - z\,\mathrm{{SE}})$, $z = {Z_LEVEL:.3g}$, "
                           r"over consecutive $d < d'$ of `d_regime`",
                  predicted=1.0, measured=regime_decay_ratio(regime), comparison="upper", tolerance=0.0,
                  falsifier=REGIME_DECAY.falsifier, falsifier_value=regime_no_decay_ratio(regime),
                  reason=rf"the error must fall at every step of $d$ by more than {Z_LEVEL:.3g} standard errors on each side",
                  detail="The falsifier's value is the same statistic with each error equal to the one before "
                         f"(with its own standard error): above 1 by the {Z_LEVEL:.3g}-SE margins (`regime_no_decay_ratio`).",
                  undecided=regime_unresolved(regime))


def figures(ode: dict, fin: dict, flow: dict, runs, pred_mean: float, regime: list, *, eta_ode: float, k_ode: int,
          eta: float, d: int, n: int, d_flow: int, shown=None):
    r"""``fig_cot_thm41_ode``, ``_flow``, ``_weights``, ``_regime``: the four figures of :prf:ref:`cot-thm-4-1`.

    In order: the reduced flow and the distance to the construction; the restricted matrix flow and
    full-parameter training (one line per seed); the trained weights of ``shown`` (default replicate 0; the page
    passes a replicate that left the zero saddle, where :math:`W_{24} \ne 0`), rescaled by :math:`c = -W_{24}`; the
    regime :math:`n \sim d\log d`, :math:`k \sim \log d`.

    Returns
    -------
    tuple
        the four figures, in that order.
    """
    fig, (ax0, ax1) = new_figure(ncols=2, width=3.6, height=3.1)
    tt = ode["t"] <= 2 * ode["t_half"] + 5 / ode["mu"]
    ax0.plot(ode["t"][tt], ode["v"][tt], label="v(t)")
    ax0.plot(ode["t"][tt], ode["w"][tt], label="w(t)")
    ax0.plot(ode["t"][tt], ode["veq"][tt], "k--", lw=0.8, label=r"$v_{\rm eq}(w(t))$")
    ax0.axvline(ode["t1"], color="0.5", lw=0.8, ls=":")
    ax0.axhline(-eta_ode, color="C0", lw=0.6, ls=":")
    ax0.axhline(1, color="C1", lw=0.6, ls=":")
    ax0.set_ylim(-eta_ode - 0.15, 1.15)
    ax0.set_xlabel("t")
    ax0.set_title(rf"(a) $n\to\infty$, $\eta$={eta_ode:g}, k={k_ode}")
    legend_outside(ax0, "below")
    dist0 = np.hypot(ode["v"] + eta_ode, ode["w"] - 1)
    ax1.semilogy(ode["t"], dist0, label="reduced, n→∞")
    ax1.semilogy(ode["t"], 1e-3 * np.exp(-ode["mu"] * (ode["t"] - ode["t2"])), "k:", lw=0.8, label=r"rate $\mu$")
    unstable = " (GD unstable)"
    dist_fin = np.hypot(fin["v"] + eta, fin["w"] - 1)
    dist_flow = np.maximum(np.abs(flow["Vu"] + eta * np.eye(d_flow)).max(axis=(1, 2)),
                           np.abs(flow["Wu"] - np.eye(d_flow)).max(axis=(1, 2)))
    ax1.semilogy(fin["t"], dist_fin, label=f"reduced, d={d}, n={n}" + ("" if fin["hypothesis"] else unstable))
    ax1.semilogy(flow["t"], dist_flow, "--", label=f"matrix flow, d={d_flow}" + ("" if flow["hypothesis"] else unstable))
    ax1.set_ylim(1e-10, max(3.0, 2 * float(np.nanmax(np.concatenate([dist_fin, dist_flow])))))
    ax1.set_xlabel("t")
    ax1.set_ylabel("distance to the construction")
    ax1.set_title("(b) convergence (stage 2)")
    legend_outside(ax1, "below", ncol=2 if fin["hypothesis"] and flow["hypothesis"] else 1)

    fig2, (ax2, ax3) = new_figure(ncols=2, width=3.6, height=3.1)
    for j in range(d_flow):
        ax2.plot(flow["t"], flow["Vu"][:, j, j], color="C0", lw=0.9)
        ax2.plot(flow["t"], flow["Wu"][:, j, j], color="C1", lw=0.9)
    ax2.plot([], [], color="C0", label=r"eig. of $V_{31}$")
    ax2.plot([], [], color="C1", label=r"eig. of $W_{13}$")
    ax2.set_xlabel("t")
    ax2.set_title(f"(a) matrix flow, d={d_flow}")
    legend_outside(ax2, "below", ncol=1)
    curves = np.asarray(runs.eval_loss).reshape(len(runs.steps), -1)
    ax3.semilogy(runs.steps, curves, color="C0", lw=0.8)
    ax3.plot([], [], color="C0", label=f"trained, eval. loss (7), {curves.shape[1]} seeds")
    ax3.axhline(pred_mean, color="k", ls="--", lw=0.8, label="k GD steps")
    ax3.axhline(no_cot.no_cot_floor(d, n), color="k", ls=":", lw=0.8, label="no-CoT floor")
    ax3.set_xlabel("Adam step")
    ax3.set_title("(b) full-parameter training")
    legend_outside(ax3, "below", ncol=1)

    res = runs.replicate(0) if shown is None else shown
    c = float(-blocks(res.W_KQ, d)["24"][0, 0])
    fig3, axs = new_figure(ncols=2, width=3.4, height=3.1)
    for ax, M, title in ((axs[0], res.W_KQ.numpy() / c, r"(a) $W^{KQ}$ / c"), (axs[1], res.W_PV.numpy() * c, r"(b) $W^{PV}$ · c")):
        lim = np.abs(M).max()
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        fig3.colorbar(im, ax=ax, shrink=0.75)
        for r_ in (d - 0.5, d + 0.5, 2 * d + 0.5):
            ax.axhline(r_, color="k", lw=0.4)
            ax.axvline(r_, color="k", lw=0.4)
        ax.set_title(title)
        ax.grid(False)
        ax.set_xticks([])
        ax.set_yticks([])

    fig4, ax4 = new_figure(width=4.2, height=3.0)
    ds = [r_["d"] for r_ in regime]
    ax4.errorbar(ds, [r_["err"] for r_ in regime], yerr=[2 * r_["se"] for r_ in regime], fmt="o-", ms=4,
                 label=r"$E\,\mathrm{tr}(I-\eta S)^{2k}/d$ (MC, ±2 SE)")
    ax4.plot(ds, [r_["bound"] for r_ in regime], "s--", ms=4, mfc="none", label=r"$\rho_{\rm MP}^{2k}$")
    ax4.set_xscale("log", base=2)
    ax4.set_yscale("log")
    ax4.set_xlabel(r"d  (n = ⌈$c_n$ d ln d⌉, k = ⌈$c_k$ ln d⌉)")
    ax4.set_ylabel("error per coordinate")
    legend_outside(ax4, "below", ncol=1)
    return fig, fig2, fig3, fig4
