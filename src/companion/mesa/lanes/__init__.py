r"""The fused mesa kernel with sixteen sequences in the lanes of one SIMD vector (LLVM IR via llvmlite).

The package, read top down:

* :mod:`~companion.mesa.lanes.layout`: where each number lives (tables, sequences, weights, scratch,
  gradient slots) and the packing of the sequences into lanes;
* :mod:`~companion.mesa.lanes.bodies`: the forward and backward pass below, written as straight-line
  statements over lane vectors, generated per d;
* :mod:`~companion.mesa.lanes.dsl`: the translator of those statements into LLVM IR;
* :mod:`~companion.mesa.lanes.driver`: the exported loops over blocks and positions, and the whole module;
* :mod:`~companion.mesa.lanes.jit`: compilation for the host CPU and the on-disk cache of the object code;
* :mod:`~companion.mesa.lanes.host`: the host side: the position tables, the threads, and the sweep over the
  blocks of sequences that calls the compiled code (what :mod:`companion.mesa.model` calls);
* :mod:`~companion.mesa.lanes.reference`: a plain NumPy interpreter of the same equations (float64, one
  sequence and one position at a time), against which the tests check the compiled kernel.

:func:`companion.mesa.lanes.host.sweep` spreads the blocks of 16 sequences over threads and calls the
compiled function on each thread's range.

**The mathematics.**

One sequence: tokens :math:`x_t = \Lambda^{t-1} z` with :math:`z = x_1`, :math:`\Lambda = \operatorname{diag}(\lambda)`,
:math:`|\lambda_k| = 1`; embeddings :math:`e_t = (x_t, x_{t-1})` with :math:`x_0 = 0`; weights
:math:`W^{KQ} = \begin{bmatrix} A_{11} & A_{12} \\ A_{21} & A_{22} \end{bmatrix}` and
:math:`W^{PV} = [P_1 \; P_2]` (d x d blocks). The prediction at position :math:`t \in \mathcal P \subseteq
\{2, \dots, T-1\}` and the AR loss of sequences n with weights :math:`w_n` (summing to 1) are

.. math::

    \hat y_t = \frac{1}{\rho_t} W^{PV} S_t W^{KQ} e_t, \quad S_t = \sum_{i \le t} e_i e_i^H
    = S_{t-1} + e_t e_t^H, \quad \rho_t = t - 1, \qquad
    L = \sum_n w_n \ell_n, \quad \ell_n = \frac12 \sum_{t \in \mathcal P} |\hat y_t - x_{t+1}|^2 .

*The prefix sum in closed form.* For :math:`t \ge 2`, :math:`e_t = B x_t` with :math:`B = [I; \bar\Lambda]`;
only :math:`e_1 = B z - (0, \bar\Lambda z)` differs. The prefix sum of the tokens is geometric:

.. math::

    G_t = \sum_{i \le t} x_i x_i^H = G_{t-1} + x_t x_t^H, \qquad
    (G_t)_{jk} = z_j \bar z_k \sum_{r=0}^{t-1} (\lambda_j \bar\lambda_k)^r
    = z_j \bar z_k \bigl( t\,\delta_{jk} + K_{jk} (\lambda_j^t \bar\lambda_k^t - 1) \bigr),

with the Hermitian Cauchy-like :math:`K_{jk} = 1/(\lambda_j \bar\lambda_k - 1)` for :math:`j \ne k`,
:math:`K_{jj} = 0` (the kernel assumes no two phases of a sequence coincide; such data take the torch
path of :mod:`companion.mesa.model`). Writing :math:`N = A_{11} + A_{12}\bar\Lambda`,
:math:`O = A_{21} + A_{22}\bar\Lambda`, :math:`M = B^H W^{KQ} B = N + \Lambda O`,
:math:`R = W^{PV} B = P_1 + P_2 \bar\Lambda` and :math:`M_a = \operatorname{diag}(\bar z) M`, and
correcting for :math:`e_1`, the prefix sum drops out: for every position,

.. math::

    \rho_t \hat y_t = R \operatorname{diag}(z)\, w_t + (P_1 z)\, s'_t, \qquad
    w_t = t\, a_t + \lambda^t \circ K(\bar\lambda^t \circ a_t) - K a_t - s_t \mathbf 1,

where :math:`a_t = M_a x_t`, :math:`s_t = \mathbf 1^T a_t = z^H M x_t` and :math:`s'_t = z^H N x_t`
(so :math:`z \circ (w_t + s_t \mathbf 1) = G_t M x_t`). No loop over the prefix remains, and any subset of
positions costs the same per position.

*The forward pass* (per sequence, per position). With the t-independent maps

.. math::

    C = \bigl[\, M_a^T \;\big|\; (K M_a)^T \;\big|\; M_a^T \mathbf 1 \;\big|\; N^T \bar z \,\bigr]
    \in \mathbb C^{d \times (2d+2)}, \qquad
    R_v = \begin{bmatrix} (R \operatorname{diag} z)^T \\ (P_1 z)^T \end{bmatrix} \in \mathbb C^{(d+1) \times d},

.. math::

    F_t = C^T x_t = (a_t,\; K a_t,\; s_t,\; s'_t), \qquad
    \hat y_t = \frac{1}{\rho_t} R_v^T \omega_t, \quad \omega_t = (w_t, s'_t), \qquad
    r_t = \hat y_t - x_{t+1}, \qquad
    \ell = \frac12 \sum_{t \in \mathcal P} |r_t|^2 .

*The backward pass*, in PyTorch's complex convention
(:math:`\nabla = \partial L/\partial \operatorname{Re} + i\, \partial L/\partial \operatorname{Im}`; for a
linear :math:`y = A x`, :math:`\nabla A \mathrel{+}= \nabla y\, x^H` and :math:`\nabla x = A^H \nabla y`).
Per position, with :math:`g_t = \nabla(\rho_t \hat y_t) = w_n r_t / \rho_t`:

.. math::

    (\gamma_t, \gamma'_t) = \nabla\omega_t = \bar R_v\, g_t, \qquad
    \nabla a_t = t\, \gamma_t + \lambda^t \circ K^H (\bar\lambda^t \circ \gamma_t), \quad
    \nabla (K a_t) = -\gamma_t, \quad
    \nabla s_t = -\mathbf 1^T \gamma_t, \quad
    \nabla s'_t = \gamma'_t,

and the gradients of the maps are running sums over the positions (the scratch rows of the kernel):

.. math::

    \nabla R_v^{(t)} = \nabla R_v^{(t^-)} + \bar\omega_t\, g_t^T, \qquad
    \nabla C^{(t)} = \nabla C^{(t^-)} + \bar x_t\, (\nabla F_t)^T,

(:math:`t^-` the previous position of :math:`\mathcal P`, both sums starting at 0). After the last
position they are lifted to the weights. With :math:`\nabla C_{\cdot,a}`, :math:`\nabla C_{\cdot,Ka}`
(d x d each), :math:`\nabla C_{\cdot,s}`, :math:`\nabla C_{\cdot,s'}` (columns) the blocks of
:math:`\nabla C` and :math:`\nabla R_{v,1:d}`, :math:`\nabla R_{v,d+1}` the rows of :math:`\nabla R_v`:

.. math::

    \nabla M_a = (\nabla C_{\cdot,a})^T + K^H (\nabla C_{\cdot,Ka})^T + \mathbf 1 (\nabla C_{\cdot,s})^T, \qquad
    \nabla M = \operatorname{diag}(z) \nabla M_a, \qquad
    \nabla N = \nabla M + z\, (\nabla C_{\cdot,s'})^T,

.. math::

    \nabla A_{11} = \sum_n \nabla N, \quad
    \nabla A_{12} = \sum_n \nabla N\, \Lambda, \quad
    \nabla A_{21} = \sum_n \bar\Lambda\, \nabla M, \quad
    \nabla A_{22} = \sum_n \bar\Lambda\, \nabla M\, \Lambda,

.. math::

    \nabla R = (\nabla R_{v,1:d})^T \operatorname{diag}(\bar z), \qquad
    \nabla P_1 = \sum_n \bigl( \nabla R + (\nabla R_{v,d+1})^T z^H \bigr), \qquad
    \nabla P_2 = \sum_n \nabla R\, \Lambda .

The weights :math:`w_n` enter through :math:`g_t`; the sums over n run over the 16 lanes of a block in
float64 (one slot per block, summed by the caller, so the result does not depend on the threads).

**Why lanes.**

A kernel vectorised along the positions t of one sequence (a numba kernel, measured) runs about 120
short vector loops per sequence (N = 98 positions at T = 100), each paying a set-up, a horizontal sum and a
remainder; at N = 2 a paper-size epoch still takes 13 of 47 ms there. Here the vector runs across 16 sequences
instead: every per-position quantity above is one ``<16 x float>`` value, the loops over coordinates are
unrolled when the code is generated (one kernel per d), and nothing is left for an auto-vectoriser to guess.
numba could not be made to vectorise that body (written as a loop over the lanes, LLVM gave up on the
run-time alias checks, even with numba's ``noalias`` flag), so this package writes the LLVM IR itself and
compiles it with llvmlite (numba's own LLVM) for the host CPU: about a second per d and dtype, against 8 s
for the numba kernel.

What the generated code does to keep its values in registers (measured on an AVX-512 core, 32 vector
registers: a paper-size loss-and-gradient sweep 41 ms in the numba kernel, 31 ms in this one without the three
measures below, 24 ms with them; the loss alone 26, 18 and 13 ms):

* every function is ``noinline`` (one call per position costs nothing; inlined, LLVM hoisted the sequence's
  rows out of the position loop and spilled them);
* rows that a function never writes (the tables, the sequences, the maps while the positions run) are
  loaded with ``!invariant.load`` from ``dereferenceable`` arguments, so the register allocator reloads them
  instead of spilling them, and each table row is reloaded where it is used rather than kept in a name;
* the forward pass computes the columns of F where they are needed, and the backward pass adds each
  column of :math:`\nabla F_t` to :math:`\nabla C` as soon as it is known.

Compiled code is cached on disk (object code keyed by the IR text, the CPU, its features and the LLVM
version, followed by its own sha256 so that a damaged file is compiled again), so only the first process on
a machine pays the compilation.
"""

from __future__ import annotations

from companion.mesa.lanes.bodies import bodies
from companion.mesa.lanes.driver import module_ir
from companion.mesa.lanes.jit import compiled
from companion.mesa.lanes.layout import (
    NL,
    gradient_slots,
    lane_sequences,
    scratch_rows,
    sequence_rows,
    table_rows,
)

__all__ = ["NL", "table_rows", "sequence_rows", "gradient_slots", "scratch_rows", "lane_sequences", "bodies",
           "module_ir", "compiled"]
