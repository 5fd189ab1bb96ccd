r"""The statistics of trained cot models that several results share: per-prompt errors and their standard errors.

Every result that trains a model (:mod:`companion.cot.results`) measures it the same way: the per-prompt
squared error :math:`\|\hat w - w^\star\|^2` on fresh prompts (:func:`model_errors`; one row per
independently seeded replicate, each on its own prompts, :func:`replicate_errors`), summarised by a mean
(:func:`trained_vs_prediction`) or, where the errors are heavy-tailed, a median (:func:`replicate_median`),
with standard errors from :mod:`companion.stats`. The noise models:

* *prompts*: the per-prompt errors of a model on i.i.d. evaluation prompts (:func:`companion.stats.mean_se`
  or, for heavy-tailed errors, :func:`companion.stats.median_se`);
* *Monte Carlo*: the independent sample behind a prediction, combined in quadrature
  (:func:`companion.stats.combine`, :func:`companion.stats.welch`);
* *seeds*: independent training runs (:func:`companion.stats.replicate_se`), where a page trains replicates.

The competitor of a claim at k CoT steps, one step short or long, is chosen the same way wherever it is used
(:func:`nearer_neighbour`). Randomly initialised CoT replicates can stay at the zero saddle of the loss (no
:math:`V_{31}W_{13}`, no :math:`W_{24}`), where the theorems of Section 4, which start from Assumption 4.1, say
nothing: :func:`left_saddle` tells them apart by their training objective alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import torch

from companion.seeds import COT_EVAL, COT_TRAIN_EVAL
from companion.stats import Z_LEVEL, band_words, combine, mean_se, median_se, replicate_se, welch, wider

from .data import Prompts, make_generator, sample_prompts
from .grads import cot_step_grads
from .model import cot_inference, looped_predict, no_cot_predict, per_prompt_error
from .train import TrainResult, threads1

__all__ = ["MAX_DOUBLINGS", "RULE_PROMPTS", "predict", "model_errors", "even_part_energy", "rule_prompts",
           "replicate_errors", "trained_vs_prediction", "replicate_median", "nearer_neighbour",
           "SADDLE_RATIO", "Escape", "left_saddle"]

#: the most times a stopping rule doubles a training's horizon (:func:`companion.cot.results.thm3_1.train_until_converged`,
#: :func:`companion.cot.results.thm3_2.converge_cot`)
MAX_DOUBLINGS = 3
#: the prompts of a training run's own evaluation stream (``cot.train_eval``) on which a stopping rule reads the
#: model (:func:`rule_prompts`)
RULE_PROMPTS = 1000
#: a CoT replicate has left the zero saddle when its teacher-forced loss is below this fraction of the zero model's
#: (:func:`left_saddle`)
SADDLE_RATIO = 0.25


@dataclasses.dataclass(frozen=True)
class Escape:
    """Which replicates of a CoT training left the zero saddle (:func:`left_saddle`): per replicate the ``ratio`` of
    its teacher-forced loss to the zero model's and ``escaped`` (ratio below :data:`SADDLE_RATIO`); ``kept``, the
    result of the escaped replicates only — or of all of them when fewer than two escaped (no spread over training
    seeds could be measured: the claims then compare every replicate, its words say so)."""

    ratio: np.ndarray
    escaped: np.ndarray
    kept: TrainResult

    @property
    def count(self) -> int:
        return int(self.escaped.sum())

    def words(self) -> str:
        """The rule and its outcome, for a claim's detail."""
        n = len(self.escaped)
        out = (f"{self.count} of {n} replicates left the zero saddle and are counted (teacher-forced loss below "
               f"{SADDLE_RATIO:g} of the zero model's, `companion.cot.stats.left_saddle`)")
        return out + (f"; fewer than two did: all {n} are counted" if self.count < 2 <= n else "")


def left_saddle(res: TrainResult, eta: float, k: int, num: int = 2000) -> Escape:
    r"""Which replicates of the CoT training ``res`` (objective ``"cot"``, data step ``eta``, ``k`` teacher-forced
    positions) left the zero saddle: the ratio

    .. math:: \rho_r = L_{\rm CoT}(W^{(r)}) / L_{\rm CoT}(0)

    of replicate r's teacher-forced loss (6) to the zero model's, on ``num`` prompts of the training's own
    evaluation stream (``COT_TRAIN_EVAL``, not the claims' test prompts), below :data:`SADDLE_RATIO`. The zero model
    copies each token, so its loss is that of the GD steps themselves; the construction's is 0. A model that
    applies a step s instead of the data's η keeps :math:`(1 - s/\eta)^2` of it on those steps: below a quarter,
    it has learned at least half the step. The rule reads the training objective only, neither the claims'
    predictions nor their test prompts. Returns an :class:`Escape`."""
    prompts = rule_prompts(res, num)
    zero = torch.zeros_like(res.W_KQ[0] if res.W_KQ.dim() == 3 else res.W_KQ)
    with threads1(), torch.no_grad():
        base = float(cot_step_grads(prompts, eta, k, zero, zero)[0])
        ratio = np.array([float(cot_step_grads(prompts, eta, k, m.W_KQ, m.W_PV)[0]) / base
                          for m in (res.replicate(r) for r in range(res.replicates))])
    escaped = ratio < SADDLE_RATIO
    if escaped.all() or escaped.sum() < 2:
        return Escape(ratio, escaped, res)
    keep = np.flatnonzero(escaped)
    idx = torch.as_tensor(keep)
    kept = dataclasses.replace(res, W_KQ=res.W_KQ[idx], W_PV=res.W_PV[idx], eval_loss=res.eval_loss[:, keep],
                               snapshots=[(a[keep], b[keep]) for a, b in res.snapshots],
                               config=dict(res.config, replicates=len(keep)))
    return Escape(ratio, escaped, kept)


def predict(objective: str, res, prompts, k: int) -> torch.Tensor:
    r"""A trained model's estimate :math:`\hat w` on the given prompts, shape (B, d): after k autoregressive CoT
    steps (``"cot"``), in one layer (``"no_cot"``) or after k loops (``"looped"``)."""
    with threads1(), torch.no_grad():
        if objective == "cot":
            return cot_inference(prompts, res.W_KQ, res.W_PV, k)[:, -1]
        if objective == "no_cot":
            return no_cot_predict(prompts, res.W_KQ, res.W_PV)
        return looped_predict(prompts, res.W_KQ, res.W_PV, k)


def model_errors(objective: str, res, prompts, k: int) -> np.ndarray:
    r"""Per-prompt :math:`\|\hat w - w^\star\|^2` of a trained model (CoT: k autoregressive steps; no-CoT; looped
    with k loops, :func:`predict`) on the given prompts; non-finite values (divergent prompts) become +inf."""
    with torch.no_grad():
        e = per_prompt_error(predict(objective, res, prompts, k), prompts).numpy()
    return np.nan_to_num(e, nan=np.inf)


def even_part_energy(objective: str, res, prompts: Prompts, k: int) -> np.ndarray:
    r"""Per replicate of a :class:`~companion.cot.train.TrainResult`, the mean over ``prompts`` of
    :math:`\|\hat w_{\rm even}\|^2`, :math:`\hat w_{\rm even} = \tfrac12\bigl(\hat w(X, y) + \hat w(X, -y)\bigr)`
    (:func:`predict`; the prompt with :math:`-w^\star` has the labels :math:`-y`): the part of the estimate even in
    the labels.

    The task is symmetric under :math:`w^\star \to -w^\star`, and the estimates of the theorems' minimisers (one
    GD step; k GD steps from :math:`w_0 = 0`) are linear in y, so odd. On a prompt set closed under the flip the
    error splits as :math:`\E\|\hat w_{\rm odd} - w^\star\|^2 + \E\|\hat w_{\rm even}\|^2` (the cross term is
    odd): the even part's energy is an excess of a trained model over the minimiser that needs no prediction to
    measure. Non-finite values become +inf."""
    flipped = Prompts(prompts.X, -prompts.w_star)
    out = []
    for r in range(res.replicates):
        m = res.replicate(r)
        even = (predict(objective, m, prompts, k) + predict(objective, m, flipped, k)) / 2
        out.append(float((even**2).sum(-1).mean()))
    return np.nan_to_num(np.array(out), nan=np.inf)


def rule_prompts(res, num: int) -> Prompts:
    """A stopping rule's prompts for a training run ``res``: ``num`` prompts of the run's own evaluation stream
    (``cot.train_eval``), never a claim's test prompts (``cot.eval``)."""
    d, n = res.config["d"], res.config["n"]
    return sample_prompts(num, d, n, make_generator(COT_TRAIN_EVAL(res.config["seed"])))


def replicate_errors(objective: str, res, k: int, num: int, seed: int) -> np.ndarray:
    """Per-prompt errors of every replicate of a :class:`~companion.cot.train.TrainResult` trained with
    ``replicates=R``, replicate r on its *own* ``num`` fresh prompts from the ``cot.eval`` stream
    (:data:`companion.seeds.COT_EVAL` ``.replicate(seed, r)``, ``seed`` the page's seed), shape (R, num): R
    independent repetitions of the whole experiment, training and evaluation. The stream is applied here, so no
    caller can judge a model on the draws of its own training stream (``cot.prompts``, the same seed)."""
    d, n = res.config["d"], res.config["n"]
    return np.stack([model_errors(objective, res.replicate(r), sample_prompts(num, d, n, make_generator(COT_EVAL.replicate(seed, r))), k)
                     for r in range(res.replicates)])


def trained_vs_prediction(errors: np.ndarray, pred_mean: float, pred_se: float = 0.0, z: float = Z_LEVEL) -> dict:
    r"""Mean of trained models' per-prompt errors with its standard error and degrees of freedom, combined with
    the Monte-Carlo error of an (independent) prediction.

    ``errors`` of shape (N,): one model, the standard error is over the prompts (many degrees of freedom).
    Shape (R, N): R independently seeded training runs, each evaluated on its own prompts; the replicate means
    are i.i.d., so their spread (:func:`companion.stats.replicate_se`) covers the training seeds *and* the
    prompts, on R - 1 degrees of freedom. The prompts-only standard error of all R N errors
    (:func:`companion.stats.mean_se`) is a lower bound of the true one, on many degrees of freedom. Each is a
    valid test at the level of ``z`` normal standard errors on its own; the verdict takes the one with the wider
    band (:func:`companion.stats.wider`): the seed spread at the Student-t critical value, or the prompts at z.
    Returns ``se`` and ``dof`` (``math.inf`` when the prompts decide) to hand to the verdict, and ``se_from``,
    which of the two it is, in words.
    """
    errors = np.asarray(errors, dtype=float)
    m, se = mean_se(errors)
    out = dict(mean=m, se_prompts=se, pred=pred_mean, pred_se=pred_se)
    cand = [welch((se, math.inf), (pred_se, math.inf))]
    if errors.ndim == 2:
        means = errors.mean(axis=1)
        out.update(means=means, se_seeds=replicate_se(means)[1])
        cand.append(welch((out["se_seeds"], len(means) - 1), (pred_se, math.inf)))
    se, dof = wider(z, *cand)
    src = (f"the spread of {errors.shape[0]} training seeds ({band_words(dof)})" if math.isfinite(dof)
           else "the evaluation prompts")
    return dict(out, se=se, dof=dof, se_from=src)


def replicate_median(errors: np.ndarray, z: float = Z_LEVEL) -> tuple[float, float, float]:
    """The median of R models' per-prompt errors, shape (R, N), each model on its own prompts: the mean of the R
    medians, with the standard error of that mean over the replicates (training seeds and prompts, R - 1
    degrees of freedom) or the order-statistic standard errors of the R medians
    (:func:`companion.stats.median_se`) combined (many degrees of freedom), whichever band is wider at the level
    of ``z`` (:func:`companion.stats.wider`). One model (R = 1 or a 1-d array): its median and order-statistic
    standard error. Returns ``(median, se, dof)``."""
    errors = np.atleast_2d(np.asarray(errors, dtype=float))
    meds = [median_se(e) for e in errors]
    if len(meds) == 1:
        return meds[0][0], meds[0][1], math.inf
    m = np.array([a for a, _ in meds])
    floor = combine(*(b for _, b in meds)) / len(meds)
    if not np.all(np.isfinite(m)):
        return float(np.mean(m)), float("inf"), math.inf
    se, dof = wider(z, (replicate_se(m)[1], len(m) - 1), (floor, math.inf))
    return float(m.mean()), se, dof


def nearer_neighbour(k: int, pred: float, values: Mapping[int, float]) -> tuple[int, float]:
    r"""The competitor of a claim at k steps: of the values one step short and one step long, the one nearer the
    prediction.

    A model that has learned the algorithm but not exactly k steps of it makes :math:`L_{k-1}` or :math:`L_{k+1}`
    instead of :math:`L_k` (``pred``); the claims take the harder of the two to reject,

    .. math::

        k' = \arg\min_{j \in \{k-1,\,k+1\},\ j \ge 0} |L_j - L_k|,

    with a tie going to :math:`k + 1`. There is no step count below 0: at :math:`k = 0` the competitor is
    :math:`k + 1`. Shared by :prf:ref:`cot-thm-3-2` (:func:`companion.cot.results.thm3_2.neighbours`, exact
    :math:`L_j`) and :prf:ref:`cot-thm-4-2` (:func:`companion.cot.results.thm4_2.model_claim`, Monte-Carlo means or
    medians).

    Parameters
    ----------
    k : int
        The steps of the claim, :math:`k \ge 0`.
    pred : float
        The prediction at k.
    values : mapping
        The value at each neighbour: ``values[k + 1]`` and, for :math:`k \ge 1`, ``values[k - 1]``.

    Returns
    -------
    tuple
        ``(k', values[k'])``.
    """
    up = values[k + 1]
    if k < 1:
        return k + 1, up
    down = values[k - 1]
    return (k + 1, up) if abs(up - pred) <= abs(down - pred) else (k - 1, down)
