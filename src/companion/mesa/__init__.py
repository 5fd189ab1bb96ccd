"""Zheng et al. (NeurIPS 2024): mesa-optimization in autoregressively trained linear transformers.

* :mod:`companion.mesa.data`   -- AR data (three x_1 laws, pluggable), embedding
* :mod:`companion.mesa.model`  -- the one-layer linear attention model, all positions in one pass
* :mod:`companion.mesa.train`  -- full-batch GD with recorded trajectories, run cache
* :mod:`companion.mesa.theory` -- moments, alpha, beta, c*, limits, reduced flow/GD, Prop 4.2, Assumption 4.2
"""

from companion.mesa import data, model, theory, train  # noqa: F401
from companion.mesa.data import ARData, embed, generate, register_law  # noqa: F401
from companion.mesa.model import loss, loss_and_grad, predict  # noqa: F401
from companion.mesa.train import RunConfig, TrainingDiverged, TrainResult, run  # noqa: F401
