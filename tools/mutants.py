"""A mutation check: seed plausible bugs, one at a time, into a copy of the package and count how many the
fast suite catches (``make mutants``).

Each mutant is a small textual edit of one source file (a sign, an off-by-one, a wrong seed stream, a
dropped factor) of the kind a careful reviewer would fear. For each, the package is copied to a temporary
directory, the edit applied there, and ``pytest -m "not slow" -x`` run with that copy first on
``PYTHONPATH``; the mutant is *killed* when the fast suite fails. The working tree is never modified.

Usage::

    python tools/mutants.py            # every mutant; prints a table and the kill count
    python tools/mutants.py -k stats   # only mutants whose name contains "stats"
    python tools/mutants.py --list
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "companion"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to src/companion
    pattern: str  # a regular expression that must match exactly once
    replacement: str
    why: str


MUTANTS = [
    # ---- the noise model and the verdicts
    Mutant("stats_jackknife_sqrtG", "stats.py", r"se = np\.sqrt\(\(G - 1\) / G \* \(dev\*\*2\)\.sum\(axis=axis\)\)",
           "se = np.sqrt((G - 1) * (dev**2).sum(axis=axis))", "jackknife SE inflated by sqrt(G)"),
    Mutant("stats_mean_se_n", "stats.py", r"se = x\.std\(axis=axis, ddof=1\) / math\.sqrt\(n\)",
           "se = x.std(axis=axis, ddof=1) / n", "standard error of a mean divided by N instead of sqrt(N)"),
    Mutant("stats_median_se_halfwidth", "stats.py", r"return float\(med\), float\(\(hi - lo\) / 2\)",
           "return float(med), float(hi - lo)", "median SE twice too wide"),
    Mutant("verdict_falsifier_ignored", "verdict.py", r"status = \"failed\" if not accepted else \(\"passed\" if rejected else \"not_resolvable\"\)",
           'status = "failed" if not accepted else "passed"', "a falsifier that is never consulted"),
    Mutant("verdict_upper_sign", "verdict.py", r"error, accepted = meas - pred, meas <= pred \+ tol",
           "error, accepted = meas - pred, meas >= pred - tol", "an upper bound checked as a lower bound"),
    Mutant("stats_critical_normal", "stats.py", r"return float\(st\.t\.isf\(st\.norm\.sf\(z\), dof\)\)",
           "return float(z)", "degrees of freedom ignored: few-replicate SEs judged at the normal z"),
    Mutant("stats_richardson_sqrt", "stats.py", r"measured=\(4 \* mb - ms\) / 3",
           "measured=2 * mb - ms", "Richardson for an m^-1/2 bias (a wrong combination for a 1/m bias)"),
    Mutant("verdict_manifest_unchecked", "verdict.py", r"out \+= \[f\"\{c\}: recorded but not declared",
           "out += [] and [f\"{c}: recorded but not declared", "undeclared claims accepted"),
    # ---- cot theory
    Mutant("cot_eta_star", "cot/theory/no_cot.py", r"return n / \(n \+ d \+ 1\)", "return n / (n + d)",
           "eta* = n/(n+d) (a dropped +1)"),
    Mutant("cot_floor", "cot/theory/no_cot.py", r"return d \* \(d \+ 1\) / \(n \+ d \+ 1\)", "return d * d / (n + d + 1)",
           "no-CoT floor d^2/(n+d+1)"),
    Mutant("cot_wishart_m2", "cot/theory/wishart.py", r"total = \(n \+ a - 1\) \* term\(a - 1\)",
           "total = (n + a) * term(a - 1)", "Wishart trace moments' loop equation off by one"),
    Mutant("cot_gd_exact_range", "cot/theory/gd.py", r"for p in range\(2 \* k \+ 1\)", "for p in range(2 * k)",
           "k-step GD error misses its top power (off by one)"),
    Mutant("cot_gd_samples_k", "cot/theory/gd.py", r"r = residual_power\(c, eigs, 2 \* k\)",
           "r = residual_power(c, eigs, k)", "per-prompt GD error with (1 - eta lambda)^k instead of ^2k"),
    Mutant("cot_mp_edge", "cot/theory/mp.py", r"\(1 \+ np\.sqrt\(gamma\)\) \*\* 2", "(1 + gamma) ** 2",
           "Marchenko-Pastur upper edge without the square root"),
    # ---- mesa theory, data and training
    Mutant("mesa_position_loss_t", "mesa/theory.py", r"\(d - 1\) \* mo\.m24 / \(t - 1\)\)",
           "(d - 1) * mo.m24 / t)", "per-position loss uses t instead of t - 1 pairs"),
    Mutant("mesa_test_seed", "mesa/train.py", r"MESA_TEST_DATA\.entropy\(cfg\.seed\)",
           "MESA_TRAIN_DATA.entropy(cfg.seed)", "the test set drawn with the training set's seed stream"),
    Mutant("mesa_init_seed", "mesa/train.py", r"MESA_INIT\.rng\(cfg\.seed\)",
           "MESA_TRAIN_DATA.rng(cfg.seed)", "the Gaussian init drawn from the training data's stream"),
    Mutant("mesa_gauss_m6", "mesa/theory.py", r"return Moments\(s\*\*2, 3 \* s\*\*4, 15 \* s\*\*6, 3 \* s\*\*6\)",
           "return Moments(s**2, 3 * s**4, 3 * s**6, 3 * s**6)", "Gaussian sixth moment 3 s^6 instead of 15 s^6"),
    Mutant("mesa_harmonic_short", "mesa/theory.py", r"for s in range\(1, n \+ 1\)\)\)", "for s in range(1, n)))",
           "harmonic number H_N stops one term short"),
    Mutant("mesa_alpha_d", "mesa/theory.py", r"N \* mo\.m6 \+ \(d - 1\) \* harmonic\(N\) \* mo\.m24",
           "N * mo.m6 + d * harmonic(N) * mo.m24", "alpha counts d instead of d - 1 other coordinates"),
    Mutant("verdict_z_dropped", "verdict.py", r"tolerance=crit \* se_ \+ fl,", "tolerance=se_ + fl,",
           "a statistical tolerance of 1 SE whatever z says"),
    Mutant("mesa_equivariant_offdiag_step", "mesa/theory.py", r"off = 0\.0 if masked else lr / \(d \* \(d - 1\)\)",
           "off = 0.0 if masked else lr / d", "unmasked equivariant GD steps the off-diagonal entries like the diagonal"),
    # ---- the fused mesa kernel's thread split
    Mutant("kernels_thread_split_drops_a_block", "mesa/lanes/host.py",
           r"cuts = \[i \* nblocks // n for i in range\(n \+ 1\)\]",
           "cuts = [i * nblocks // n for i in range(n)] + [nblocks - 1]",
           "a sweep on several threads skips the last block of sequences"),
    Mutant("lanes_gradient_conjugate_dropped", "mesa/lanes/bodies.py",
           r'W\.e\(f"\{gi\} \+= x\{k\}_r \* \{gF\}_i - x\{k\}_i \* \{gF\}_r"\)',
           'W.e(f"{gi} += x{k}_r * {gF}_i + x{k}_i * {gF}_r")',
           "the generated kernel accumulates x dF instead of conj(x) dF into dL/dC (imaginary part)"),
    Mutant("tables_rotation_sign", "mesa/lanes/host.py", r"c, s = c \* c1 - s \* s1, s \* c1 \+ c \* s1",
           "c, s = c * c1 - s * s1, s * c1 - c * s1", "lam^t advanced along a run of positions by the wrong rotation"),
    # ---- caches
    Mutant("cache_hash_ignores_contents", "cache.py", r"h\.update\(normalised_source\(Path\(f\)\.read_text\(\)\)\)", "pass",
           "source_hash ignores file contents"),
    Mutant("cache_key_drops_constants", "cache.py", r"return ast\.dump\(_drop_docstrings\(ast\.parse\(text\)\), include_attributes=False\)",
           "return ast.dump(_drop_docstrings(ast.parse(text.replace('1', '2'))), include_attributes=False)",
           "the run-cache key ignores a changed digit of a constant"),
    Mutant("cache_closure_skips_relative", "cache.py", r"if node\.level:", "if node.level and False:",
           "the run-cache sources miss relatively imported modules (e.g. kernels.py)"),
]


def _apply(m: Mutant, pkg: Path) -> bool:
    f = pkg / m.file
    if not f.is_file():
        return False
    text = f.read_text()
    new, n = re.subn(m.pattern, lambda _: m.replacement, text)
    if n != 1:
        return False
    f.write_text(new)
    return True


def run(selected: list[Mutant], pytest_args: list[str], timeout: float) -> int:
    killed = survived = skipped = 0
    rows = []
    for m in selected:
        with tempfile.TemporaryDirectory() as tmp:
            pkg = Path(tmp) / "companion"
            # numba's cached kernels (``__pycache__/*.nbi|*.nbc``) are copied with their sources' mtimes: the
            # cache index is keyed on the source file's stamp and the function's bytecode, not on its path,
            # so an unmutated kernels.py loads its compiled kernels instead of recompiling (~1 min per mutant)
            shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("*.pyc"))
            if not _apply(m, pkg):
                rows.append((m.name, "NOT APPLIED (pattern not found once)", 0.0))
                skipped += 1
                continue
            env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       PYTHONDONTWRITEBYTECODE="1")
            env.pop("NUMBA_CACHE_DIR", None)
            t = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=timeout)
                dead = proc.returncode != 0
                by = next((ln.split(" - ")[0].replace("FAILED ", "") for ln in proc.stdout.splitlines()
                           if ln.startswith(("FAILED", "ERROR"))), "")
            except subprocess.TimeoutExpired:
                dead, by = True, "timeout"
            sec = time.perf_counter() - t
            killed += dead
            survived += not dead
            rows.append((m.name, "killed" if dead else "SURVIVED", sec))
            print(f"{'killed  ' if dead else 'SURVIVED'} {sec:6.1f} s  {m.name}: {m.why}"
                  + (f"\n           by {by}" if dead and by else ""), flush=True)
    print(f"\n{killed} of {killed + survived} mutants killed by the fast suite"
          + (f"; {skipped} not applied (stale pattern)" if skipped else ""))
    for name, status, _ in rows:
        if status.startswith("NOT"):
            print(f"  {name}: {status}")
    return 0 if survived == 0 and skipped == 0 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only mutants whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant (a hang counts as killed)")
    args = ap.parse_args(argv)
    selected = [m for m in MUTANTS if args.k in m.name]
    if args.list:
        for m in selected:
            print(f"{m.name:36s} {m.file:22s} {m.why}")
        return 0
    pytest_args = ["-m", "not slow", "-x", "-q", "-p", "no:cacheprovider"]
    return run(selected, pytest_args, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
