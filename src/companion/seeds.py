"""Named seed streams: every random generator of the book is seeded from a notebook's ``seed`` through one of these.

A leaf module (it imports nothing from :mod:`companion`). A stream turns the notebook's ``seed`` (and, for a
replicated experiment, the replicate index r) into the seed of one generator, and its name says what that
generator draws. Two kinds, after the generators the two papers use:

* :class:`SeedStream` -- an integer seed ``seed + offset`` (a ``torch.Generator``, cot); replicate r of the stream
  is ``(seed + offset + 1_000_003 r) mod 2**32`` (:func:`replicate_seed`);
* :class:`SpawnKey` -- a NumPy seed sequence ``[seed, key]`` (``np.random.default_rng([seed, key])``, mesa).

The offsets and keys are those the book has always used (every verdict record depends on them): they are
written here once, with what each stream is for, instead of as integers at the call sites.
``tests/core/test_seeds.py`` checks that no two streams of one run share a seed (at every seed and replicate index
the book's pages use) and that each stream reproduces these integers.

Note on NumPy: ``default_rng(s)`` and ``default_rng([s, 0])`` are the *same* generator (a seed sequence pads its
entropy with zeros), so :data:`MESA_TRAIN_DATA` coincides with the generator :func:`companion.seed_everything`
returns; the mesa pages discard that generator (they call ``seed_everything`` only to seed the globals).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SeedStream", "SpawnKey", "replicate_seed", "REPLICATE_STRIDE", "SEED_MODULUS", "STREAMS", "SPAWN_KEYS",
           "COT_PROMPTS", "COT_TRAIN_EVAL", "COT_EVAL", "COT_ISO_EVAL", "COT_SPARSE_SIM", "COT_OOD_EVAL",
           "MESA_TRAIN_DATA", "MESA_TEST_DATA", "MESA_INIT", "MESA_ONE_STEP_EVAL", "MESA_POSITION_EVAL",
           "MESA_HESSIAN_DATA", "MESA_OFFDIAG_MC", "MESA_LOSS_EVAL", "MESA_EQUIVARIANT_MC", "MESA_FORMULA_MC",
           "MESA_RANDOM_WEIGHTS"]

#: replicates of one stream are this far apart, so experiments with nearby seeds share no replicate (``seed + r``
#: would give seed 1's replicate 1 to seed 2's replicate 0)
REPLICATE_STRIDE = 1_000_003
#: the range of a seed parameter: a replicate's seed is taken modulo it
SEED_MODULUS = 2**32


def replicate_seed(seed: int, r: int) -> int:
    """The seed of replicate ``r`` of an experiment seeded with ``seed`` (replicate 0 is the experiment itself):
    ``(seed + 1_000_003 r) mod 2**32``."""
    return (int(seed) + REPLICATE_STRIDE * int(r)) % SEED_MODULUS


@dataclass(frozen=True)
class SeedStream:
    """An integer seed stream: ``stream(seed) = seed + offset`` seeds one generator; ``stream.replicate(seed, r)``
    seeds replicate r's (:func:`replicate_seed` of ``seed + offset``)."""

    name: str
    offset: int
    purpose: str

    def __call__(self, seed: int) -> int:
        return int(seed) + self.offset

    def replicate(self, seed: int, r: int) -> int:
        return replicate_seed(self(seed), r)


@dataclass(frozen=True)
class SpawnKey:
    """A NumPy seed-sequence stream: ``[seed, key]`` (``key(seed)``), ``np.random.default_rng([seed, key])``
    (``rng(seed)``)."""

    name: str
    key: int
    purpose: str

    def entropy(self, seed: int) -> tuple[int, int]:
        return (int(seed), self.key)

    def rng(self, seed: int):

        return np.random.default_rng(list(self.entropy(seed)))


# ------------------------------------------------------------------------------ cot: torch.Generator seeds
#: the ``cot.prompts`` stream (its purpose is its ``purpose`` field)
COT_PROMPTS = SeedStream("cot.prompts", 0, "a page's own draws: the minibatches and initialisation of training "
                         "replicate r (.replicate(seed, r)), or the prompts of a page that trains nothing")
#: the ``cot.train_eval`` stream (its purpose is its ``purpose`` field)
COT_TRAIN_EVAL = SeedStream("cot.train_eval", 10_000_019, "the held-out prompts of the loss curve logged during "
                            "training (train_full's eval_every)")
#: the ``cot.eval`` stream (its purpose is its ``purpose`` field)
COT_EVAL = SeedStream("cot.eval", 7, "fresh prompts on which a trained model is judged (replicate r: "
                      ".replicate(seed, r))")
#: the ``cot.iso_eval`` stream (its purpose is its ``purpose`` field)
COT_ISO_EVAL = SeedStream("cot.iso_eval", 5, "fresh prompts of the trained isotropic looped models (looped page; "
                          "replicate r: .replicate(seed, r))")
#: the ``cot.sparse_sim`` stream (its purpose is its ``purpose`` field)
COT_SPARSE_SIM = SeedStream("cot.sparse_sim", 3, "the prompts of the sparse looped LSA run at its optimum "
                            "(looped page)")
#: the ``cot.ood_eval`` stream (its purpose is its ``purpose`` field)
COT_OOD_EVAL = SeedStream("cot.ood_eval", 11, "the out-of-distribution test prompts of each test covariance "
                          "(Theorem 4.2 page; replicate r: .replicate(seed, r))")

# ------------------------------------------------------------------- mesa: np.random.default_rng([seed, key])
#: the ``mesa.train_data`` stream (its purpose is its ``purpose`` field)
MESA_TRAIN_DATA = SpawnKey("mesa.train_data", 0, "the training sequences of a run (and every check that "
                           "must see exactly them: batch statistics, Monte-Carlo gradients of the training set)")
#: the ``mesa.test_data`` stream (its purpose is its ``purpose`` field)
MESA_TEST_DATA = SpawnKey("mesa.test_data", 1, "the test sequences of a run")
#: the ``mesa.init`` stream (its purpose is its ``purpose`` field)
MESA_INIT = SpawnKey("mesa.init", 2, "the Gaussian initialisation of a run (init='gaussian')")
#: the ``mesa.one_step_eval`` stream (its purpose is its ``purpose`` field)
MESA_ONE_STEP_EVAL = SpawnKey("mesa.one_step_eval", 3, "fresh sequences on which a trained model is compared "
                              "with one step of GD")
#: the ``mesa.position_eval`` stream (its purpose is its ``purpose`` field)
MESA_POSITION_EVAL = SpawnKey("mesa.position_eval", 4, "fresh, longer sequences of the limit model's per-position "
                              "loss (Proposition 4.1)")
#: the ``mesa.hessian_data`` stream (its purpose is its ``purpose`` field)
MESA_HESSIAN_DATA = SpawnKey("mesa.hessian_data", 5, "the sequences of the Hessian power iteration of the "
                             "stability bound")
#: the ``mesa.offdiag_mc`` stream (its purpose is its ``purpose`` field)
MESA_OFFDIAG_MC = SpawnKey("mesa.offdiag_mc", 7, "the full-one sequences of the Monte-Carlo off-diagonal "
                           "gradient (Proposition 4.2)")
#: the ``mesa.loss_eval`` stream (its purpose is its ``purpose`` field)
MESA_LOSS_EVAL = SpawnKey("mesa.loss_eval", 8, "the common test sequences of the replicate loss evidence "
                          "(Richardson in m)")
#: the ``mesa.equivariant_mc`` stream (its purpose is its ``purpose`` field)
MESA_EQUIVARIANT_MC = SpawnKey("mesa.equivariant_mc", 9, "the sequences of the equivariant-block moments "
                               "(Theorem 4.3)")
#: the ``mesa.formula_mc`` stream (its purpose is its ``purpose`` field)
MESA_FORMULA_MC = SpawnKey("mesa.formula_mc", 10, "the bounded, moment-matched sequences of the Monte-Carlo "
                           "loss and gradient formulas (setup page)")
#: mesa's one torch.Generator stream (integer seed)
#: the ``mesa.random_weights`` stream (its purpose is its ``purpose`` field)
MESA_RANDOM_WEIGHTS = SeedStream("mesa.random_weights", 0, "the random full weights at which the fast model is "
                                 "checked against its definition (setup page)")

#: every integer stream, by name
STREAMS = {s.name: s for s in (COT_PROMPTS, COT_TRAIN_EVAL, COT_EVAL, COT_ISO_EVAL, COT_SPARSE_SIM, COT_OOD_EVAL,
                               MESA_RANDOM_WEIGHTS)}
#: every NumPy spawn-key stream, by name
SPAWN_KEYS = {s.name: s for s in (MESA_TRAIN_DATA, MESA_TEST_DATA, MESA_INIT, MESA_ONE_STEP_EVAL, MESA_POSITION_EVAL,
                                  MESA_HESSIAN_DATA, MESA_OFFDIAG_MC, MESA_LOSS_EVAL, MESA_EQUIVARIANT_MC,
                                  MESA_FORMULA_MC)}
