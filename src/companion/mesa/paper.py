"""The paper's settings of the mesa pages: the sizes, inits and Table-1 step sizes of the reference code, the
replicate counts, and the other defaults the notebooks' parameter cells state (``tests/notebooks/test_defaults.py``
keeps the two equal).

Data only (it imports nothing). Each result's design (:mod:`companion.mesa.results`) turns these into the runs the
page trains; the plan of every paper-scale run is :mod:`companion.mesa.results.plan`."""

from __future__ import annotations

__all__ = ["COMMON", "INITS", "KAPPA", "TABLE1", "PROBES", "FIG5", "APPENDIX_INITS", "RATE", "REPLICATES", "T_SWEEP"]

COMMON = dict(d=5, T=100, m=10_000, m_test=10_000, epochs=200, seed=1)
INITS = [(0.1, 0.1), (0.5, 1.5), (2.0, 2.0)]
#: the step size of a page where none is given, as a fraction of the stability bound
#: (:func:`companion.mesa.stability.stable_lr`)
KAPPA = 0.25
#: the step sizes of the paper's Table 1, per law and scale
TABLE1 = {
    "gaussian": [(0.5, 1e-3), (1.0, 1e-4), (2.0, 2e-6)],
    "sparse": [(0.5, 3e-2), (1.0, 1e-3), (2.0, 1e-4)],
    "full_one": [(1.0, 5e-4)],
}
# the book's further laws of the Thm 4.2 probe (with init (0.5, 1.5)) and their step sizes; 0: KAPPA x the stability
# bound over the training sets the law trains on (companion.mesa.results.thm4_2.probe_lr)
PROBES = [("rademacher", 1.0, 1e-3), ("sparse_gaussian", 1.0, 0.0)]
FIG5 = dict(law="gaussian", scale=1.0, lr=1e-4, epochs=300, sigma_ws=[0.01, 0.1])
APPENDIX_INITS = [(1.5, 0.5), (1.0, 0.2)]  # further diagonal inits (Gaussian sigma = 1, lr 1e-4)
# the appendix's contraction-rate experiment (sparse c = 1, from (1.2, 1.2), kappa x the reduced bound): n_rate
# replicate training sets at m_rate and at m_rate/4 (companion.mesa.results.appendix.euler_rate_design)
RATE = dict(m_rate=10_000, n_rate=10)
# replicate training sets (at m_rep and m_rep/4): thm4_1 per (law, scale), its Gaussian middle scale (the one-step-GD
# deviation), thm4_3 and prop4_2 (masked and unmasked, the same training sets: m_rep_mask and m_rep_mask/4); the
# notebooks' defaults; thm4_1's sparse scales: n_rep_sparse at m_rep_sparse and m_rep_sparse/4; thm4_2's probe laws
# that fail Assumption 4.2: n_rep_cap at m_rep_cap and m_rep_cap/4; the appendix's diagonal inits: n_rep_init at
# m_rep_init and m_rep_init/4 (Thm 4.1's size: from (0.5, 1.5) its first sets)
REPLICATES = dict(m_rep=2500, n_rep=16, n_rep_dev=16, m_rep_mask=1000, n_rep_mask=10, m_rep_sparse=1000, n_rep_sparse=10,
                  m_rep_cap=2500, n_rep_cap=10, m_rep_init=2500, n_rep_init=10)
T_SWEEP = dict(Ts=[10, 20, 100], m_sweep=10_000, n_rep=10, kappa=0.25)  # the trained T sweep of prop4_1 (middle init)
