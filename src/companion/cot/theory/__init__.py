r"""The theory of Huang, Wang & Lee (ICLR 2025): closed forms, Monte Carlo with standard errors, the
Marchenko--Pastur limit, the gradient flows of the training dynamics and the looped optimum, one module per result
it serves.

* :mod:`companion.cot.theory.wishart` -- the law of :math:`S = XX^\T/n`: samples, exact trace moments, an
  importance-weighted sampler (every result);
* :mod:`companion.cot.theory.gd` -- the error of k GD steps on a spectrum, :math:`\sum_j(1-\eta\lambda_j)^{2k}`,
  written once, exactly and by Monte Carlo, and the delta-method standard error of an argmin (every result that
  predicts a GD error);
* :mod:`companion.cot.theory.no_cot` -- the optimal one-step size and the no-CoT floor (:prf:ref:`cot-thm-3-1`,
  :prf:ref:`cot-cor-3-1`);
* :mod:`companion.cot.theory.mp` -- the Marchenko--Pastur limit (:prf:ref:`cot-thm-3-2`, the regime of
  :prf:ref:`cot-thm-4-1`);
* :mod:`companion.cot.theory.dynamics` -- the reduced (v, w) gradient flow, its rates and stage times, and the
  restricted matrix flow (:prf:ref:`cot-thm-4-1`);
* :mod:`companion.cot.theory.ood` -- the one-step error under a test covariance and the spectral sufficient
  condition (:prf:ref:`cot-thm-4-2`);
* :mod:`companion.cot.theory.loops` -- the looped model's optimal step and scale (:prf:ref:`cot-prop-looped`).

A result module imports the modules it needs by name (``from ..theory import gd, no_cot``) and calls them
qualified (``gd.gd_error_mc(...)``); so do the notebooks (``from companion.cot.theory import gd``).

Conventions (fixed by this book, see ``notebooks/cot/setup.md``):

* errors are sums over the d coordinates with **no** 1/2: :math:`L^{\rm Eval} = \E\|\hat w_k - w^\star\|^2`;
* the CoT training loss carries the 1/2 and sums the positions :math:`i = 0..k-1`;
* :math:`S = XX^\T/n` with :math:`x_i \sim N(0, \Sigma)` (:math:`\Sigma = I` unless stated),
  :math:`w^\star \sim N(0, I)`.
"""

__all__: list[str] = []
