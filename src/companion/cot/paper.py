r"""The run plan of the cot pages: the settings that several cot notebooks share, defined once.

The paper gives no :math:`d`, :math:`n`, :math:`k`, :math:`\eta` or optimiser settings (see the setup and
experiments pages), so these are the book's choices. A notebook's parameters cell stays literal
``name: type = value  # help`` lines (papermill injects parameters there) and repeats them as its defaults;
``tests/notebooks/test_defaults.py`` checks that every default equals the plan's value or is named as the page's own.
A setting used by one page only (a Monte-Carlo size, a figure's grid) is that page's own and is not here.

Science-layer data: it imports nothing, and the results may read it."""

from __future__ import annotations

__all__ = ["COMMON", "COT_TRAIN", "NO_COT_TRAIN", "COT_MODELS"]

#: the setting of every page (cot/setup fixes it): dimension d, examples per prompt n, CoT length k, the GD step
#: eta of the CoT data, and the seed of every random generator. d: every page but cor3_1 (its own d grid); n, eta:
#: setup, looped, thm3_1 (n), thm3_2, thm4_1, thm4_2; k: setup, thm4_1 (k and the reduced ODE's k_ode, with
#: eta_ode = eta), and the training length k_train of thm3_2 and thm4_2 (they reuse the Theorem 4.1 page's
#: trained models); seed: all eight pages
COMMON = dict(d=10, n=20, k=20, eta=0.3, seed=1)

#: full-parameter Adam training of the CoT models (teacher-forced loss (6)): steps, learning rate, its final
#: fraction (geometric decay), fresh prompts per step, models trained side by side. thm4_1 trains them at COMMON;
#: thm3_2 and thm4_2 reuse those models (one run-cache entry); the experiments page trains its CoT models with the
#: same optimiser at its own n and k. The pages without a batch parameter pass 64 in their code.
COT_TRAIN = dict(steps=2000, lr=0.004, lr_final=0.2, batch=64, replicates=10)

#: full no-CoT training under the stopping rule of :func:`companion.cot.results.thm3_1.train_until_converged`
#: (the horizon is the summed learning rate ``path``, doubled until converged): thm3_1 at COMMON and cor3_1's
#: trained floors (cor3_1 has no batch parameter: :func:`companion.cot.results.cor3_1.trained_floor` uses 64)
NO_COT_TRAIN = dict(lr=0.01, lr_final=0.01, path=2.0, batch=64, replicates=10)

#: the experiment the trained-model claims of Theorems 3.2, 4.1 and 4.2 read (``ClaimSpec.experiment``): at the
#: pages' defaults one run-cache entry, the COT_TRAIN models at COMMON
COT_MODELS = "the CoT transformers trained on the Theorem 4.1 page (`COT_TRAIN` at the common setting)"
