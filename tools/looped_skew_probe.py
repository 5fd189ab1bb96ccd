r"""Probe the optimum of the sparse-block looped transformer (cot/looped, parts (b) and (c)) beyond its families.

The looped LSA with the sparse blocks :math:`W_{13} = W`, :math:`V_{31} = V` and :math:`W_{24} = -1`, run k times,
has the outcome loss :math:`\E\|(I + \sum_{i<k}(I + VSW)^i VS)\,w^\star\|^2`. Summing the geometric series
(:math:`\sum_{i<k} M^i (M - I) = M^k - I` with :math:`M = I + VSW`) gives the error

.. math:: e = W^{-1}\bigl[(W - I) + (I + QS)^k\bigr] w^\star, \qquad Q = WV,

so that for an isotropic :math:`w^\star` the loss is :math:`\E\,\mathrm{tr}(YY^\top)` with
:math:`Y = W^{-1}[(W - I) + (I + QS)^k]` (:func:`companion.cot.theory.loops.looped_sparse_errors`). The book's part
(b) minimises it over the isotropic family :math:`W = I/b`, :math:`Q = -cI`
(:func:`companion.cot.theory.loops.looped_two_param_optimum`), its part (c) over the blocks with a rotation
(:func:`companion.cot.theory.loops.looped_rotation_optimum`). This probe evaluates both on one Monte-Carlo sample of
:math:`S = XX^\top/n` (X standard normal, d x n) and minimises it over all matrices W, Q: Adam from the isotropic
optimum plus a small random matrix, on part of the sample, the loss evaluated on all of it, with the eigenvalues of
the Q found (does a family larger than (c) do better?);

and, with ``--train``, trains the page's sparse-block models (``companion.cot.results.looped.train_looped_sparse``
with ``SPARSE_TRAIN``, seed ``--seed``) and runs each replicate and the isotropic optimum's model on the same
fresh prompts (paired: trained minus optimum, mean over the replicates with its standard error over them)::

    python tools/looped_skew_probe.py --d 10 --n 20 --k 3            # the page's defaults
    python tools/looped_skew_probe.py --d 10 --n 20 --k 3 --train

Not a test: the investigation behind part (c) (the CHANGELOG says what it measured); it checks that the book's
loss of the isotropic blocks is the summed series' at the isotropic optimum.
"""

from __future__ import annotations

import argparse
import math
import sys


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}; got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0; got {text!r}")
        return value
    return parse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=_positive(int), default=10, help="dimension d >= 2 (default 10)")
    ap.add_argument("--n", type=_positive(int), default=20, help="examples per prompt n (default 20)")
    ap.add_argument("--k", type=_positive(int), default=3, help="loops k >= 1 (default 3)")
    ap.add_argument("--num", type=_positive(int), default=20000, help="matrices S in the sample (default 20000)")
    ap.add_argument("--steps", type=_positive(int), default=1500, help="Adam steps of the full matrices (default 1500)")
    ap.add_argument("--train", action="store_true", help="also train the page's sparse-block models and pair them")
    ap.add_argument("--prompts", type=_positive(int), default=20000, help="prompts of the paired comparison")
    ap.add_argument("--seed", type=int, default=1, help="seed of the sample and of the training (default 1)")
    args = ap.parse_args()
    if args.d < 2:
        ap.error(f"--d must be >= 2; got {args.d}")
    if args.prompts < 100:
        ap.error(f"--prompts must be >= 100 (shared by the trained replicates); got {args.prompts}")

    import numpy as np
    import torch

    d, n, k = args.d, args.n, args.k
    g = torch.Generator().manual_seed(args.seed)
    X = torch.randn(args.num, d, n, generator=g, dtype=torch.float64)
    S = X @ X.transpose(1, 2) / n
    eye = torch.eye(d, dtype=torch.float64)

    def loss(W, Q, S=S):
        Y = torch.linalg.solve(W, (W - eye) + torch.linalg.matrix_power(eye + Q @ S, k))
        return (Y * Y).sum(dim=(1, 2)).mean()

    # the isotropic optimum of part (b), the book's own on the spectra of the same matrices; the loss above at it
    # is the book's loss there (the two forms of one series)
    from companion.cot.theory.loops import looped_rotation_optimum, looped_two_param_optimum

    c, b, book_loss = looped_two_param_optimum(k, torch.linalg.eigvalsh(S).numpy())
    iso_fun = float(loss(eye / b, -c * eye))
    if abs(iso_fun - book_loss) > 1e-8 * max(1.0, book_loss):
        raise SystemExit(f"the summed series gives {iso_fun} at the isotropic optimum, the book's loss {book_loss}")
    rot = looped_rotation_optimum(k, S.numpy(), (c, b))
    rot_fun = float(loss(torch.linalg.inv(torch.from_numpy(rot["A"])), torch.from_numpy(rot["Q"])))
    if abs(rot_fun - rot["loss"]) > 1e-8 * max(1.0, rot["loss"]):
        raise SystemExit(f"the summed series gives {rot_fun} at the rotation optimum, the book's loss {rot['loss']}")
    print(f"d = {d}, n = {n}, k = {k}, {args.num} matrices S (seed {args.seed})")
    print(f"  isotropic (c, b) = ({c:.4f}, {b:.4f}): loss {iso_fun:.5f}")
    print(f"  with a rotation (part (c): a, beta, x, y) = ({rot['a']:.4f}, {rot['beta']:.4f}, {rot['x']:.4f}, "
          f"{rot['y']:.4f}): loss {rot['loss']:.5f} ({iso_fun - rot['loss']:+.5f} below the isotropic)")
    torch.manual_seed(args.seed)
    W = (eye / b + 0.05 * torch.randn(d, d, dtype=torch.float64)).requires_grad_()
    Q = (-c * eye + 0.05 * torch.randn(d, d, dtype=torch.float64)).requires_grad_()
    adam = torch.optim.Adam([W, Q], lr=3e-3)
    part = S[: max(1, args.num // 5)]
    for _ in range(args.steps):
        adam.zero_grad()
        loss(W, Q, part).backward()
        adam.step()
    with torch.no_grad():
        full, ev = float(loss(W, Q)), np.linalg.eigvals(Q.numpy())
    print(f"  all matrices (Adam, {args.steps} steps on {len(part)} of the matrices): loss {full:.5f} "
          f"({iso_fun - full:+.5f} below the isotropic); eigenvalues of Q: real parts {ev.real.min():.3f} to "
          f"{ev.real.max():.3f}, imaginary parts up to {abs(ev.imag).max():.3f}")
    if not args.train:
        return 0

    from companion.cot.data import make_generator, sample_prompts
    from companion.cot.model import looped_predict, per_prompt_error, sparse_parameters
    from companion.cot.results import looped
    from companion.seeds import COT_EVAL

    W_KQ, W_PV = looped.train_looped_sparse(d, n, k, seed=args.seed, **looped.SPARSE_TRAIN)
    R = W_KQ.shape[0]
    opt = sparse_parameters(-c * b * np.eye(d), np.eye(d) / b, -1.0)
    diffs = []
    with torch.no_grad():
        for r in range(R):
            pr = sample_prompts(args.prompts // R, d, n, make_generator(COT_EVAL.replicate(args.seed, r)))
            e_t = per_prompt_error(looped_predict(pr, W_KQ[r], W_PV[r], k), pr).numpy()
            e_o = per_prompt_error(looped_predict(pr, *opt, k), pr).numpy()
            diffs.append(float((e_t - e_o).mean()))
    m, se = float(np.mean(diffs)), float(np.std(diffs, ddof=1) / math.sqrt(R))
    M = (W_PV[0, d + 1: 2 * d + 1, :d] @ W_KQ[0, :d, d + 1: 2 * d + 1]).numpy()
    ev = np.linalg.eigvals(M)
    print(f"  {R} sparse-block models trained ({looped.SPARSE_TRAIN['steps']} Adam steps), each paired with the "
          f"isotropic optimum on {args.prompts // R} prompts: trained minus optimum {m:+.5f} +- {se:.5f} "
          f"(z {m / se:+.2f}); eigenvalues of V31 W13 of replicate 0: real parts {ev.real.min():.3f} to "
          f"{ev.real.max():.3f}, imaginary parts up to {abs(ev.imag).max():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
