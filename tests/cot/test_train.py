"""The cot trainer (companion.cot.train): full-parameter training reaches the no-CoT floor, a diverging run names its
learning rate, and the tests train from scratch (the run cache is off).

Each test is meant to fail on a plausible bug: a loss or gradient off by a factor that stalls training above the
floor, a divergence reported without the parameter to change, a test that reads a cached run instead of training."""

from __future__ import annotations

import os

import pytest

from companion.cache import cache_dir
from companion.cot import train
from companion.cot.theory import no_cot
from companion.params import ParameterError


def test_training_reaches_the_no_cot_floor_quickly_and_divergence_names_lr():
    r = train.train_full("no_cot", 3, 12, 1, steps=600, lr=1e-2, batch=64, seed=0, eval_every=600, eval_batch=4000)
    floor = no_cot.no_cot_floor(3, 12)
    assert abs(r.eval_loss[-1] - floor) < 0.1 * floor
    with pytest.raises(ParameterError, match="'lr'"):
        train.train_full("cot", 3, 6, 3, 0.3, steps=200, lr=50.0, batch=16, seed=0, init_scale=1.0)


def test_cache_is_disabled_in_tests():
    assert os.environ["COMPANION_CACHE_DIR"] == "off" and cache_dir() is None
