r"""The parameter domains shared by the cot notebooks: one validation of the sizes :math:`d \le n`, of the GD step
:math:`\eta` of the CoT data (stable on a typical prompt) and of the training settings, so that every page rejects
bad input with the same one-line message naming the parameter (:class:`companion.params.ParameterError`). The
upper bounds of :math:`d` and :math:`n` are each page's own (its memory and run time) and are passed in."""

from __future__ import annotations

import math

from companion import params

__all__ = ["sizes", "step", "learning_rates", "training", "no_cot_training", "eval_batch", "num_mc"]


def sizes(d, n, *, d_max: int, n_max: int, names: tuple[str, str] = ("d", "n")) -> tuple[int, int]:
    r"""Validated ``(d, n)``: :math:`1 \le d \le` ``d_max``, :math:`1 \le n \le` ``n_max`` and :math:`n \ge d`
    (:math:`S = XX^\top/n` invertible). ``names`` are the page's names of the two (e.g. ``d_flow``, ``n_flow``)."""
    dn, nn = names
    d = params.integer(dn, d, min=1, max=d_max)
    n = params.integer(nn, n, min=1, max=n_max)
    params.require(n >= d, nn, f"must be >= {dn} = {d} (S = X X^T/{nn} must be invertible); got {n}")
    return d, n


def step(eta, d: int, n: int, *, name: str = "eta", names: tuple[str, str] = ("d", "n"), what: str = "") -> float:
    r"""Validated GD step of the CoT data: :math:`\eta > 0` and :math:`\eta\,(1 + \sqrt{d/n})^2 < 2`, the step
    below which GD on a typical prompt (:math:`\lambda_{\max}(S) \approx (1 + \sqrt{d/n})^2`) does not diverge.
    ``name`` is the page's name of the step (``eta_list[0]``), ``names`` those of :math:`d, n`, ``what`` says
    which data (e.g. ``" for the matrix flow"``)."""
    eta = params.real(name, eta, min=0, min_open=True)
    dn, nn = names
    params.require(eta * (1 + math.sqrt(d / n)) ** 2 < 2, name,
              f"must be < 2/(1 + sqrt({dn}/{nn}))^2 = {2 / (1 + math.sqrt(d / n)) ** 2:.4f} at {dn} = {d}, "
              f"{nn} = {n}{what} (beyond it GD on a typical prompt diverges); got {eta}")
    return eta


def learning_rates(lr, lr_final, *, names: tuple[str, str] = ("lr", "lr_final")) -> tuple[float, float]:
    """Validated Adam learning rate and its geometric decay, ``(lr, lr_final)``: ``0 < lr <= 1`` and
    ``0 < lr_final <= 1`` (the final learning rate as a fraction of lr). ``names`` are the page's names of the two
    (e.g. ``lr_no_cot``, ``lr_final_no_cot``)."""
    return (params.real(names[0], lr, min=0, max=1, min_open=True),
            params.real(names[1], lr_final, min=0, max=1, min_open=True))


def training(steps, lr, lr_final, replicates, allow_none: bool = False):
    """Validated Adam training of models side by side, ``(steps, lr, lr_final, replicates)``:
    ``1 <= steps <= 1e6``, :func:`learning_rates` and ``2 <= replicates <= 16``; with ``allow_none`` also
    ``replicates = 0``, no trained models (a page whose other claims do not need them)."""
    steps = params.integer("steps", steps, min=1, max=10**6)
    lr, lr_final = learning_rates(lr, lr_final)
    if allow_none and params.integer("replicates", replicates, min=0, max=16) == 0:
        return steps, lr, lr_final, 0
    allowed = "0 (no trained models) or 2 <= replicates <= 16" if allow_none else "2 <= replicates <= 16"
    R = params.integer("replicates", replicates, min=0 if allow_none else 2, max=16)
    params.require(R >= 2, "replicates", f"must be {allowed} (a spread over seeds needs two); got {R}")
    return steps, lr, lr_final, R


def no_cot_training(lr, lr_final, path, replicates):
    """Validated no-CoT training under the stopping rule, ``(lr, lr_final, path, replicates)``:
    :func:`learning_rates`, ``0.1 <= path <= 100`` (the summed learning rates of the horizon) and
    ``2 <= replicates <= 100``."""
    lr, lr_final = learning_rates(lr, lr_final)
    return (lr, lr_final, params.real("path", path, min=0.1, max=100),
            params.integer("replicates", replicates, min=2, max=100))


def eval_batch(value, replicates: int) -> int:
    """Validated evaluation prompts split among the replicates: ``100 * replicates <= eval_batch <= 1e6``."""
    return params.integer("eval_batch", value, min=100 * replicates, max=10**6)


def num_mc(value) -> int:
    """Validated number of independent Monte-Carlo samples: ``1000 <= num_mc <= 1e7``."""
    return params.integer("num_mc", value, min=1000, max=10**7)

