"""Deprecated: the per-result measurements moved to :mod:`companion.cot.results` (one module per notebook) and the
statistics several results share to :mod:`companion.cot.stats`.

This module only re-exports the shared statistics for ``tests/test_cot_replicates.py``, which another change
owns; delete it once that test imports :mod:`companion.cot.stats`.
"""

from __future__ import annotations

from companion.stats import median_se

from .stats import model_errors, replicate_errors, replicate_median, trained_vs_prediction

__all__ = ["model_errors", "replicate_errors", "replicate_median", "trained_vs_prediction", "median_se"]
