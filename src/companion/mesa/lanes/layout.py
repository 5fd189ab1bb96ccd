"""Where each number lives: the lane layout of the tables, the sequences, the weights, the scratch and the
gradient slots of the lane kernel.

A *row* is 16 consecutive numbers, one per lane (lane ``l`` of block ``b`` holds sequence ``16 b + l``; the
last block is padded with zero sequences). Per block of 16 sequences:

* ``TB[b, t, row, l]``: the tables at each position, rows ``x_t`` (re, im), ``lam^t`` (re, im) and
  ``y_t = x_{t+1}`` (re, im), d rows each (:func:`table_rows`, offsets :func:`table_offsets`);
* ``SQ[b, row, l]``: the sequences, rows ``z = x_1`` (re, im), ``lam`` (re, im), d rows each, and ``K``
  (re, im), d^2 rows each, row-major (:func:`sequence_rows`, offsets :func:`sequence_offsets`);
* ``ACC[row, l]``, one per thread: the per-sequence maps ``C`` and ``R_v`` (written once per block) and the
  running sums ``dL/dC`` and ``dL/dR_v`` over the positions (:func:`scratch_rows`, :func:`scratch_offsets`);
* ``W``: the weights, not in lanes: ``Re W_KQ, Im W_KQ, Re W_PV, Im W_PV``, each row-major
  (:func:`weight_offset`);
* ``GO[b]``: the block's gradient summed over its 16 lanes in float64, ``dL/dW_KQ`` then ``dL/dW_PV``,
  complex as (re, im) pairs, row-major (:func:`gradient_slots`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["NL", "table_offsets", "sequence_offsets", "table_rows", "sequence_rows", "gradient_slots", "scratch_rows", "scratch_offsets",
           "weight_offset", "lane_sequences"]

NL = 16  # lanes per vector


def table_offsets(d: int) -> dict[str, int]:
    """First row of each family of the tables TB at one position: ``xr, xi`` (x_t), ``pr, pi`` (lam^t),
    ``yr, yi`` (y_t = x_{t+1}), d rows each."""
    return {"xr": 0, "xi": d, "pr": 2 * d, "pi": 3 * d, "yr": 4 * d, "yi": 5 * d}


def sequence_offsets(d: int) -> dict[str, int]:
    """First row of each family of the sequences SQ: ``zr, zi`` (z = x_1), ``lr, li`` (lam), d rows each;
    ``Kr, Ki`` (K, row-major), d^2 rows each."""
    return {"zr": 0, "zi": d, "lr": 2 * d, "li": 3 * d, "Kr": 4 * d, "Ki": 4 * d + d * d}


def table_rows(d: int) -> int:
    """Rows (of 16 lanes) of the tables per block and position: x_t, lam^t, x_{t+1}, real and imaginary."""
    return 6 * d


def sequence_rows(d: int) -> int:
    """Rows (of 16 lanes) of the sequences per block: x_1, lam (d each) and K (d^2), real and imaginary."""
    return 4 * d + 2 * d * d


def gradient_slots(d: int) -> int:
    """float64 numbers of one block's gradient: dL/dW_KQ (2d x 2d) then dL/dW_PV (d x 2d), complex."""
    return 2 * (4 * d * d + 2 * d * d)


def scratch_rows(d: int) -> int:
    """Rows (of 16 lanes) of the scratch ACC a thread needs for coordinate dimension d."""
    return scratch_offsets(d)["total"]


def scratch_offsets(d: int) -> dict[str, int]:
    """First row of each scratch family in ACC, and ``"total"``.

    ``Cr, Ci``: the map C (d x (2d+2)), stored column by column (column c, coordinate k at ``c d + k``);
    ``Vr, Vi``: R_v^T (d x (d+1)), row-major (output a, column i at ``a (d+1) + i``);
    ``gCr, gCi``: dL/dC, row-major (coordinate k, column c at ``k (2d+2) + c``);
    ``gRr, gRi``: dL/dR_v ((d+1) x d), row-major (row i, output a at ``i d + a``).
    The maps come first: a position only reads the rows below ``gCr``.
    """
    nc = 2 * d + 2
    rows, nxt = {}, 0
    for name, n in (("Cr", nc * d), ("Ci", nc * d), ("Vr", d * (d + 1)), ("Vi", d * (d + 1)),
                    ("gCr", d * nc), ("gCi", d * nc), ("gRr", (d + 1) * d), ("gRi", (d + 1) * d)):
        rows[name] = nxt
        nxt += n
    rows["total"] = nxt
    return rows


def weight_offset(d: int, name: str) -> int:
    """Offset in W of the weight named ``wk{i}_{k}_{r|i}`` (W_KQ[i, k], real or imaginary part) or
    ``wp{a}_{k}_{r|i}`` (W_PV[a, k])."""
    D = 2 * d
    kind, rest = name[:2], name[2:]
    i, k, part = rest.split("_")
    i, k = int(i), int(k)
    if kind == "wk":
        return (0 if part == "r" else D * D) + i * D + k
    return 2 * D * D + (0 if part == "r" else d * D) + i * D + k


def lane_sequences(z, lam, K, real_dtype) -> np.ndarray:
    """x_1, lam and K (complex, (m, d), (m, d), (m, d, d)) in the lane layout ``(nb, sequence_rows(d) 16)``;
    padding sequences have x_1 = 0 and the phases of sequence 0."""
    m, d = z.shape
    nb = -(-m // NL)
    pad = nb * NL - m
    z = np.concatenate([z, np.zeros((pad, d), z.dtype)])
    lam = np.concatenate([lam, np.repeat(lam[:1], pad, 0)])
    K = np.concatenate([K, np.repeat(K[:1], pad, 0)])
    rows = np.concatenate([z.real, z.imag, lam.real, lam.imag, K.real.reshape(-1, d * d), K.imag.reshape(-1, d * d)],
                          axis=1)
    return np.ascontiguousarray(rows.reshape(nb, NL, -1).transpose(0, 2, 1), dtype=real_dtype).reshape(nb, -1)
