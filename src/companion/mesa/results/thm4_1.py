r"""Theorem 4.1 of the mesa paper, emergence of the mesa-optimizer (notebook ``mesa/thm4_1_emergence``).

The theorem: from the diagonal initialisation the gradient flow stays on the diagonal red-block manifold,
:math:`a^2-b^2` is conserved and :math:`ab\to c^*=\beta/\alpha`. What the page checks, and where:

* the gradient flow against its closed-form limits (:func:`flow_limit_error`);
* the exact invariance of the manifold (:func:`invariance`);
* the runs of the page: every setting from every init (Fig. 1a/1c) and the replicate sets of each claim, with the
  replicate rule of each setting (:func:`design`; the step-size checks and the paper's run plan read the same);
* trained :math:`ab` extrapolated in m against the population GD (:func:`replicates`, which runs
  :func:`companion.mesa.evidence.extrapolated_ab` per law and scale, the Gaussian replicates on training sets
  tilted by :data:`companion.mesa.evidence.GAUSSIAN_TILT`, with the control variates of
  :func:`x1_controls`), with what the extrapolation leaves of the off-manifold feedback as a measured systematic
  error (:func:`companion.mesa.evidence.offmanifold_residual`), and the one-step-GD deviation;
* the noise model's numbers quoted on the page (:func:`noise_numbers`, :func:`moment_ratio_rel_se`), and those of
  the settings the text names (:func:`quoted_settings`: :func:`offmanifold_numbers`, :func:`band_numbers`);
* the verdict's records (:func:`record_population`, :func:`record_ab`, :func:`record_one_step`);
* Fig. 1a/1c (:func:`ab_curves`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import factorial2

from companion import stats
from companion.claims import ClaimSpec, ResultSpec
from companion.mesa import paper
from companion.mesa import theory as th
from companion.mesa.analysis import gradient_blocks
from companion.mesa.data import generate
from companion.mesa.empirical import exact_population
from companion.mesa.evidence import (
    FALSIFIER_INDEPENDENT,
    FALSIFIER_T_INFINITY,
    GAUSSIAN_TILT,
    SETTING_STRIDE,
    ExtrapolatedAb,
    Extrapolation,
    Replicates,
    extrapolated_ab,
    offmanifold_floor,
    offmanifold_words,
    population_ab,
)
from companion.mesa.figures import POPULATION, TRAINED, init_label
from companion.mesa.train import run
from companion.plotting import COLORS, legend_outside, new_figure
from companion.seeds import MESA_TRAIN_DATA, replicate_seed
from companion.stats import Z_LEVEL
from companion.text import number_tag

__all__ = ["CLAIMS", "RESULT", "GAUSSIAN_TILT", "SETTING_STRIDE", "tag", "manifest", "Setting", "Design", "design", "paper_design", "paper_runs",
           "figure_runs", "AbClaim", "replicates", "control_coefficients",
           "x1_controls", "noise_numbers", "quoted_settings", "offmanifold_numbers", "band_numbers",
           "flow_limit_error", "Invariance", "invariance", "moment_ratio_rel_se", "record_population", "record_ab",
           "record_one_step", "ab_curves"]

_ONE_STEP_FALSIFIER = "the trained model is not one-step GD (deviation independent of $m$)"


CLAIMS = (
    ClaimSpec("flow_limit", "numerics", "ode", prediction="companion.mesa.theory.limits"),
    # the theorem's 0 (the closed-form off-diagonal gradient of a sign-symmetric law), by an exact phase-grid expectation
    ClaimSpec("invariant_{law}", "numerics", "closed_form", prediction="companion.mesa.theory.offdiag_gradient"),
    ClaimSpec("ab_{law}_{s}", "statistical", "trained", headline=True,
              prediction="companion.mesa.evidence.population_ab",
              falsifier=r"the $T\to\infty$ constant $m_4/m_6$ ($m_{24} > 0$) or independent coordinates "
                        r"($m_{24} = m_2 m_4$)",
              alternatives=(FALSIFIER_T_INFINITY, FALSIFIER_INDEPENDENT)),
    # the bound 0: the deviation from the one-step-GD formula shrinks with m
    ClaimSpec("one_step_scaling", "bound", "trained", prediction="companion.mesa.theory.one_step_gd_predict",
              falsifier=_ONE_STEP_FALSIFIER),
)

RESULT = ResultSpec(paper="mesa", number="Theorem 4.1", title="emergence of the mesa-optimizer",
                    label="mesa-thm-4-1", notebook="mesa/thm4_1_emergence", module=__name__, claims=CLAIMS,
                    figures=("fig_mesa_fig1a", "fig_mesa_fig1c"), sweep="")


def tag(law, s) -> str:
    """The claim id of the trained ab of a law and scale: ``ab_gaussian_0p5``."""
    return f"ab_{law}_{number_tag(s)}"


def manifest(rep: dict) -> list[str]:
    """The claim ids the page's verdict declares, for the replicates ``rep`` of :func:`replicates`."""
    return ["flow_limit", "invariant_gaussian", "invariant_sparse", "one_step_scaling"] + [tag(*k) for k in rep]


@dataclass(frozen=True)
class Setting:
    """One trained setting of the page: a law at a scale, its step size, and the parameter that sets that step size
    (``lrs_gauss`` or ``lrs_sparse``, named when :func:`companion.mesa.stability.check_runs` refuses it)."""

    law: str
    scale: float
    lr: float
    param: str


@dataclass(frozen=True)
class Design:
    """Every training run of the page (:func:`design`): the figure runs, every setting from every init with the
    sizes and seed of ``common``; and per setting the replicate training sets of its ``ab_*`` claim
    (:class:`companion.mesa.evidence.Replicates`, from the middle init). ``s_mid``: the Gaussian scale whose
    replicates also measure the one-step-GD deviation."""

    settings: tuple[Setting, ...]
    inits: tuple[tuple[float, float], ...]
    common: dict
    s_mid: float | None
    replicates: dict

    @property
    def init_mid(self) -> tuple[float, float]:
        """The middle init, from which the replicates train."""
        return self.inits[len(self.inits) // 2]

    def figure(self) -> dict:
        """The figure runs as keyword arguments of :func:`companion.mesa.train.run`, by ``(law, s, a0, b0)``."""
        return {(st.law, st.scale, a0, b0): dict(law=st.law, scale=st.scale, a0=a0, b0=b0, lr=st.lr, **self.common)
                for st in self.settings for a0, b0 in self.inits}

    def runs(self) -> list[dict]:
        """Every run of the page, as keyword arguments of :func:`companion.mesa.train.run`."""
        return [kw for kw, _, _ in self._labelled()]

    def checked_runs(self) -> list[dict]:
        """Every run with the step-size parameter that sets its step (``param``) and the run in words (``what``): the
        input of :func:`companion.mesa.stability.check_runs`."""
        return [dict(kw, param=param, what=what) for kw, param, what in self._labelled()]

    def _labelled(self):
        figure = self.figure()
        for st in self.settings:
            yield from ((figure[st.law, st.scale, a0, b0], st.param, "figure run") for a0, b0 in self.inits)
            rep = self.replicates[st.law, st.scale]
            for half in (rep.big, rep.small):
                yield from ((kw, st.param, f"replicate {k + 1} of {rep.n_rep}") for k, kw in enumerate(half))


def design(sigmas, lrs_gauss, cs, lrs_sparse, inits, d: int, T: int, m: int, m_test: int, epochs: int, seed: int,
           m_rep: int, n_rep: int, n_rep_dev: int, m_rep_sparse: int | None = None,
           n_rep_sparse: int | None = None) -> Design:
    """The runs of the page: every (law, scale) of the Gaussian scales ``sigmas`` and the sparse scales ``cs`` (with
    their step sizes) from every init at m (the figures), and the replicate design behind each ``ab_*`` claim, from
    the middle init: ``n_rep`` training sets at ``m_rep`` and ``m_rep/4``; ``n_rep_dev`` of each for the Gaussian
    middle scale (whose replicates also measure the one-step-GD deviation); for the sparse law, when
    ``n_rep_sparse`` is given, ``n_rep_sparse`` at ``m_rep_sparse`` and ``m_rep_sparse/4`` (its ab has no moment
    noise: small sets suffice). The Gaussian middle scale draws its sets from the page's seed (Theorem 4.2's Gaussian
    replicates at the paper's settings are among them); every other setting from its own base seed
    (:data:`~companion.mesa.evidence.SETTING_STRIDE`): the same draws rescaled would make the scales' claims
    one measurement read several times (once trained to the limit, their z coincide)."""
    settings = tuple(Setting(law, s, lr, param) for law, scales, lrs, param in
                     (("gaussian", sigmas, lrs_gauss, "lrs_gauss"), ("sparse", cs, lrs_sparse, "lrs_sparse"))
                     for s, lr in zip(scales, lrs))
    inits = tuple(tuple(ini) for ini in inits)
    a0, b0 = inits[len(inits) // 2]
    s_mid = sigmas[len(sigmas) // 2] if len(sigmas) else None
    reps = {}
    others = 0
    for st in settings:
        sparse = st.law == "sparse" and n_rep_sparse is not None
        mid = (st.law, st.scale) == ("gaussian", s_mid)
        n = n_rep_sparse if sparse else n_rep_dev if mid else n_rep
        mr = m_rep_sparse if sparse and m_rep_sparse is not None else m_rep
        others += not mid
        base = seed if mid else replicate_seed(seed, SETTING_STRIDE * others)  # independent sets per setting
        reps[st.law, st.scale] = Replicates(st.law, st.scale, d, T, a0, b0, st.lr, epochs, mr, n, base,
                                            tilt=GAUSSIAN_TILT if st.law == "gaussian" else 0)
    return Design(settings, inits, dict(d=d, T=T, m=m, m_test=m_test, epochs=epochs, seed=seed), s_mid, reps)


def paper_design() -> Design:
    """:func:`design` at the paper's settings (:mod:`companion.mesa.paper`, the page's defaults)."""
    g, s, rep = paper.TABLE1["gaussian"], paper.TABLE1["sparse"], paper.REPLICATES
    return design([x for x, _ in g], [lr for _, lr in g], [x for x, _ in s], [lr for _, lr in s], paper.INITS,
                  **paper.COMMON, m_rep=rep["m_rep"], n_rep=rep["n_rep"], n_rep_dev=rep["n_rep_dev"],
                  m_rep_sparse=rep["m_rep_sparse"], n_rep_sparse=rep["n_rep_sparse"])


def paper_runs() -> list[dict]:
    """Every run of the page at the paper's settings (:func:`paper_design`)."""
    return paper_design().runs()


def figure_runs(design: Design) -> dict:
    """The runs of Fig. 1a/1c, ``runs[law, s, a0, b0]``: every setting of the ``design`` from every init
    (:func:`companion.mesa.train.run`, cached)."""
    return {key: run(**kw) for key, kw in design.figure().items()}


@dataclass(frozen=True)
class AbClaim:
    """The evidence of one ``ab_*`` claim (:func:`replicates`): the control-variate estimate extrapolated in m
    (``measured``, ``se``, ``dof``; ``mean_big``, ``mean_small``, ``se_big``, ``se_small`` of the two sizes, ``k_big``,
    ``k_small`` controls used; :func:`companion.stats.controlled_richardson`), the plain Richardson estimate ``raw``
    and the replicates behind both (``replicates``: prediction, falsifier, floor, off-manifold residual, the
    one-step-GD deviation of the Gaussian middle scale)."""

    measured: float
    se: float
    dof: float
    mean_big: float
    mean_small: float
    se_big: float
    se_small: float
    k_big: int
    k_small: int
    raw: Extrapolation
    replicates: ExtrapolatedAb


def replicates(design: Design, m_eval: int = 300) -> dict:
    """The evidence of the ``ab_*`` claims, ``rep[law, s]`` (:class:`AbClaim`): the replicates of every setting of the ``design``
    extrapolated in m (:func:`companion.mesa.evidence.extrapolated_ab`, with what the extrapolation leaves of the
    off-manifold feedback), and for the Gaussian middle scale the one-step-GD deviation on ``m_eval`` fresh sequences
    (claim ``one_step_scaling``).

    Each size's mean is the control-variate mean of :func:`companion.stats.controlled_richardson` with the
    controls :func:`x1_controls` of the replicates' training sets and the fixed coefficients
    :func:`control_coefficients` (exactly unbiased for any coefficients). The plain Richardson estimate is
    ``raw``."""
    out = {}
    for (law, s), rp in design.replicates.items():
        n = rp.n_rep
        q = extrapolated_ab(rp, m_eval=m_eval if (law, s) == ("gaussian", design.s_mid) else 0, offmanifold=True)
        cb = x1_controls(law, s, rp.d, rp.T, rp.sets[:n], rp.tilt)
        cs = x1_controls(law, s, rp.d, rp.T, rp.sets[n:], rp.tilt)
        ctl = stats.controlled_richardson(q.big, q.small, cb, cs,
                                          coef=control_coefficients(law, s, rp.d, rp.T, rp.a0, rp.b0, rp.lr, rp.epochs))
        raw = Extrapolation(q.measured, q.se, q.dof, q.mean_big, q.mean_small)
        out[law, s] = AbClaim(**ctl, raw=raw, replicates=q)
    return out


def control_coefficients(law, scale: float, d: int, T: int, a0: float, b0: float, lr: float, epochs: int,
                         rel: float = 1e-4) -> np.ndarray:
    r"""Fixed coefficients of the controls :func:`x1_controls`: the sensitivity of the population-GD ab after
    ``epochs`` steps to the scale-1 moments :math:`(m_4, m_6)` of the law, through :math:`\beta=N m_4 s^4` and
    :math:`\alpha=N m_6 s^6+(d-1)H_{T-2}m_{24}s^6`, by central differences (relative step ``rel``):
    :math:`g=\partial ab_E/\partial(m_4,m_6)`. It only sets how much of the spread the controls remove: the
    controlled mean :math:`\overline{ab-Xg}` is unbiased for any fixed g, because :math:`E X=0` exactly.
    Returns (2,)."""
    mo = th.moments(law, 1.0, d)
    N = T - 2
    H = th.harmonic(N)

    def ab_end(m4: float, m6: float) -> float:
        al = (N * m6 + (d - 1) * H * mo.m24) * scale**6
        return float(th.reduced_gd(a0, b0, lr, epochs, al, N * m4 * scale**4)[2][-1])

    g = []
    for k, base in enumerate((mo.m4, mo.m6)):
        h = rel * base
        up = [mo.m4, mo.m6]
        dn = [mo.m4, mo.m6]
        up[k] += h
        dn[k] -= h
        g.append((ab_end(*up) - ab_end(*dn)) / (2 * h))
    return np.array(g)


def x1_controls(law, scale: float, d: int, T: int, sets, tilt: int = 0) -> np.ndarray:
    r"""Control variates of the training sets ``sets`` ((m, seed) of each run; the sets of
    :func:`companion.mesa.train.run`, regenerated from their seeds): the pooled sample moments of the initial
    tokens minus the law's exact moments, at scale 1,

    .. math:: X=\big(\hat m_4-m_4,\ \hat m_6-m_6\big),\qquad
              \hat m_p=\frac1{md}\sum_{n,j}(x_{1,nj}/s)^p ,

    whose expectation is exactly 0 for every law (they are statistics of :math:`x_1` alone: no phase, no
    model, no claim of the theorem enters); for tilted sets (``tilt``, :func:`companion.mesa.data.generate`) the
    means are importance-weighted, :math:`\hat m_p=\frac1{md}\sum_{n,j}w_n(x_{1,nj}/s)^p`, with the same exact
    expectation. The trained ab depends on the sample through :math:`\hat m_4/\hat m_6`
    to first order (the reduced loss), so for the Gaussian these two explain most of its spread. Returns (R, 2)."""
    mo = th.moments(law, 1.0, d)
    out = []
    for m, sd in sets:
        data = generate(law, int(m), d, T, 1.0, MESA_TRAIN_DATA.rng(sd), torch.complex128, tilt)
        x = data.x1.real.numpy()
        w = np.ones(len(x)) if data.w is None else data.w.numpy()
        x2 = x * x
        out.append([float((w[:, None] * x2 * x2).mean()) - mo.m4, float((w[:, None] * x2 * x2 * x2).mean()) - mo.m6])
    return np.array(out)


def noise_numbers(dev: AbClaim, m: int, d: int) -> dict:
    """The numbers of the page's noise model (by the names the page glues them under), from the evidence ``dev`` of
    the Gaussian middle scale: the
    standard error in % of c*, the finite-m bias at m_rep and m_rep/4 (in %) and their ratio (4 for a 1/m law),
    the Student-t bands and false-alarm rates of ``Z_LEVEL`` standard errors, and the delta-method SE of m4/m6."""
    q = dev.replicates
    return dict(
        se_pct=float(100 * dev.se / q.cstar),
        crit4=stats.critical(stats.Z_LEVEL, 4), crit10=stats.critical(stats.Z_LEVEL, 10),  # the band of 4 dof and of 10, at the level
        alarm4=100 * stats.false_alarm(stats.Z_LEVEL, 4), alarm_normal=100 * stats.false_alarm(stats.Z_LEVEL),  # % false alarms of Z_LEVEL SE, 4 dof and normal
        delta_pct=100 * moment_ratio_rel_se(m * d),
        bias_big=float(100 * (dev.mean_big / q.predicted - 1)),
        bias_small=float(100 * (dev.mean_small / q.predicted - 1)),
        bias_ratio=float((dev.mean_small - q.predicted) / (dev.mean_big - q.predicted)),
    )


def quoted_settings(s_mid: float, cs) -> dict[str, tuple[str, float]]:
    """The (law, scale) of the settings whose numbers the page's text quotes under fixed names: ``mid``, the
    Gaussian middle scale ``s_mid``; ``sparse``, the middle of the sparse scales ``cs`` (absent when there are
    none)."""
    out = {"mid": ("gaussian", s_mid)}
    if len(cs):
        out["sparse"] = ("sparse", cs[len(cs) // 2])
    return out


def offmanifold_numbers(rep: dict, settings: dict) -> dict:
    r"""What the extrapolation leaves of the off-manifold feedback at the quoted ``settings``
    (:func:`quoted_settings`), from the replicates ``rep`` of :func:`replicates`: ``off_ratio_<key>``, the decay
    ratio :math:`\bar o(m/4)/\bar o(m)` of the feedback (4 for a 1/m law), and ``off_r_<key>``, the residual r
    of :func:`companion.mesa.evidence.offmanifold_residual` in standard errors of the extrapolated ab, r / SE.
    Settings without replicates are left out."""
    out = {}
    for key, setting in settings.items():
        q = rep.get(setting)
        if q is not None:
            out[f"off_ratio_{key}"] = float(q.replicates.off.ratio)
            out[f"off_r_{key}"] = float(q.replicates.off.measured / q.se)
    return out


def band_numbers(rep: dict, records, settings: dict) -> dict:
    r"""The decisive numbers of the ``ab_*`` claims of the quoted ``settings`` (:func:`quoted_settings`), from the
    replicates ``rep`` of :func:`replicates` and the verdict's ``records``: with :math:`\hat x` the extrapolated ab,
    :math:`\mathrm{SE}` its standard error, :math:`x_f` the falsifier and :math:`x_p` the prediction,

    .. math:: z_{\rm fal}=\frac{|\hat x-x_f|}{\mathrm{SE}},\qquad z_{\rm th}=\frac{|\hat x-x_p|}{\mathrm{SE}},\qquad
              \mathrm{sys}=\frac{f}{\mathrm{SE}},

    (``<key>_z_fal``, ``<key>_z_th``, ``<key>_sys``), beside the record's band in standard errors (``<key>_crit``),
    its power (the falsifier's distance from the prediction :math:`|x_p-x_f|/\mathrm{SE}`, ``<key>_gap``, against
    the deviation the band detects, ``<key>_detect``, :func:`companion.stats.detectable`), its status in words
    (``<key>_status``) and its claim id (``<key>_claim``); f is the record's floor (the round-off plus what the extrapolation
    leaves of the off-manifold feedback, :func:`companion.mesa.evidence.offmanifold_floor`). Settings without a
    record are left out."""
    by_claim = {r.claim: r for r in records}
    out = {}
    for key, setting in settings.items():
        rec = by_claim.get(tag(*setting))
        if rec is None:
            continue
        q = rep[setting]
        out[f"{key}_z_fal"] = float(abs(q.measured - q.replicates.falsifier_value) / q.se)
        out[f"{key}_z_th"] = float(abs(q.measured - q.replicates.predicted) / q.se)
        out[f"{key}_crit"] = float(rec.crit)
        out[f"{key}_sys"] = float(rec.floor / q.se)
        out[f"{key}_gap"] = float(abs(q.replicates.predicted - q.replicates.falsifier_value) / q.se)
        out[f"{key}_detect"] = float(rec.detectable / q.se) if rec.detectable is not None else math.nan
        out[f"{key}_status"] = rec.status.replace("_", " ")
        out[f"{key}_claim"] = rec.claim
    return out


def flow_limit_error(law, scale: float, d: int, T: int, inits) -> float:
    r"""Max relative error of the gradient flow after 40 relaxation times of the slowest init against the
    closed-form limits (a_inf, b_inf, c*). The relaxation rate of c is alpha sqrt(Delta^2 + 4 c*^2)."""
    al, be = th.alpha_beta(law, scale, d, T)
    err = 0.0
    for a0, b0 in inits:
        la, lb = th.limits(a0, b0, be / al)
        rate = al * math.sqrt((a0**2 - b0**2) ** 2 + 4 * (be / al) ** 2)
        # from ab = a0 b0 the flow first travels to the neighbourhood of c* at speed >= |alpha ab - beta| * ...
        horizon = 40.0 / rate + 40.0 / be
        a, b, c = th.gradient_flow(a0, b0, [0.0, horizon], al, be)
        err = max(err, abs(a[-1] - la) / abs(la), abs(b[-1] - lb) / abs(lb), abs(c[-1] * al / be - 1))
    return float(err)


@dataclass(frozen=True)
class Invariance:
    """The exact population gradient at diagonal points (:func:`invariance`): the largest off-manifold entry over
    the diagonal one (``ratio``, over the points), the gradient blocks at each point (``grads``) and the size of the
    phase grid (``size``)."""

    ratio: float
    grads: list
    size: int


def invariance(law: str, d: int, T: int, points, gh_nodes: int = 4) -> Invariance:
    r"""Exact population gradient (phase grid, :func:`companion.mesa.empirical.exact_population`) at diagonal
    points (aI, bI): the largest off-diagonal red and other-block entry relative to the diagonal gradient, and
    the off-diagonal red entries themselves (:class:`Invariance`)."""
    data, w = exact_population(law, d, T, gh_nodes=gh_nodes)
    ratio, grads = 0.0, []
    for a, b in points:
        g = gradient_blocks(data, a, b, weights=w)
        diag = np.abs(g["kq_diag"]).max()
        off = max(np.abs(g["pv_off"]).max(), np.abs(g["kq_off"]).max(), np.abs(g["other"]).max())
        ratio = max(ratio, off / diag)
        grads.append(g)
    return Invariance(ratio=float(ratio), grads=grads, size=data.m)


def moment_ratio_rel_se(n: int) -> float:
    r"""Relative standard error of the empirical Gaussian moment ratio :math:`\hat m_4/\hat m_6` from ``n``
    i.i.d. draws (delta method), with :math:`E x^{2k} = (2k-1)!!\,\sigma^{2k}`:

    .. math:: \frac{\mathrm{se}}{m_4/m_6} = \sqrt{\frac1n\Big(\frac{m_8-m_4^2}{m_4^2}+\frac{m_{12}-m_6^2}{m_6^2}
              -2\,\frac{m_{10}-m_4m_6}{m_4m_6}\Big)} .
    """
    mom = {p: float(factorial2(p - 1)) for p in (4, 6, 8, 10, 12)}
    v = ((mom[8] - mom[4] ** 2) / mom[4] ** 2 + (mom[12] - mom[6] ** 2) / mom[6] ** 2
         - 2 * (mom[10] - mom[4] * mom[6]) / (mom[4] * mom[6]))
    return math.sqrt(v / n)


# ---- verdict


def record_population(v, flow_err: float, inv: dict, points) -> None:
    r"""Record the population claims in the verdict ``v``: the gradient flow of the reduced system against its
    closed-form limits :math:`(a_\infty, b_\infty, c^*)` (``flow_err`` of :func:`flow_limit_error`, Gaussian,
    :math:`\sigma = 1`), and for each law of ``inv`` (``{law: ratio}``, :func:`invariance` at :math:`d = 3`,
    :math:`T = 4` and the diagonal ``points`` :math:`(a, b)`) the exact invariance of the diagonal manifold."""
    v.numerics("flow_limit", quantity=r"gradient flow after 40 relaxation times vs closed-form "
               r"$(a_\infty, b_\infty, c^*)$, max rel. error", predicted=0.0, measured=flow_err, tolerance=1e-7,
               reason=r"DOP853 with relative tolerance $10^{-11}$",
               detail=r"`companion.mesa.theory.gradient_flow` of the reduced system (Gaussian, $\sigma = 1$) from "
                      r"every diagonal init, over 40 relaxation times $1/(\alpha\sqrt{\Delta^2 + 4c^{*2}})$ of $c$ "
                      r"plus $40/\beta$; the largest relative error of $a$, $b$ and $c\alpha/\beta$ against "
                      "`companion.mesa.theory.limits`.")
    pts = ", ".join(f"$({a:g}, {b:g})$" for a, b in points)
    for law, ratio in inv.items():
        v.numerics(f"invariant_{law}", quantity=f"{law}, $d = 3$, $T = 4$, two diagonal points: "
                   r"$|\text{off-manifold gradient}| / |\text{diagonal gradient}|$ (exact population)",
                   predicted=0.0, measured=ratio, tolerance=1e-12,
                   reason="exact phase-grid expectation: float64 round-off only",
                   detail=f"Population gradient at $(aI, bI)$ for $(a, b)$ = {pts}, averaged exactly over a grid of "
                          "phases (`companion.mesa.empirical.exact_population`; a Gaussian $x_1$ by a 4-point "
                          "Gauss–Hermite rule, exact for the degree-6 polynomials that occur); the largest "
                          "off-diagonal red or other-block entry over the largest diagonal one, maximised over "
                          "the points.")


def record_ab(v, rep: dict, a0: float, b0: float, epochs: int) -> None:
    r"""Record the headline claims ``ab_<law>_<scale>`` in the verdict ``v``: for every setting of the evidence
    ``rep`` (:func:`replicates`, init ``(a0, b0)``), the trained :math:`ab` at the last epoch extrapolated in m,
    :math:`\tfrac13(4\,\overline{ab}(m)-\overline{ab}(m/4))`, against the population GD from the same init with the
    same step and epochs, and against the same GD with the falsifier's :math:`\alpha`. The band: the Student-t
    critical value of the replicate SE plus the complex64 round-off and what the extrapolation leaves of the
    off-manifold feedback (:func:`companion.mesa.evidence.offmanifold_floor`)."""
    for (law, s), q in rep.items():
        r = q.replicates
        k = q.k_big + q.k_small
        r_se = r.off.measured / q.se
        controls = (f" Control variates $\\hat m_4 - m_4$, $\\hat m_6 - m_6$ of the training sets' initial tokens "
                    f"with fixed coefficients (`control_coefficients`): {q.k_big} at $m$, {q.k_small} at $m/4$ "
                    f"(plain Richardson estimate {q.raw.measured:.5g}, SE {q.raw.se:.3g})." if k else "")
        v.statistical(tag(law, s), quantity=f"{law} scale {s:g}, init $({a0:g}, {b0:g})$: trained $ab$ at epoch "
                      f"{epochs}, extrapolated from $m = {r.m}$ and ${r.m_small}$, vs population GD",
                      predicted=r.predicted, measured=q.measured, se=q.se, dof=q.dof,
                      floor=offmanifold_floor(r.floor, r.off),
                      falsifier=r.falsifier, falsifier_value=r.falsifier_value, headline=True,
                      reason=f"{Z_LEVEL:.3g} SE (Student-t, {q.dof:.1f} degrees of freedom) of {r.n_rep} replicate training "
                             "sets per size, extrapolated in $m$" + (" with control variates" if k else "")
                             + f"; + the measured off-manifold remnant ({r_se:+.2f} SE) and round-off",
                      detail=f"{r.n_rep} replicate training sets (independent seeds) at $m = {r.m}$ and at "
                             f"$m = {r.m_small}$; Richardson combination for a $1/m$ bias, "
                             r"$\tfrac13(4\,\overline{ab}(m) - \overline{ab}(m/4))$." + controls
                             + f" SE {q.se:.3g} from the replicate spread, Student-t at the level of {Z_LEVEL:.3g} normal SE "
                             f"on {q.dof:.1f} Welch degrees of freedom; + "
                             + offmanifold_words(r.off, se=q.se)
                             + f" + complex64 round-off ({r.floor:.2g}). The falsifier is the same population GD "
                             r"with the falsifier's $\alpha$.")


def record_one_step(v, dev: AbClaim) -> None:
    r"""Record the claim ``one_step_scaling`` in the verdict ``v``: the log2 ratio of the trained model's deviation
    from one-step GD at :math:`m/4` over that at m (the evidence ``dev`` of the Gaussian middle scale,
    :func:`replicates`) is above 0 (the deviation shrinks with m), against the falsifier 0 (it does not)."""
    r, one = dev.replicates, dev.replicates.one_step
    v.bound("one_step_scaling", quantity=f"$\\log_2$ of the trained model's deviation from one-step GD at "
            f"$m = {r.m_small}$ over $m = {r.m}$ (Gaussian, {r.n_rep} replicates each): the "
            "deviation shrinks with $m$", bound=0.0,
            measured=one.log2, comparison="lower", se=one.se, dof=one.dof, floor=0.0,
            falsifier=_ONE_STEP_FALSIFIER, falsifier_value=0.0,
            reason=f"level of {Z_LEVEL:.3g} SE; the SE from the replicate spread (propagated to first order), Student-t on "
                   f"{one.dof:.1f} Welch degrees of freedom",
            detail=f"Relative deviation of the trained predictions from one-step GD with the learned diagonals on "
                   f"fresh sequences (`companion.mesa.evidence.one_step_deviation`), mean over {r.n_rep} "
                   f"replicates per size: {one.big:.3g} at $m = {r.m}$, {one.small:.3g} at "
                   f"$m = {r.m_small}$. SE {one.se:.3g} of the $\\log_2$ ratio propagated to first order from "
                   f"the two replicate spreads, Student-t at the level of {Z_LEVEL:.3g} normal SE on {one.dof:.1f} Welch "
                   "degrees of freedom. The rate (1 for an $m^{-1/2}$ deviation) is not claimed.")


# ---- figures


def ab_curves(runs: dict, law: str, scales, inits, d: int, T: int, epochs: int, inf_line=None):
    """Fig. 1a/1c: ab per epoch of the trained runs ``runs[law, s, a0, b0]`` and of the population GD, with
    the finite-T limit c* and optionally the T -> infinity line ``inf_line(s)``."""
    fig, axes = new_figure(ncols=len(scales), width=3.0, height=3.0, squeeze=False)
    ep = np.arange(epochs + 1)
    for ax, s in zip(axes[0], scales):
        for i, (a0, b0) in enumerate(inits):
            r = runs[law, s, a0, b0]
            ax.plot(ep, r.ab, color=COLORS[i % len(COLORS)], label=f"GD, {init_label((a0, b0))}", **TRAINED)
            ax.plot(ep, population_ab(law, s, d, T, a0, b0, r.config["lr"], epochs),
                    label="population GD" if i == 0 else None, **POPULATION)
        cst = th.c_star(law, s, d, T)
        ax.axhline(cst, color="k", lw=0.8, ls="--", label="$c^*$ (finite $T$)")
        if inf_line is not None:
            ax.axhline(inf_line(s), color="0.5", lw=0.8, ls="-.", label=r"$1/(5\sigma^2)$ ($T\to\infty$)")
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_title((r"$\sigma$" if law == "gaussian" else "$c$") + f" = {s:g}:  $c^*$ = {cst:.4g}", fontsize=9)
    axes[0][0].set_ylabel("$ab$")
    legend_outside(fig, ncol=3, fontsize=8)
    return fig
