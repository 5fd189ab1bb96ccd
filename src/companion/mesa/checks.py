"""Superseded: the mesa checks live in :mod:`companion.mesa.results` (one module per result) and in the shared
science-layer modules :mod:`companion.mesa.evidence` and :mod:`companion.mesa.stability`.

Only the step-size rule is re-exported here, for the parameter-validation cell of
``notebooks/mesa/thm4_1_emergence.md`` (owned by another change at the time of the move); delete this module
once that cell imports :func:`companion.mesa.stability.stable_lr` itself.
"""

from companion.mesa.stability import stable_lr

__all__ = ["stable_lr"]
