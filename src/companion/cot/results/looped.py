r"""Looped transformers (:prf:ref:`cot-prop-looped`, notebook ``cot/looped``): the same layer applied k times.

Part (a): the optimal loop step :math:`c_k = \arg\min_c\E\tr(I-cS)^{2k}` with :math:`W_{13} = I`, on an
importance-weighted spectrum sample, against the exact quartic optimum at k = 2. Part (b): the optimum
:math:`(c, b)` with a trained :math:`W_{13}` scale (:func:`looped_optima`), simulated directly
(:func:`looped_sparse_simulation`), reached by trained isotropic looped models
(:func:`looped_trained_vs_optimum`) and, the decisive claim, by looped transformers whose blocks
:math:`V_{31}, W_{13}` (:math:`2d^2` entries) are trained from random matrices through the transformer's own
gradient (:func:`train_looped_sparse`, :func:`sparse_trained_vs_optimum`). A full-parameter looped model trained
from random weights beats the one-layer floor (:func:`full_vs_floor`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.claims import ClaimSpec, ResultSpec
from companion.params import TrainingDiverged
from companion.plotting import legend_outside, new_figure
from companion.seeds import COT_EVAL, COT_ISO_EVAL, COT_PROMPTS
from companion.stats import ROUNDOFF, Z_LEVEL, combine, critical, mean_se

from ...text import tex_number
from ..data import make_generator, sample_prompts, sample_replicate_prompts
from ..grads import outcome_loss_grads
from ..model import looped_predict, per_prompt_error, sparse_parameters
from ..stats import replicate_errors, trained_vs_prediction
from ..theory import gd, loops, no_cot, wishart
from ..train import Optimizer, TrainResult, threads1, train_looped_isotropic

__all__ = ["CLAIMS", "RESULT", "loop_counts", "best_polynomial_loss", "looped_optima", "looped_sparse_simulation",
           "sparse_optimum", "looped_trained_vs_optimum",
           "ADAM_MEMORY", "ADAM_HORIZON", "SPARSE_TRAIN", "NO_ROTATION", "train_looped_sparse", "sparse_trained_vs_optimum",
           "FULL_BATCH", "full_training_bytes", "full_vs_floor", "figure", "manifest",
           "record_part_a", "record_part_b", "record_full", "sparse_words"]

W13_FIXED = r"$W_{13} = I$ is as good: the loss at $c_k$"
ISO_BEST = r"the isotropic optimum (b) is the sparse blocks' optimum: its loss"
CLAIMS = (
    ClaimSpec("cotloop_c2", "statistical", "monte_carlo", prediction="companion.cot.theory.loops.looped_optimum_exact_k2",
              falsifier=r"the one-layer step $\eta^\star$ is also optimal for two loops"),
    ClaimSpec("cotloop_L2", "statistical", "monte_carlo", prediction="companion.cot.theory.loops.looped_optimum_exact_k2",
              falsifier="looping buys nothing: the one-layer floor"),
    ClaimSpec("cotloop_two_param_sim", "statistical", "monte_carlo",
              prediction="companion.cot.theory.loops.looped_two_param_optimum", falsifier=W13_FIXED),
    ClaimSpec("cotloop_trained_optimum", "statistical", "reduced", headline=True,
              prediction="companion.cot.theory.loops.looped_two_param_optimum", falsifier=W13_FIXED),
    ClaimSpec("cotloop_trained_sparse", "statistical", "trained", headline=True,
              prediction="companion.cot.results.looped.sparse_optimum",
              falsifier=r"the isotropic optimum (b) where a rotation lowers the loss, else $W_{13} = I$ at $c_k$",
              alternatives=(ISO_BEST, W13_FIXED)),
    ClaimSpec("cotloop_trained", "bound", "trained", prediction="companion.cot.theory.no_cot.no_cot_floor",
              falsifier="looping does not help: the floor",
              undecided="the full models were still training: their error on the check prompts fell from four fifths of "
                        "their steps to the end by more than the level's standard errors of the paired drop and by more "
                        "than the claim's own band (`full_vs_floor`)"),
)

RESULT = ResultSpec(paper="cot", number="Looped transformers (number uncertain)",
                    title="looping vs one layer vs CoT", label="cot-prop-looped", notebook="cot/looped",
                    module=__name__, claims=CLAIMS, figures=("fig_cot_looped",), sweep="")


def manifest() -> list[str]:
    """The claim ids the notebook records (none depends on the parameters)."""
    return [c.id for c in CLAIMS]


def loop_counts(k_check: int, k_max: int) -> np.ndarray:
    """The loop counts k shown and optimised: 1, 2, ``k_check``, ``k_max`` and ten geometrically spaced in between."""
    return np.unique(np.concatenate([[1, 2, k_check, k_max], np.round(np.geomspace(1, k_max, 10))])).astype(int)


def best_polynomial_loss(k: int, d: int, n: int) -> float:
    r"""The smallest error of any estimate :math:`\hat w = (I - q(S))\wstar` with q a polynomial of degree at most k,
    :math:`q(0) = 1` (:prf:ref:`cot-prop-looped`): :math:`\min_q \E\tr q(S)^2`, a quadratic in the coefficients of q
    whose matrix :math:`M_{ij} = \E\tr S^{i+j}` holds the exact moments of
    :func:`companion.cot.theory.wishart.wishart_trace_moments`.

    k GD steps with any step sizes, and every looped model of parts (a) and (b) (whose
    :math:`\hat w_k = b(I - (I - cS)^k)\wstar`), are such estimates, so none has a smaller error. The bound does not
    cover the blocks with a rotation of part (c), whose error matrix is not a polynomial in S, nor a looped model that
    moves the data columns."""
    m = wishart.wishart_trace_moments(2 * k, d, n)
    mu = [m[p] / n**p for p in range(2 * k + 1)]
    M = np.array([[mu[i + j] for j in range(1, k + 1)] for i in range(1, k + 1)])
    v = np.array(mu[1 : k + 1])
    c = np.linalg.solve(M, -v)
    return float(mu[0] + v @ c)


def looped_optima(ks, eigs: np.ndarray, eis: np.ndarray, wis: np.ndarray) -> tuple[dict, dict]:
    """Parts (a) and (b) of :prf:ref:`cot-prop-looped` for every k in ``ks``: (a) on the importance-weighted sample
    (``eis``, ``wis``: :func:`companion.cot.theory.loops.looped_is_optimum`, ``(c_k, se, loss, se)``), (b) on the plain
    sample ``eigs`` (:func:`companion.cot.theory.loops.looped_two_param_optimum`, ``(c, b, loss)``)."""
    return ({int(k): loops.looped_is_optimum(int(k), eis, wis) for k in ks},
            {int(k): loops.looped_two_param_optimum(int(k), eigs) for k in ks})


def looped_sparse_simulation(d: int, n: int, k: int, c: float, b: float, eigs: np.ndarray, num: int,
                             seed: int) -> tuple[tuple[float, float], tuple[float, float]]:
    r"""The sparse looped LSA at :math:`V_{31} = -cb\,I`, :math:`W_{13} = I/b`, :math:`W_{24} = -1` run directly on ``num``
    fresh prompts, and the prediction :math:`\E\sum_j(1-bh_j)^2`, :math:`h_j = 1-(1-c\lambda_j)^k`, on the spectra
    ``eigs``. Returns ``((mean, se) simulated, (mean, se) predicted)``."""
    W_KQ, W_PV = sparse_parameters(-c * b * np.eye(d), np.eye(d) / b, -1.0)
    with threads1(), torch.no_grad():
        pr = sample_prompts(num, d, n, make_generator(seed))
        sim = mean_se(per_prompt_error(looped_predict(pr, W_KQ, W_PV, k), pr).numpy())
    return sim, mean_se(loops.looped_two_param_errors(c, b, k, eigs))


#: the largest rotation :math:`|\beta|` (relative to the step a) that :func:`sparse_optimum` counts as none: the
#: search ends at :math:`|\beta|` below :math:`10^{-4}a` at k = 2 and near a quarter of a at k = 3, wherever run
NO_ROTATION = 1e-3


def sparse_optimum(k: int, S: np.ndarray, iso: tuple[float, float], iso_pred: tuple[float, float]) -> dict:
    r"""The optimum of the sparse looped model's blocks :math:`W_{13}, V_{31}` at k loops (:prf:ref:`cot-prop-looped`),
    on the sample ``S`` of matrices :math:`S = XX^\T/n`: the best blocks with a rotation
    (:func:`companion.cot.theory.loops.looped_rotation_optimum`, started from the isotropic optimum ``iso`` =
    :math:`(c, b)` of part (b) on the spectra of the same matrices), or the isotropic optimum itself.

    The rule, fixed before any run: the rotation is the optimum where its search leaves the isotropic blocks, at a
    rotation :math:`|\beta|` above :data:`NO_ROTATION` times its step a; elsewhere the isotropic optimum, whose loss
    is then ``iso_pred`` = (loss, se), part (b)'s on the spectra of the same matrices (:func:`looped_sparse_simulation`).
    The rule reads where the search ends, not how much the rotation gains on the sample: on a small sample with a
    heavy tail the gain can fall within its standard error although the trained models find the rotation. ``gain``
    (the isotropic model's error minus the rotation's, matrix by matrix,
    :func:`companion.cot.theory.loops.looped_sparse_errors`) is reported.

    Returns
    -------
    dict
        ``pred`` (loss, se) of the optimum on the sample, ``rotates`` (bool), ``gain`` (mean, se), ``iso`` (loss, se)
        of the isotropic optimum, ``rot``, the rotation optimum's dictionary (``Q``, ``A``, ``a``, ``beta``, ...),
        and the blocks :math:`(V_{31}, W_{13})` of the optimum (``blocks``; :math:`V_{31} = AQ`,
        :math:`W_{13} = A^{-1}`) and of (b) (``iso_blocks``).
    """
    d = S.shape[-1]
    c, b = iso
    rot = loops.looped_rotation_optimum(k, S, (c, b))
    e_iso = loops.looped_sparse_errors(-c * np.eye(d), b * np.eye(d), k, S)
    gain = mean_se(e_iso - loops.looped_sparse_errors(rot["Q"], rot["A"], k, S))
    rotates = bool(abs(rot["beta"]) > NO_ROTATION * abs(rot["a"]))
    iso_blocks = (-c * b * np.eye(d), np.eye(d) / b)
    blocks = (rot["A"] @ rot["Q"], np.linalg.inv(rot["A"])) if rotates else iso_blocks
    return dict(pred=(rot["loss"], rot["se"]) if rotates else tuple(iso_pred), rotates=rotates, gain=gain,
                iso=tuple(iso_pred), rot=rot, blocks=blocks, iso_blocks=iso_blocks)


def sparse_words(opt_sp: dict, k: int) -> str:
    r"""The page's sentence on part (c) (Markdown, for ``{glue:md}``): whether the search for the blocks' optimum at ``k``
    loops leaves the isotropic optimum (b) (``opt_sp``: :func:`sparse_optimum`), with the rotation's parameters and its
    paired gain on the sample."""
    rot, (g, g_se) = opt_sp["rot"], opt_sp["gain"]
    gain = rf"a gain of ${tex_number(g, '.3g')} \pm {tex_number(g_se, '.2g')}$ on the same matrices S"
    if opt_sp["rotates"]:
        return (rf"At $k = {k}$ the blocks' optimum has a rotation: $a = {rot['a']:.3f}$, "
                rf"$\beta = \pm{abs(rot['beta']):.3f}$ reach ${rot['loss']:.4f}$ against (b)'s "
                rf"${opt_sp['iso'][0]:.4f}$, {gain}, so their loss is the prediction for the trained blocks.")
    return (rf"At $k = {k}$ the search for the blocks' optimum ends at the isotropic blocks "
            rf"($|\beta| = {tex_number(abs(rot['beta']), '.2g')}$, {gain}), so the blocks' optimum is (b), and (b)'s "
            r"loss is the prediction for the trained blocks.")


def looped_trained_vs_optimum(d: int, n: int, k: int, opt: tuple[float, float], c_a: float, *, steps: int, lr: float,
                              lr_final: float, replicates: int, num: int, seed: int) -> dict:
    r"""The trained looped model against its predicted optimum (part (b) of :prf:ref:`cot-prop-looped`), paired.

    ``replicates`` looped models on the isotropic sparse parameters are trained from random starts
    (:func:`companion.cot.train.train_looped_isotropic`, ``steps`` at least :data:`ADAM_HORIZON`); each is run as a
    real looped LSA (:func:`~companion.cot.model.looped_predict` on :func:`~companion.cot.model.sparse_parameters`)
    on its own ``num // replicates`` fresh prompts. On the same prompts run two models that no trained weight enters:
    the optimum ``opt`` = :math:`(c^\star, b^\star)` of part (b), computed on an independent sample of spectra
    (:func:`looped_optima`; the prediction), and the optimum of part (a), :math:`W_{13} = I` with the step ``c_a`` (the falsifier). The claim
    compares the trained models' mean error with the optimum model's on the same prompts: the per-prompt
    differences

    .. math:: \Delta_i = e_i(\text{trained}) - e_i(c^\star, b^\star)

    cancel the prompts' own, right-skewed, spread, and the band is the standard error of their mean
    (:func:`companion.cot.stats.trained_vs_prediction` of the differences: the replicates' spread on R - 1 degrees of
    freedom or the prompts, the wider).

    Returns
    -------
    dict
        ``dict(c, b, m)``: the trained :math:`c = -vw` and :math:`b = 1/w` per replicate; ``m``: the paired
        comparison, ``mean`` (trained), ``pred`` (the optimum model), ``falsifier`` (the part (a) model), each the
        mean error on the same prompts, and ``se``, ``dof``, ``se_from`` of the paired difference.
    """
    v, w = train_looped_isotropic(d, n, k, steps=steps, lr=lr, lr_final=lr_final, seed=seed, replicates=replicates)
    c, b = opt
    models = {"opt": sparse_parameters(-c * b * np.eye(d), np.eye(d) / b, -1.0),
              "a": sparse_parameters(-c_a * np.eye(d), np.eye(d), -1.0)}
    errs = {"trained": [], "opt": [], "a": []}
    with threads1(), torch.no_grad():
        for r in range(replicates):
            pr = sample_prompts(num // replicates, d, n, make_generator(COT_ISO_EVAL.replicate(seed, r)))
            trained = sparse_parameters(v[r] * np.eye(d), w[r] * np.eye(d), -1.0)
            for name, (W_KQ, W_PV) in dict(models, trained=trained).items():
                errs[name].append(per_prompt_error(looped_predict(pr, W_KQ, W_PV, k), pr).numpy())
    e = {name: np.stack(x) for name, x in errs.items()}  # (replicates, num // replicates) each
    paired = trained_vs_prediction(e["trained"] - e["opt"], 0.0)
    m = dict(mean=float(e["trained"].mean()), pred=float(e["opt"].mean()), falsifier=float(e["a"].mean()),
             se=paired["se"], dof=paired["dof"], se_from=paired["se_from"])
    return dict(c=-v * w, b=1 / w, m=m)


#: the memory of Adam's second moment in steps, :math:`1/(1-\beta_2)` (:class:`companion.cot.train.Optimizer`): the
#: moment averages the squared gradients over about that many steps
ADAM_MEMORY = round(1 / (1 - Optimizer.betas[1]))
#: the fewest Adam steps of the looped models trained from random starts (:func:`looped_trained_vs_optimum`,
#: :func:`train_looped_sparse`): two memories (:data:`ADAM_MEMORY`). The large gradients of the approach from the
#: start stay in the second moment for about one memory and shrink the steps near the optimum: a training that stops
#: within one memory stops short of the optimum.
ADAM_HORIZON = 2 * ADAM_MEMORY

#: the training of the sparse-block looped transformers (:func:`train_looped_sparse`), fixed at every point: ten
#: seeds (a Student-t band on their spread), Adam for four :data:`ADAM_HORIZON`, the step decayed to 0.2 %.
#: Their paired band (:func:`sparse_trained_vs_optimum`) resolves how far short of the optimum a training stops: the
#: :math:`2d^2` entries leave the isotropic blocks slowly (at k = 3 each rotation plane leaves the saddle
#: :math:`\beta = 0` at its own pace), and the minibatch noise of a larger final step keeps them off the optimum
SPARSE_TRAIN = dict(replicates=10, steps=4 * ADAM_HORIZON, batch=16, lr=0.02, lr_final=0.002)


def train_looped_sparse(d: int, n: int, k: int, *, steps: int, lr: float, lr_final: float, batch: int,
                        replicates: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Looped transformers trained on the sparse blocks of :prf:ref:`cot-prop-looped`: the whole
    :math:`(2d+2)\times(2d+2)` matrices :math:`W^{KQ}, W^{PV}` run k times as a looped LSA on the full prompt, with
    every entry held at zero except the :math:`d\times d` blocks :math:`W_{13}` and :math:`V_{31}` (trained, random
    start :math:`W_{13} = I + 0.1\,G/\sqrt d`, :math:`V_{31} = 0.1\,G'/\sqrt d`, G, G' standard Gaussian matrices) and
    :math:`W_{24} = -1` (fixed, as in parts (a) and (b)).

    The gradient is the transformer's own: the looped outcome loss of
    :func:`companion.cot.grads.outcome_loss_grads` (the ``"looped"`` objective of
    :func:`companion.cot.train.train_full`) on fresh minibatches of ``batch`` prompts, with the entries outside the
    two blocks masked, and the book's Adam (:class:`companion.cot.train.Optimizer`, learning rate decayed
    geometrically from ``lr`` to ``lr * lr_final``). Unlike the isotropic models of :func:`looped_trained_vs_optimum`
    nothing makes the blocks multiples of :math:`I`: the :math:`2d^2` entries start from random matrices, so
    reaching the isotropic optimum (b) is a result of training, not of the parametrisation. ``replicates`` models
    side by side, replicate r with its own start and minibatches (stream ``COT_PROMPTS``, replicate r); the summed
    loss gives each exactly its own gradient. Raises :class:`~companion.params.TrainingDiverged` if the loss becomes
    non-finite.

    Returns
    -------
    tuple of torch.Tensor
        ``(W_KQ, W_PV)``, each of shape (replicates, 2d+2, 2d+2).
    """
    gens = [make_generator(COT_PROMPTS.replicate(seed, r)) for r in range(replicates)]
    eye = torch.eye(d, dtype=torch.float64)
    starts = [sparse_parameters(0.1 / math.sqrt(d) * torch.randn(d, d, generator=g, dtype=torch.float64),
                                eye + 0.1 / math.sqrt(d) * torch.randn(d, d, generator=g, dtype=torch.float64))
              for g in gens]
    W_KQ, W_PV = (torch.stack([s[i] for s in starts]) for i in (0, 1))
    mask_KQ, mask_PV = sparse_parameters(np.ones((d, d)), np.ones((d, d)), 0.0)  # the trained entries
    opt = Optimizer([W_KQ, W_PV], "adam", lr, lr_final ** (1.0 / steps))
    with threads1():
        for step in range(steps):
            prompts = sample_replicate_prompts(batch, d, n, gens)
            loss, g_KQ, g_PV = outcome_loss_grads(prompts, W_KQ, W_PV, k, "looped")
            if not math.isfinite(float(loss)):
                raise TrainingDiverged(f"training of the sparse looped models diverged at step {step} with lr = {lr:g}")
            # the mean over all replicates' prompts: replicate r's own gradient is `replicates` times its share
            opt.step([g_KQ * replicates * mask_KQ, g_PV * replicates * mask_PV])
    return W_KQ, W_PV


def _optimum_blocks(opt_sp: dict, Q_like: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The blocks :math:`(V_{31}, W_{13})` of the optimum ``opt_sp`` (:func:`sparse_optimum`); a rotation optimum turned
    to the planes of ``Q_like`` (:func:`companion.cot.theory.loops.rotation_aligned`: the same expected error)."""
    if not opt_sp["rotates"]:
        return opt_sp["blocks"]
    Q, A = loops.rotation_aligned(opt_sp["rot"], Q_like)
    return A @ Q, np.linalg.inv(A)


def sparse_trained_vs_optimum(d: int, n: int, k: int, opt_sp: dict, c_a: float, *, num: int, seed: int,
                              **train) -> dict:
    r"""The decisive test of :prf:ref:`cot-prop-looped` on trained looped transformers: the blocks' optimum (c),
    paired.

    The models of :func:`train_looped_sparse` (settings ``train``, e.g. :data:`SPARSE_TRAIN`) are run as looped
    LSAs with k loops (:func:`~companion.cot.model.looped_predict`), replicate r on its own ``num // replicates``
    fresh prompts (stream ``COT_EVAL``, replicate r). On the same prompts run two models that no trained weight
    enters: the blocks' optimum ``opt_sp["blocks"]`` (:func:`sparse_optimum`, found on an independent sample of
    matrices S: the blocks with a rotation where they beat the isotropic optimum (b), else (b); the prediction) and
    the falsifier: where a rotation beats (b), (b) itself (``opt_sp["iso_blocks"]``), else part (a)'s model,
    :math:`W_{13} = I` with the step ``c_a``. The claim compares the trained models' mean error with the optimum
    model's on the same prompts, through the per-prompt differences (the band of
    :func:`companion.cot.stats.trained_vs_prediction` of the differences: the replicates' spread on R - 1 degrees of
    freedom or the prompts, the wider), as :func:`looped_trained_vs_optimum` does for the isotropic models. A rotation
    optimum's band is combined (Welch) with the Monte-Carlo error of its loss on its sample (``opt_sp["pred"][1]``):
    its blocks are fitted on whole matrices of a finite sample, where a few matrices with a large eigenvalue weigh
    heavily in the fit, so the fitted blocks' own expected error can lie measurably above the true optimum's, which
    the paired difference alone does not see. That term stands in for the fitted blocks' error, which is not
    modelled here, and is larger than it at most samples (a conservative band).

    A rotation optimum is a whole orbit :math:`(UQU^\T, UAU^\T)`, U orthogonal, of one expected error; each
    replicate is paired with the orbit point turned to the planes of its own :math:`W_{13}V_{31}`
    (:func:`companion.cot.theory.loops.rotation_aligned`). The trained weights choose only which point of the orbit,
    never the error it is expected to have: that is the optimum's loss at every point, so the comparison stays
    independent of the training, and its per-prompt errors follow the trained model's. The
    learned step :math:`c = -\tr(W_{13}V_{31})/d` and scale :math:`b = d/\tr W_{13}` are diagnostics only.

    Returns
    -------
    dict
        ``dict(c, b, m)``: ``c``, ``b`` per replicate; ``m``: ``mean`` (trained), ``pred`` (the optimum model),
        ``falsifier`` (the falsifier's model), each the mean error on the same prompts, and ``se``, ``dof``,
        ``se_from`` of the paired difference.
    """
    W_KQ, W_PV = train_looped_sparse(d, n, k, seed=seed, **train)
    R = W_KQ.shape[0]
    W13, V31 = W_KQ[:, :d, d + 1 : 2 * d + 1].numpy(), W_PV[:, d + 1 : 2 * d + 1, :d].numpy()
    falsifier = sparse_parameters(*(opt_sp["iso_blocks"] if opt_sp["rotates"] else (-c_a * np.eye(d), np.eye(d))), -1.0)
    errs = {"trained": [], "opt": [], "f": []}
    with threads1(), torch.no_grad():
        for r in range(R):
            pr = sample_prompts(num // R, d, n, make_generator(COT_EVAL.replicate(seed, r)))
            models = dict(trained=(W_KQ[r], W_PV[r]), opt=sparse_parameters(*_optimum_blocks(opt_sp, W13[r] @ V31[r]), -1.0),
                          f=falsifier)
            for name, (K, P) in models.items():
                errs[name].append(per_prompt_error(looped_predict(pr, K, P, k), pr).numpy())
    e = {name: np.stack(x) for name, x in errs.items()}  # (replicates, num // replicates) each
    paired = trained_vs_prediction(e["trained"] - e["opt"], 0.0, opt_sp["pred"][1] if opt_sp["rotates"] else 0.0)
    m = dict(mean=float(e["trained"].mean()), pred=float(e["opt"].mean()), falsifier=float(e["f"].mean()),
             se=paired["se"], dof=paired["dof"], se_from=paired["se_from"])
    c = -np.trace(W13 @ V31, axis1=1, axis2=2) / d
    b = d / np.trace(W13, axis1=1, axis2=2)
    return dict(c=c, b=b, m=m)


#: the minibatch of prompts of each full-parameter looped model (``cached_train_full(..., batch=FULL_BATCH)``)
FULL_BATCH = 64


def full_training_bytes(d: int, n: int, k: int, replicates: int, batch: int = FULL_BATCH) -> float:
    r"""Peak memory of training ``replicates`` full-parameter looped models side by side
    (:func:`companion.cot.train.train_full`): about :math:`12(k + 1)` copies of the minibatch of prompts,
    :math:`8 \cdot {\rm batch} \cdot R \cdot (2d + 2)(n + 1)` bytes each (peak resident memory measured at d = 10,
    n = 200, eight replicates: 0.88 GB at k = 3, 1.49 GB at k = 6)."""
    return 8.0 * batch * replicates * (2 * d + 2) * (n + 1) * 12 * (k + 1)


def full_vs_floor(res, d: int, n: int, k: int, num: int, seed: int, z: float = Z_LEVEL) -> dict:
    r"""The R full-parameter looped models ``res`` (trained side by side, ``replicates=R``) with k loops against the
    one-layer floor, and whether their training was still improving when it stopped.

    The claim is about *trained* models, and the training is non-convex: a plateau at the start whose length depends
    on the seed, and, on the heavy-tailed prompts of a k-loop model (its estimate is a polynomial of degree 2k + 1 in
    the data), a rare minibatch whose loss is thousands of times the rest. One such gradient fills Adam's second
    moment for thousands of steps, and the model it has thrown off stays near where it landed. So one trained model
    is no measure of what training gives: each replicate r is run on its own ``num // R`` fresh prompts (stream
    ``COT_EVAL``, :func:`companion.cot.stats.replicate_errors`), and the models' mean error is compared with the floor
    with the wider of two bands (:func:`companion.cot.stats.trained_vs_prediction`): the spread of the R training
    seeds on R - 1 degrees of freedom, or the prompts.

    The models' errors on the same prompts are also measured at the snapshot nearest to four fifths of the steps
    (``res.snapshots``): the paired drop :math:`\bar e_{4/5} - \bar e_{\rm end}` over all prompts of all replicates,
    with its standard error over them. ``still_falling`` when the drop is both real (more than ``z`` of its standard
    errors) and larger than the claim's own band (:func:`companion.stats.critical` times the standard error of the
    mean error): the last fifth of the training moved the error by more than the claim resolves, so its end is no
    settled value, and the claim is undecided (:meth:`companion.verdict.Verdict.bound`, ``undecided``), above the
    floor or below it. A drop within the band is the slow tail of a training that has settled at the claim's
    precision; with many prompts almost every drop is real, and a test of that alone would leave the claim undecided
    at every point.

    Returns
    -------
    dict
        :func:`~companion.cot.stats.trained_vs_prediction`, with ``models`` (R), ``above`` (how many replicate means
        lie above the floor), ``drop`` (mean, se), ``band`` (the claim's band), ``drop_from`` (the earlier step),
        ``drop_to`` (the last step), ``still_falling`` and ``undecided`` (the verdict's reason when still falling,
        else None).
    """
    R = res.replicates
    floor = no_cot.no_cot_floor(d, n)
    errors = replicate_errors("looped", res, k, num // R, seed)  # (R, num // R)
    out = trained_vs_prediction(errors, floor)
    steps = np.asarray(res.steps)
    i = int(np.argmin(np.abs(steps - 0.8 * steps[-1])))
    W_KQ, W_PV = (torch.from_numpy(np.asarray(w)) for w in res.snapshots[i])
    then = TrainResult(W_KQ, W_PV, steps, res.eval_loss, res.train_loss, config=res.config)
    diff = (replicate_errors("looped", then, k, num // R, seed) - errors).ravel()
    drop = mean_se(diff[np.isfinite(diff)]) if np.isfinite(diff).sum() > 1 else (math.nan, math.nan)
    band = critical(z, out["dof"]) * out["se"]
    still = bool(i < len(steps) - 1 and np.isfinite(drop[0]) and drop[0] > z * drop[1] and drop[0] > band)
    why = (f"the full models were still training: their error on the check prompts fell ${tex_number(drop[0])} \\pm "
           f"{tex_number(drop[1], '.2g')}$ from step {int(steps[i])} to step {int(steps[-1])}, more than {z:.3g} SE and "
           f"than the band ${tex_number(band)}$" if still else None)
    return dict(out, models=R, above=int((errors.mean(axis=1) > floor).sum()), drop=drop, band=band,
                drop_from=int(steps[i]), drop_to=int(steps[-1]), still_falling=still, undecided=why)


# --------------------------------------------------------------------------------------------- the verdict



def record_part_a(v, opt_a: dict, L2_is, *, c2_exact: float, L2_exact: float, eta_star: float, floor: float,
                  d: int) -> None:
    r"""Part (a) at :math:`k = 2` (:math:`W_{13} = I`): ``cotloop_c2``, the importance-weighted Monte-Carlo argmin
    :math:`c_2` (``opt_a[2]``, :func:`looped_optima`) against the exact quartic optimum ``c2_exact`` (falsifier: the
    one-layer step :math:`\eta^\star`), and ``cotloop_L2``, the weighted estimate ``L2_is`` of
    :math:`\E\tr(I-c_2S)^4` against the exact moments ``L2_exact`` (falsifier: the one-layer floor)."""
    v.statistical("cotloop_c2", quantity=r"$c_2$: importance-weighted Monte-Carlo argmin vs the exact quartic optimum",
                  predicted=c2_exact, measured=opt_a[2][0], se=opt_a[2][1], floor=ROUNDOFF,
                  falsifier=CLAIMS[0].falsifier, falsifier_value=eta_star,
                  reason=f"{Z_LEVEL:.3g} linearised standard errors of the weighted argmin (from its first two derivatives), plus "
                         "round-off",
                  detail=r"The argmin of the importance-weighted $\E\tr(I-cS)^4$ on spectra from the defensive "
                         rf"mixture $\tfrac12 W(I) + \tfrac12 W(\tau I)$, $\tau = {wishart.IS_TAU:g}$; "
                         r"by linearisation, $\mathrm{SE}(\hat c) = \mathrm{SE}(\hat F'(c))/\hat F''(c)$ (normal); the exact "
                         r"optimum from "
                         rf"the Wishart moments; round-off floor ${tex_number(ROUNDOFF)}$.")
    v.statistical("cotloop_L2", quantity=r"$\E\tr(I - c_2 S)^4$: importance-weighted Monte Carlo vs exact moments",
                  predicted=L2_exact, measured=L2_is[0], se=L2_is[1], floor=ROUNDOFF * d,
                  falsifier=CLAIMS[1].falsifier, falsifier_value=floor,
                  reason=f"{Z_LEVEL:.3g} standard errors of the weighted mean, plus round-off",
                  detail=r"The importance-weighted mean of $\tr(I - c_2 S)^4$ at the exact $c_2$ (weights bounded by "
                         rf"2, normal band) against the exact Wishart moments; round-off floor ${tex_number(ROUNDOFF * d)}$.")


def record_part_b(v, e_sim, pred_b, iso: dict, sp: dict, opt_sp: dict, *, loss_a: float, k: int, replicates: int,
                  d: int) -> None:
    r"""Part (b) at :math:`k` = ``k`` loops, against the optimum :math:`(c, b)` with a trained :math:`W_{13}` scale (the
    falsifier of each: :math:`W_{13} = I`, the loss ``loss_a`` at :math:`c_k`): ``cotloop_two_param_sim``, the sparse
    looped LSA simulated at that optimum (``e_sim``, ``pred_b``: :func:`looped_sparse_simulation`);
    ``cotloop_trained_optimum`` (a headline), ``replicates`` isotropic looped models trained from random starts
    (``iso``: :func:`looped_trained_vs_optimum`), paired with the optimum model and, its falsifier, the
    :math:`W_{13} = I` model on the same prompts; ``cotloop_trained_sparse`` (the decisive headline), looped
    transformers trained on the blocks :math:`W_{13}, V_{31}` from random matrices (``sp``:
    :func:`sparse_trained_vs_optimum`) against the sparse blocks' optimum (``opt_sp``: :func:`sparse_optimum`), whose
    falsifier is the isotropic optimum (b) where a rotation beats it, else :math:`W_{13} = I`."""
    v.statistical("cotloop_two_param_sim",
                  quantity=rf"simulated sparse looped model at the $(c, b)$ optimum, $k = {k}$",
                  predicted=pred_b[0], measured=e_sim[0], se=combine(e_sim[1], pred_b[1]), floor=ROUNDOFF * d,
                  falsifier=W13_FIXED, falsifier_value=loss_a,
                  reason=f"{Z_LEVEL:.3g} combined standard errors (simulated prompts and the independent spectrum sample)",
                  detail=r"The looped LSA at $V_{31} = -cb\,I$, $W_{13} = I/b$, $W_{24} = -1$ on fresh prompts "
                         r"against $\E\sum_j(1-bh_j)^2$, $h_j = 1-(1-c\lambda_j)^k$, on the spectra; the two "
                         rf"standard errors combined in quadrature (normal); round-off floor ${tex_number(ROUNDOFF * d)}$.")
    m = iso["m"]
    v.statistical("cotloop_trained_optimum",
                  quantity=rf"trained isotropic looped models ($k = {k}$, {replicates} seeds) vs the optimum (b), on the "
                           "same prompts",
                  predicted=m["pred"], measured=m["mean"], se=m["se"], dof=m["dof"], floor=ROUNDOFF * d,
                  falsifier=W13_FIXED, falsifier_value=m["falsifier"], headline=True,
                  reason=rf"{Z_LEVEL:.3g} SE of the paired difference, trained minus optimum model on the same prompts, "
                         rf"over {replicates} training seeds or the prompts (the wider band)",
                  detail=rf"Paired: each trained model and the optimum model $(c^\star, b^\star)$ (from the independent "
                         r"sample of spectra) run on the same fresh prompts; the falsifier, the model with $W_{13} = I$ at "
                         rf"$c_k$, on them too. Level of {Z_LEVEL:.3g} normal standard errors of the mean difference; the "
                         f"wider of two valid bands decided: {m['se_from']}; round-off floor "
                         rf"${tex_number(ROUNDOFF)}\,d = {tex_number(ROUNDOFF * d)}$.")
    R = SPARSE_TRAIN["replicates"]
    rot, ms = opt_sp["rotates"], sp["m"]
    v.statistical("cotloop_trained_sparse",
                  quantity=r"looped transformers trained on the blocks $W_{13}$, $V_{31}$ from random matrices "
                           rf"($k = {k}$, {R} seeds) vs the blocks' optimum"
                           + (" (with a rotation)" if rot else " (isotropic, (b))") + ", on the same prompts",
                  predicted=ms["pred"], measured=ms["mean"], se=ms["se"], dof=ms["dof"], floor=ROUNDOFF * d,
                  falsifier=ISO_BEST if rot else W13_FIXED, falsifier_value=ms["falsifier"], headline=True,
                  reason=rf"{Z_LEVEL:.3g} SE of the paired difference, trained minus optimum model on the same prompts, "
                         rf"over {R} training seeds or the prompts (the wider band)"
                         + (", and of the rotation optimum's loss" if rot else ""),
                  detail=r"Paired: each trained model and the blocks' optimum (found on the independent sample of "
                         r"matrices S"
                         + (r"; the point of its orbit turned to the trained $V_{31}W_{13}$'s planes, of the same "
                            r"expected error" if rot else "")
                         + r") run on the same fresh prompts; the falsifier, "
                         + ("the isotropic optimum (b)" if rot else r"the model with $W_{13} = I$ at $c_k$")
                         + rf", on them too. Level of {Z_LEVEL:.3g} normal standard errors of the mean difference; the "
                         f"wider of two valid bands decided: {ms['se_from']}"
                         + (", combined (Welch) with the Monte-Carlo error of the rotation optimum's loss on its "
                            "sample of matrices S (its blocks were fitted on it)" if rot else "")
                         + "; round-off floor "
                         rf"${tex_number(ROUNDOFF)}\,d = {tex_number(ROUNDOFF * d)}$.")


def record_full(v, tr: dict, *, floor: float, k: int, d: int) -> None:
    r"""``cotloop_trained``: the full-parameter looped models trained from random weights (``tr``:
    :func:`full_vs_floor`) below the one-layer floor ``floor``; undecided (``not_resolvable``, above the floor or
    below it) while their error was still falling (``tr["undecided"]``)."""
    v.bound("cotloop_trained", quantity=rf"trained full looped models ($k = {k}$) below the one-layer floor",
            bound=floor, measured=tr["mean"], comparison="upper", se=tr["se"], dof=tr["dof"], floor=ROUNDOFF * d,
            falsifier=CLAIMS[5].falsifier, falsifier_value=floor, undecided=tr["undecided"],
            reason=f"the floor bounds every one-layer model; {tr['models']} training seeds, {Z_LEVEL:.3g}-SE level",
            detail=r"The floor $d(d+1)/(n+d+1)$ is the smallest error of any one-layer model "
                   f"(`companion.cot.theory.no_cot.no_cot_floor`); the mean error of {tr['models']} models trained "
                   f"from independent seeds, each on its own fresh prompts, with the wider of two bands: "
                   f"{tr['se_from']} decided; {tr['above']} of the {tr['models']} models end above the floor; "
                   rf"round-off floor ${tex_number(ROUNDOFF * d)}$. Whether they were still improving: their error at "
                   rf"step {tr['drop_from']} minus at step {tr['drop_to']}, "
                   rf"${tex_number(tr['drop'][0])} \pm {tex_number(tr['drop'][1], '.2g')}$ on the same prompts, against "
                   rf"the band ${tex_number(tr['band'])}$.")


def figure(ks, opt_a: dict, opt_b: dict, eigs, eta: float, floor: float, k_check: int, full: float, rows: dict, d: int,
           n: int):
    """``fig_cot_looped``: (a) the looped optima (a), (b) against CoT with a fixed step and the one-layer floor, with the
    full-parameter looped models' mean error ``full`` at ``k_check`` (a star); (b) the optimal parameters against k
    (:func:`looped_optima` dictionaries); (c) the sparse family at ``k_check``: one row per model (``rows``: label ->
    error, top to bottom), on a linear scale that separates them."""
    fig, axes = new_figure(ncols=2, nrows=2, width=3.6, height=2.9)
    for ax in axes.flat:
        ax.remove()
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.35, 1])
    ax0, ax1 = top.subplots(1, 2)
    ax2 = bottom.subplots()
    ax0.semilogy(ks, [opt_a[k][2] for k in ks], "-o", ms=3, label=r"looped, $W_{13}=I$: $c_k$")
    ax0.semilogy(ks, [opt_b[k][2] for k in ks], "-s", ms=3, mfc="none", label=r"looped, $W_{13}$ trained")
    ax0.semilogy(ks, [gd.gd_error_mc(int(k), eta, eigs).mean for k in ks], "--", label=rf"CoT, fixed $\eta$ = {eta:g}")
    ax0.axhline(floor, color="k", ls=":", lw=1, label="one layer (floor)")
    ax0.plot([k_check], [full], ls="none", marker="*", ms=11, color="C4", label="full looped")
    ax0.set_xlabel("loops / CoT steps k")
    ax0.set_ylabel(r"$E\,\|\hat w_k - w^\star\|^2$")
    ax0.set_title(f"(a) d = {d}, n = {n}")
    ax1.errorbar(ks, [opt_a[k][0] for k in ks], yerr=[2 * opt_a[k][1] for k in ks], fmt="-o", ms=3, label=r"$c_k$ ($W_{13}=I$)")
    ax1.plot(ks[1:], [opt_b[int(k)][0] for k in ks[1:]], "-s", ms=3, mfc="none", label=r"$c$ ($W_{13}$ trained)")
    ax1.plot(ks[1:], [opt_b[int(k)][1] for k in ks[1:]], "-^", ms=3, mfc="none", label=r"$b^\star = 1/w$")
    ax1.axhline(no_cot.eta_star(d, n), color="k", ls=":", lw=1, label=r"$\eta^\star$")
    ax1.set_xlabel("loops k")
    ax1.set_title("(b) optimal parameters")
    legend_outside(ax0, "below", ncol=2)
    legend_outside(ax1, "below", ncol=2)
    y = np.arange(len(rows))[::-1]
    ax2.plot(list(rows.values()), y, ls="none", marker="o", ms=6, color="C0")
    ax2.set_yticks(y, list(rows))
    ax2.set_ylim(-0.6, len(rows) - 0.4)
    ax2.set_xlabel(r"$E\,\|\hat w_k - w^\star\|^2$")
    ax2.set_title(f"(c) the sparse family at k = {k_check}")
    return fig
