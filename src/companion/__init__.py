"""Companion package for the two linear-transformer papers.

* :mod:`companion.mesa` -- Zheng et al. (NeurIPS 2024), mesa-optimization in autoregressively trained
  one-layer linear transformers.
* :mod:`companion.cot` -- Huang, Wang & Lee (ICLR 2025), multi-step gradient descent with chain of thought.
* :mod:`companion.params`, :mod:`companion.verdict`, :mod:`companion.plotting` -- the notebook toolkit
  (parameter validation, theory-vs-simulation verdicts, figure style); :mod:`companion.claims` the claim
  vocabulary, :mod:`companion.registry` both papers' results.
* :mod:`companion.run` -- executing notebooks (papermill, the warm kernel) and sweeps (Dask);
  :mod:`companion.site` -- the book build and the site; :mod:`companion.cli` -- the command line.
"""

from __future__ import annotations

import random

import numpy as np

from .seeds import replicate_seed

__version__ = "0.1.0"

__all__ = ["__version__", "seed_everything", "replicate_seed"]


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's, NumPy's and torch's global generators; return a fresh NumPy ``Generator``.

    Package code never uses a global generator: it takes an explicit ``np.random.Generator`` (or a
    ``torch.Generator``) derived from the notebook's ``seed`` parameter. Seeding the globals as well
    makes stray uses (e.g. in third-party code) reproducible too.
    """
    import torch

    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)
