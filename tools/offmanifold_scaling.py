"""How the off-manifold feedback of trained mesa models scales with the training-set size m.

A trained model's ab at the last epoch differs from the GD restricted to the diagonal manifold on the same
training set by its off-manifold feedback ``off`` (companion.mesa.evidence.ab_evidence). The replicate claims
extrapolate ab to m -> infinity with a 1/m model (companion.stats.richardson); the model holds where ``m * off``
no longer depends on m. This script trains ``--reps`` independent sets at every m of ``--m`` (diagonal init)
and prints, per m, the mean of ``off`` with its standard error, ``m * off``, the mean deviation of ab from
population GD with its spread, and for each pair (m, 4m) of the ladder the Richardson extrapolation of ``off``
(0 where the 1/m model holds). The sizes, epochs and step size are those of a point of the Theorem 4.1 page
(``--point``: its smoke point by default, ``domain:I`` or ``paper``, as ``companion calibrate`` reads them; the
Gaussian law at ``--scale``, the page's middle diagonal init); an option given overrides the point::

    python tools/offmanifold_scaling.py                                  # the Theorem 4.1 smoke point, sigma = 1
    python tools/offmanifold_scaling.py --point paper --m 625 2500 10000 --reps 10
    python tools/offmanifold_scaling.py --x1 sphere                      # Gaussian directions, one norm
    python tools/offmanifold_scaling.py --tilt 6                         # training sets tilted by r^6

``--x1`` draws the first tokens of the Gaussian law otherwise, to find what makes ``m * off`` depend on m:
``sphere`` scales Gaussian vectors to the sphere of the same mean square (no spread of norms), ``radii`` keeps
Gaussian vectors but stratifies their norms over the set (the quantiles of the chi distribution, shuffled: the
sample's moments of the norm nearly exact, the law of each token unchanged). Both replace
``companion.mesa.data.sample_x1`` in this process only, with the run cache off (their runs must not be stored under
the Gaussian law's keys); ``population-GD ab`` stays the Gaussian law's. ``--tilt K`` trains on the law's
importance samples tilted by r^K (``companion.mesa.data.generate``; the design of the Theorem 4.1 page's Gaussian
replicates), an unbiased estimate of the same population loss.

Not a test: minutes of training, and its purpose is to measure where the extrapolation's model holds.
"""

from __future__ import annotations

import argparse
import os
import sys

NOTEBOOK = "mesa/thm4_1_emergence"
X1_DRAWS = ("law", "sphere", "radii")


def _draw_x1(kind: str):
    """A stand-in for ``companion.mesa.data.sample_x1`` that draws the Gaussian law's first tokens as ``kind`` says
    (the module docstring); other laws as before."""
    import numpy as np
    from scipy.stats import chi2

    from companion.mesa import data

    law_x1 = data.sample_x1

    def sample_x1(law, m, d, scale, rng):
        if law != "gaussian":
            return law_x1(law, m, d, scale, rng)
        g = rng.standard_normal((m, d))
        u = g / np.linalg.norm(g, axis=1, keepdims=True)  # a uniform direction
        if kind == "sphere":
            return scale * np.sqrt(d) * u
        strata = (rng.permutation(m) + rng.uniform(size=m)) / m  # one uniform per stratum, shuffled
        return scale * u * np.sqrt(chi2.ppf(strata, d))[:, None]

    return sample_x1


def _point(point: str, law: str, scale: float) -> dict:
    """d, T, epochs, the step size of ``law`` at ``scale`` and the middle diagonal init of the Theorem 4.1 page at
    ``point`` (the notebook's defaults, :mod:`companion.mesa.paper`, overridden by the point's parameters; a step
    size the point leaves to the stability bound comes from it, as the page computes it)."""
    from companion.mesa import paper, stability
    from companion.mesa.domain import diagonal_inits
    from companion.run.calibrate import point_parameters

    key, table = ("sigmas", "lrs_gauss") if law == "gaussian" else ("cs", "lrs_sparse")
    p = {**paper.COMMON, "a0s": [a for a, _ in paper.INITS], "b0s": [b for _, b in paper.INITS],
         key: [x for x, _ in paper.TABLE1.get(law, [])], table: [lr for _, lr in paper.TABLE1.get(law, [])],
         **point_parameters(NOTEBOOK, point)}
    inits = diagonal_inits(p["a0s"], p["b0s"])
    lr = (dict(zip(p[key], p[table])).get(scale)
          or stability.stable_lr(law, scale, p["d"], p["T"], inits, paper.KAPPA, p["seed"]))
    return dict(d=p["d"], T=p["T"], epochs=p["epochs"], lr=lr, init=inits[len(inits) // 2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", default="smoke", help="point of the Theorem 4.1 page: smoke (default), domain:I, paper")
    ap.add_argument("--law", default="gaussian", help="data law (default gaussian)")
    ap.add_argument("--scale", type=float, default=1.0, help="its scale (default 1)")
    ap.add_argument("--d", type=int, help="token dimension (default: the point's)")
    ap.add_argument("--T", type=int, help="sequence length (default: the point's)")
    ap.add_argument("--lr", type=float, help="GD step size (default: the point's for this scale)")
    ap.add_argument("--epochs", type=int, help="GD epochs (default: the point's)")
    ap.add_argument("--init", type=float, nargs=2, metavar=("A0", "B0"), help="diagonal init (default: the page's "
                    "middle init at the point)")
    ap.add_argument("--m", type=int, nargs="+", default=[100, 400, 1600, 6400], help="training-set sizes")
    ap.add_argument("--reps", type=int, default=16, help="independent training sets per size (default 16)")
    ap.add_argument("--seed", type=int, default=5000, help="first seed of the training sets (default 5000)")
    ap.add_argument("--tilt", type=int, default=0, help="train on sets tilted by r^K (Gaussian law; default 0)")
    ap.add_argument("--x1", choices=X1_DRAWS, default="law", help="how the Gaussian law's first tokens are drawn: "
                    "law (default), sphere (one norm), radii (stratified norms)")
    args = ap.parse_args()
    if args.tilt and args.x1 != "law":
        print(f"offmanifold_scaling: --tilt draws the first tokens itself; it needs --x1 law, not {args.x1!r}",
              file=sys.stderr)
        return 2
    if args.x1 != "law" and args.law != "gaussian":
        print(f"offmanifold_scaling: --x1 {args.x1} draws Gaussian first tokens otherwise; it needs --law gaussian, "
              f"not {args.law!r}", file=sys.stderr)
        return 2

    import numpy as np

    from companion import params
    from companion.mesa.evidence import population_ab, restricted_ab
    from companion.mesa.train import run
    from companion.run.inputs import SweepError
    from companion.stats import richardson

    if args.x1 != "law":
        from companion.mesa import data

        data.sample_x1 = _draw_x1(args.x1)
        # runs and statistics of these tokens must never enter the run cache under the Gaussian law's keys
        os.environ["COMPANION_CACHE_DIR"] = "off"
    np.seterr(over="ignore", invalid="ignore")  # a step beyond the bound overflows the prediction; run() refuses it
    try:
        pt = _point(args.point, args.law, args.scale)
        d, T, lr, epochs = (pt[k] if v is None else v for k, v in
                            (("d", args.d), ("T", args.T), ("lr", args.lr), ("epochs", args.epochs)))
        a0, b0 = pt["init"] if args.init is None else args.init
        sizes = [params.integer("--m", m, min=1) for m in args.m]
        reps = params.integer("--reps", args.reps, min=2)
        pop = population_ab(args.law, args.scale, d, T, a0, b0, lr, epochs)[-1]
        tilt = params.integer("--tilt", args.tilt, min=0)
        kw = dict(law=args.law, scale=args.scale, d=d, T=T, m_test=10, a0=a0, b0=b0, lr=lr, epochs=epochs, tilt=tilt)
        off, dev = {}, {}
        for m in sizes:
            rs = [run(**kw, m=m, seed=args.seed + k) for k in range(reps)]
            off[m] = np.array([r.ab[-1] - restricted_ab(r) for r in rs])
            dev[m] = np.array([r.ab[-1] - pop for r in rs])
    except (params.ParameterError, SweepError) as exc:
        print(f"offmanifold_scaling: {exc}", file=sys.stderr)
        return 2
    how = ("" if args.x1 == "law" else ", x1 " + args.x1) + (f", tilted by r^{tilt}" if tilt else "")
    print(f"population-GD ab {pop:.6g} ({args.law}{how}, scale {args.scale:g}, d = {d}, T = {T}, lr = {lr:g}, "
          f"{epochs} epochs, init {a0:g} {b0:g}; {reps} sets per m)")
    print(f"{'m':>8} {'mean off':>11} {'+-':>9} {'m*off':>8} {'mean dev':>11} {'+-':>9} {'sd dev':>9}")
    se = {m: off[m].std(ddof=1) / np.sqrt(reps) for m in sizes}
    for m in sizes:
        print(f"{m:8d} {off[m].mean():11.4e} {se[m]:9.2e} {m * off[m].mean():8.3f} {dev[m].mean():11.4e} "
              f"{dev[m].std(ddof=1) / np.sqrt(reps):9.2e} {dev[m].std(ddof=1):9.2e}")
    for m in sizes:
        if 4 * m in off:
            r = richardson(off[4 * m], off[m])
            print(f"Richardson of off over (m, m/4) = ({4 * m}, {m}): {r['measured']:.3e} +- {r['se']:.1e} "
                  f"({r['measured'] / off[4 * m].mean():+.0%} of off at {4 * m})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
