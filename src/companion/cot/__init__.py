"""Huang, Wang & Lee (ICLR 2025): transformers learn multi-step gradient descent with chain of thought.

* :mod:`companion.cot.data`   -- prompts, the GD trajectory, the embedding Z0 and CoT tokens (torch);
* :mod:`companion.cot.model`  -- the LSA, autoregressive CoT inference, the fast teacher-forced loss (6),
  the evaluation loss (7), the no-CoT and looped models;
* :mod:`companion.cot.train`  -- full-parameter training (Adam/GD on fresh prompts, float64), replicates side by side;
* :mod:`companion.cot.theory` -- the theory, one module per result it serves: the law of S
  (:mod:`~companion.cot.theory.wishart`), the k-step GD error (:mod:`~companion.cot.theory.gd`), the no-CoT step and
  floor (:mod:`~companion.cot.theory.no_cot`), Marchenko--Pastur (:mod:`~companion.cot.theory.mp`), the gradient
  flows (:mod:`~companion.cot.theory.dynamics`), out of distribution (:mod:`~companion.cot.theory.ood`), the looped
  optimum (:mod:`~companion.cot.theory.loops`);
* :mod:`companion.cot.stats`  -- per-prompt errors of trained models and their standard errors (shared by the results);
* :mod:`companion.cot.paper`  -- the run plan: the settings that several pages share (their defaults);
* :mod:`companion.cot.domain` -- the parameter domains that several pages share (one validation, one message);
* :mod:`companion.cot.results` -- one module per result (notebook): its evidence, figures and ``CLAIMS`` manifest
  (imported on demand: they need matplotlib).
"""

from __future__ import annotations

from . import data, model, stats, train
from .data import Prompts, cot_tokens, embed, gd_trajectory, make_generator, sample_prompts
from .model import (
    blocks,
    construction,
    cot_effective_blocks,
    cot_inference,
    eval_loss,
    looped_predict,
    lsa,
    no_cot_effective_matrix,
    no_cot_predict,
    outcome_loss,
    per_prompt_error,
    sparse_parameters,
    teacher_forced_loss,
    teacher_forced_loss_direct,
)

__all__ = [
    "data", "model", "stats", "train",
    "Prompts", "cot_tokens", "embed", "gd_trajectory", "make_generator", "sample_prompts",
    "blocks", "construction", "cot_inference", "eval_loss", "looped_predict", "lsa", "no_cot_predict",
    "outcome_loss", "per_prompt_error", "cot_effective_blocks", "no_cot_effective_matrix", "sparse_parameters", "teacher_forced_loss",
    "teacher_forced_loss_direct",
]
