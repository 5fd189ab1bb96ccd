r"""Calibration of the statistical claims: each claim's signed z over many seeds against the law its band assumes.

A statistical claim compares a measurement :math:`\hat\theta` with an independent prediction :math:`\theta_0`
within :math:`c\,\widehat{\mathrm{se}} + \text{floor}`. Its band is honest at a point of the domain when, over
seeds, the signed score

.. math:: z = (\hat\theta - \theta_0) / \widehat{\mathrm{se}}

follows the reference law the critical value :math:`c` was taken from: the standard normal, or Student's t
with the record's degrees of freedom. Each run's z is mapped to a normal score
:math:`u = \Phi^{-1}(F_{\text{ref}}(z))` (``u = z`` for the normal law), so one set of limits serves both:

* **bias**: the mean of u differs from 0 by more than :data:`BIAS_LIMIT` of its standard error
  :math:`s_u/\sqrt{n}`;
* **spread**: the root-mean-square of u is above :data:`RMS_HIGH` (the SE understates the noise) or below
  :data:`RMS_LOW` (the band hides real deviations);
* **skew**: D'Agostino's z of the skewness of u is beyond :data:`SKEW_LIMIT` (one tail heavier than the reference
  law's; from :data:`SKEW_MIN_SEEDS` seeds on);
* **chance**: a calibrated claim breaks these limits by chance too, the more often the fewer its seeds
  (:func:`limit_chance`, under normal scores; the Calibration page states it at the committed seeds); an entry's own
  :attr:`ClaimCalibration.chance` is the probability of a deviation at least as large as the one it shows;
* **misses**: the runs whose measurement left its band (a failure, or a ``not_resolvable`` that an undecided
  gate made of a miss), with the 95 % Clopper-Pearson interval of their rate: for a correct theorem, each is a
  false alarm that the band's level says is rarer than 1 in 10 000.

A calibration file (``calibration/<notebook>__<point>.json``, committed) holds the raw per-seed scores and
statuses of one notebook at one point of its domain, with the code version they were measured at
(:func:`code_version`); everything here is computed from it without rerunning anything. Files are written by
:mod:`companion.run.calibrate` (``companion calibrate``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import math
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from . import notebooks as nbs
from .cache import import_closure
from .claims import REJECTED
from .paths import repo_root
from .text import slug
from .verdict import result_of

__all__ = ["BIAS_LIMIT", "RMS_HIGH", "RMS_LOW", "SKEW_LIMIT", "SKEW_MIN_SEEDS",
           "FIRST_SEED", "SMOKE_SEEDS", "DOMAIN_SEEDS", "HELDOUT_FIRST_SEED", "HELDOUT_SEEDS",
           "default_seeds", "DEGENERATE_SE", "ClaimCalibration",
           "code_version", "signed_z", "normal_score", "normal_scores", "clopper_pearson", "MissCount", "miss_counts",
           "code_text", "collect", "claim_summaries", "read", "read_all", "calibration_dir", "file_name",
           "build_false_fail_rate", "run_failures", "median", "limit_chance"]

#: a claim is biased when its mean normal score is further than this many of its standard errors from 0
BIAS_LIMIT = 3.0
#: a claim's root-mean-square normal score above this: its standard error understates the noise
RMS_HIGH = 1.25
#: ... below this: its band is wider than the noise and hides real deviations
RMS_LOW = 0.5
#: a claim is skewed when the skewness of its normal scores is further than this many standard errors from 0
#: (D'Agostino's test, ``scipy.stats.skewtest``, from SKEW_MIN_SEEDS seeds on): one tail heavier than the
#: reference law's, which the mean and the root-mean-square do not see (the t statistic of a mean of skewed values:
#: a sample without the large values has a low mean and a low standard error at once)
SKEW_LIMIT, SKEW_MIN_SEEDS = 3.0, 8
#: calibration seeds start here, away from the seeds the book and the tests run (1, 2, ...)
FIRST_SEED = 1000
#: the seeds of the committed calibration at a smoke point, and at a domain point: the fewer the seeds, the more
#: often a calibrated claim breaks the limits by chance (:func:`limit_chance`)
SMOKE_SEEDS, DOMAIN_SEEDS = 100, 50
#: the held-out check (``calibration/heldout/``, the Calibration page): every smoke point again at HELDOUT_SEEDS seeds
#: from HELDOUT_FIRST_SEED, which the committed set does not hold
HELDOUT_FIRST_SEED, HELDOUT_SEEDS = 7000, 20
#: an SE below this, relative to the prediction, is round-off: the quantity has no noise at that point
DEGENERATE_SE = 1e-12
#: the package files outside a result's import closure whose code decides a record's status
_JUDGES = ("verdict.py", "stats.py", "claims.py")


def default_seeds(point: str) -> int:
    """How many seeds a calibration at ``point`` runs unless told: :data:`SMOKE_SEEDS` at the smoke point,
    :data:`DOMAIN_SEEDS` at a domain point or the paper's settings (whose pages run minutes per seed)."""
    return SMOKE_SEEDS if point == "smoke" else DOMAIN_SEEDS


def calibration_dir() -> Path:
    """The committed calibration set: ``<book root>/calibration``."""
    return repo_root() / "calibration"


def file_name(notebook: str, point: str) -> str:
    """``mesa__thm4_1_emergence__smoke.json``: one notebook at one point."""
    return f"{slug(notebook)}__{point.replace(':', '')}.json"


def code_text(text: str) -> str:
    """The code of a Python source without its prose, as text that does not depend on the Python version: the
    source with its comments and the docstrings of the module, its classes and functions cut out, trailing spaces
    and blank lines dropped, indentation kept (it is code). Two sources that differ only in prose give the same
    text; any change of code gives a different one."""
    lines = io.StringIO(text).readlines()  # the lines of ast and tokenize: str.splitlines also breaks at \f, \v, ...
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    spans = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            d = node.body[0]
            if isinstance(d, ast.Expr) and isinstance(d.value, ast.Constant) and isinstance(d.value.value, str):
                spans.append((starts[d.lineno - 1] + _byte_col(lines[d.lineno - 1], d.col_offset),
                              starts[d.end_lineno - 1] + _byte_col(lines[d.end_lineno - 1], d.end_col_offset)))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            spans.append((starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]))
    out, at = [], 0
    for a, b in sorted(spans):
        if a >= at:
            out.append(text[at:a])
            at = b
    out.append(text[at:])
    return "\n".join(line.rstrip() for line in "".join(out).split("\n") if line.strip())


def _byte_col(line: str, col: int) -> int:
    """The character column of ``ast``'s UTF-8 byte column ``col`` in ``line``."""
    return len(line.encode()[:col].decode(errors="ignore"))


@functools.lru_cache(maxsize=None)
def _code_digest(path: Path, mtime_ns: int) -> bytes:
    """One source's code (:func:`code_text`), read once per file and modification."""
    return code_text(path.read_text()).encode()


def _sources_stamp() -> tuple:
    """(path, modification time) of every source file of the package: a closure computed under one stamp holds."""
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in Path(__file__).resolve().parent.rglob("*.py")))


@functools.lru_cache(maxsize=None)
def _closure(module: str, stamp: tuple) -> tuple[str, ...]:
    """:func:`companion.cache.import_closure` of ``module``, computed once per process and state of the sources
    (each walk parses every module of the closure: 0.4 s, and the Calibration page and its tests ask for the 15
    notebooks' closures several times)."""
    return import_closure(module)


def code_version(notebook: str) -> str:
    """sha256 (16 hex digits) of the code that makes ``notebook``'s records: the code (:func:`code_text`) of its
    result module's import closure (:func:`companion.cache.import_closure`), of the judging modules (``verdict``,
    ``stats``, ``claims``), and of the notebook's code cells; docstrings, comments and prose do not count, library
    and Python versions neither."""
    spec = result_of(notebook)
    root = Path(__file__).resolve().parent
    files = sorted(set(_closure(spec.module, _sources_stamp()) if spec is not None else ()) | set(_JUDGES))
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode())
        h.update(_code_digest(root / rel, (root / rel).stat().st_mtime_ns))
    for cell in nbs.load(notebook).cells:
        if cell.cell_type == "code":
            h.update(cell.source.strip().encode())
    return h.hexdigest()[:16]


def signed_z(rec: Mapping) -> float | None:
    """(measured - predicted) / se of a statistical record (None for another kind, no SE or no measurement, or an SE
    at round-off level, :data:`DEGENERATE_SE`)."""
    if rec.get("kind") != "statistical" or rec.get("status") == "not_applicable":
        return None
    se, p = rec.get("se"), rec.get("predicted")
    if se is not None and p is not None and se <= DEGENERATE_SE * max(1.0, abs(p)):
        return None  # no noise at this point (e.g. a sparse law's deterministic loss): round-off, not a statistic
    z = rec.get("z_score")
    if z is None:  # a record from before z_score: the same number from its fields
        m, p, se = rec.get("measured"), rec.get("predicted"), rec.get("se")
        if m is None or p is None or not se:
            return None
        z = (m - p) / se
    return float(z) if math.isfinite(z) else None


def normal_scores(z, dof) -> np.ndarray:
    """:math:`\\Phi^{-1}(F_t(z; \\nu))` element by element, the normal scores of Student-t scores (``z`` itself
    where the dof is None or NaN); ``z`` and ``dof`` are sequences of one length. SciPy's ufuncs (``stdtr``,
    ``ndtri``): a column at once, without importing ``scipy.stats``."""
    from scipy import special

    z = np.asarray(z, dtype=float)
    nu = np.array([np.nan if d is None else d for d in dof], dtype=float)
    t = np.isfinite(nu)
    with np.errstate(divide="ignore"):
        # by symmetry from the lower tail, where small probabilities keep their digits
        tail = special.stdtr(np.where(t, nu, 1.0), -np.abs(z))
        u = np.copysign(-special.ndtri(tail), z)
    return np.where(t & (tail > 0), u, z)


def normal_score(z: float, dof: float | None) -> float:
    """:math:`\\Phi^{-1}(F_t(z; \\nu))`, the normal score of a Student-t score (``z`` itself without ``dof``)."""
    return float(normal_scores([z], [dof])[0])


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""The exact (Clopper-Pearson) interval of a binomial proportion, ``k`` successes in ``n`` trials: the
    :math:`\alpha/2` quantile of :math:`\mathrm{Beta}(k, n - k + 1)` and the :math:`1 - \alpha/2` quantile of
    :math:`\mathrm{Beta}(k + 1, n - k)` (0 at k = 0, 1 at k = n), :math:`\alpha = 1 - \text{level}`; what
    ``scipy.stats.binomtest(k, n).proportion_ci(level, "exact")`` gives, from ``scipy.special`` alone."""
    from scipy import special

    a = 1 - level
    low = float(special.betaincinv(k, n - k + 1, a / 2)) if k > 0 else 0.0
    high = float(special.betaincinv(k + 1, n - k, 1 - a / 2)) if k < n else 1.0
    return low, high


def collect(points: Iterable[Mapping]) -> dict:
    """The per-claim columns of a calibration file from a sweep's finished points (``results.jsonl`` lines with
    their records): seeds in order, the seeds whose page run failed (``failed_seeds``: a claim of any kind failed,
    :func:`run_failures`), and per statistical claim the signed z, the dof and the status at each seed
    (None where the claim was not applicable or the point crashed), the critical value, the in-band flag, the floor
    and the falsifier's distance from the prediction (``gap_se``), both in SE: what a restamp needs to redraw a
    band and decide its power at another level (:func:`companion.run.calibrate.relevel_data`)."""
    pts = sorted((p for p in points if p.get("status") in ("ok", "failed")),
                 key=lambda p: int(p["parameters"]["seed"]))
    seeds = [int(p["parameters"]["seed"]) for p in pts]
    claims: dict[str, dict] = {}
    for i, p in enumerate(pts):
        for rec in p.get("records") or []:
            if rec.get("kind") != "statistical":
                continue
            c = claims.setdefault(rec["claim"], {k: [None] * len(pts) for k in ("z", "dof", "status", "crit",
                                                                                  "in_band", "floor_se", "gap_se")})
            z = signed_z(rec)
            c["z"][i] = None if z is None else float(f"{z:.6g}")
            c["dof"][i] = rec.get("dof")
            c["crit"][i] = rec.get("crit")
            c["status"][i] = rec.get("status")
            c["in_band"][i] = rec.get("in_band")
            fl, se = rec.get("floor"), rec.get("se")
            c["floor_se"][i] = float(f"{fl / se:.4g}") if fl is not None and se else None
            fv, p_ = rec.get("falsifier_value"), rec.get("predicted")
            c["gap_se"][i] = float(f"{abs(fv - p_) / se:.4g}") if None not in (fv, p_) and se else None
    return {"seeds": seeds, "failed_seeds": [x for x, p in zip(seeds, pts) if p.get("status") == "failed"],
            "claims": dict(sorted(claims.items()))}


@dataclass
class ClaimCalibration:
    """One claim's calibration at one point: the statistics of its normal scores over the seeds."""

    notebook: str
    point: str
    claim: str
    n: int  # seeds with a score
    mean: float  # mean normal score
    mean_se: float  # its standard error, s / sqrt(n)
    rms: float  # root-mean-square normal score
    max_abs: float  # the largest |z| (raw score)
    failed: int  # seeds at which the claim failed (or did not hold: companion.claims.REJECTED)
    runs: int  # seeds at which the claim was recorded (applicable)
    misses: int  # seeds at which the measurement left its band (failed, or not_resolvable by an undecided gate)
    fail_low: float  # 95 % Clopper-Pearson interval of the false-alarm rate: misses / runs
    fail_high: float
    ks: float  # Kolmogorov-Smirnov distance of the normal scores from N(0, 1)
    ks_p: float
    law: str  # "normal" or "t(nu)" (the median dof)
    scores: tuple[float, ...]  # the normal scores, seed order
    floor_se: float  # the median floor of the band in standard errors (a systematic term added to crit * se)
    stale: bool = False
    decided: int = 0  # seeds at which the claim was decided (passed or failed; not not_resolvable)
    skew_z: float = 0.0  # D'Agostino's z of the normal scores' skewness (0 below SKEW_MIN_SEEDS seeds)
    score_seeds: tuple[int, ...] = ()  # the seed of each of the scores

    @property
    def bias(self) -> float:
        """The mean normal score in units of its standard error."""
        return self.mean / self.mean_se if self.mean_se > 0 else (0.0 if self.mean == 0 else math.inf)

    @property
    def chance(self) -> float:
        r"""The probability that a calibrated claim (normal scores i.i.d. N(0, 1)) at this many seeds breaks a limit
        this entry breaks by at least as much: the smallest of the tail probabilities of its broken limits (the
        bias: :math:`P(|t_{n-1}| \ge |\text{bias}|)`, the mean over its standard error being Student's t; the spread:
        :math:`P(\chi^2_n \ge n\,\text{rms}^2)`, or :math:`\le` for a narrow one); 1 when it breaks none."""
        from scipy import stats as st

        if self.n < 2:
            return 1.0
        p = [1.0]
        if abs(self.bias) > BIAS_LIMIT:
            p.append(2 * float(st.t.sf(abs(self.bias), self.n - 1)))
        if self.rms > RMS_HIGH:
            p.append(float(st.chi2.sf(self.n * self.rms**2, self.n)))
        if self.rms < RMS_LOW:
            p.append(float(st.chi2.cdf(self.n * self.rms**2, self.n)))
        if abs(self.skew_z) > SKEW_LIMIT:
            p.append(float(2 * st.norm.sf(abs(self.skew_z))))
        return min(p)

    def _flags(self) -> list[tuple[str, str]]:
        """The limits this claim breaks, each as (word, message); staleness last."""
        out = []
        if self.n >= 2:
            if abs(self.bias) > BIAS_LIMIT:
                out.append(("biased", f"mean z {self.mean:+.2f} is {self.bias:+.1f} SE from 0 (limit {BIAS_LIMIT:g})"))
            if self.rms > RMS_HIGH:
                out.append(("too wide", f"root-mean-square z {self.rms:.2f} > {RMS_HIGH:g} (the SE understates the "
                                        "noise)"))
            if self.rms < RMS_LOW:
                out.append(("too narrow", f"root-mean-square z {self.rms:.2f} < {RMS_LOW:g} (the band hides "
                                          "deviations)"))
            if abs(self.skew_z) > SKEW_LIMIT:
                out.append(("skewed", f"the skewness of the normal scores is {self.skew_z:+.1f} SE from 0 (limit "
                                      f"{SKEW_LIMIT:g}; D'Agostino): one tail heavier than the reference law's"))
        if self.stale:
            out.append(("stale", "the claim's code or its point's parameters changed since it was calibrated"))
        return out

    def problems(self) -> list[str]:
        """What breaks the calibration rules (empty: calibrated); staleness included."""
        if self.n < 2:
            return [f"only {self.n} seed(s) with a score"]
        return [f"{word}: {message}" for word, message in self._flags()]

    @property
    def verdict(self) -> str:
        """``"calibrated"``, ``"stale"``, or the limits it breaks in words (``"biased, too wide"``)."""
        if self.stale:
            return "stale"
        return ", ".join(word for word, _ in self._flags()) or "calibrated"


@dataclass
class MissCount:
    """One claim's runs and misses at one point (what the false-alarm rate pools; :func:`miss_counts`)."""

    notebook: str
    point: str
    claim: str
    runs: int  # seeds at which the claim was recorded (applicable)
    failed: int  # seeds at which it failed
    misses: int  # seeds at which the measurement left its band (failed, or not_resolvable by an undecided gate)


def miss_counts(data: Mapping) -> list[MissCount]:
    """Every claim of one calibration file with a score at some seed (:class:`MissCount`, file order): the counts of
    :func:`claim_summaries` without its statistics, for :func:`build_false_fail_rate` alone."""
    out = []
    for claim, col in data["claims"].items():
        if all(z is None for z in col["z"]):  # not applicable at this point (or no SE): nothing to calibrate here
            continue
        runs = sum(1 for s in col["status"] if s is not None and s != "not_applicable")
        failed = sum(1 for s in col["status"] if s in REJECTED)
        # a miss: out of the band; files without the column count the failures only
        misses = sum(1 for b, s in zip(col.get("in_band") or [None] * len(col["status"]), col["status"])
                     if b is False or (b is None and s in REJECTED))
        out.append(MissCount(data["notebook"], data["point"], claim, runs, failed, misses))
    return out


def claim_summaries(data: Mapping, current_version: str | None = None,
                    current_parameters: Mapping | None = None) -> list[ClaimCalibration]:
    """Every claim of one calibration file, summarised (:class:`ClaimCalibration`); ``current_version``: the
    notebook's :func:`code_version` now, ``current_parameters``: its point's parameters now, without the seed (a
    different one of either marks every claim stale; None: not compared)."""
    from scipy import stats as st

    out = []
    stale = ((current_version is not None and current_version != data.get("code_version"))
             or (current_parameters is not None and dict(current_parameters) != (data.get("parameters") or {})))
    for count in miss_counts(data):
        claim, runs, failed, misses = count.claim, count.runs, count.failed, count.misses
        col = data["claims"][claim]
        pairs = [(z, d) for z, d in zip(col["z"], col["dof"]) if z is not None]
        scored = tuple(x for x, z in zip(data["seeds"], col["z"]) if z is not None)
        u = normal_scores([z for z, _ in pairs], [d for _, d in pairs]).tolist()
        n = len(u)
        lo, hi = clopper_pearson(misses, runs) if runs else (0.0, 1.0)
        mean = sum(u) / n if n else math.nan
        sd = math.sqrt(sum((x - mean) ** 2 for x in u) / (n - 1)) if n > 1 else math.nan
        rms = math.sqrt(sum(x * x for x in u) / n) if n else math.nan
        ks = st.kstest(u, "norm") if n else None
        dofs = sorted(d for _, d in pairs if d is not None)
        law = "normal" if len(dofs) * 2 <= n else f"t({dofs[len(dofs) // 2]:.3g})"
        out.append(ClaimCalibration(
            notebook=data["notebook"], point=data["point"], claim=claim, n=n, mean=mean,
            mean_se=sd / math.sqrt(n) if n > 1 else math.nan, rms=rms,
            max_abs=max((abs(z) for z, _ in pairs), default=math.nan), failed=failed, runs=runs, misses=misses,
            fail_low=lo,
            fail_high=hi, ks=float(ks.statistic) if ks else math.nan, ks_p=float(ks.pvalue) if ks else math.nan,
            law=law, scores=tuple(u), floor_se=median(col.get("floor_se") or []), stale=stale,
            decided=sum(1 for x in col["status"] if x == "passed" or x in REJECTED), skew_z=_skew_z(u), score_seeds=scored))
    return out


def _skew_z(u: list[float]) -> float:
    """D'Agostino's z of the skewness of the scores ``u`` (``scipy.stats.skewtest``); 0 below
    :data:`SKEW_MIN_SEEDS` scores or when they do not vary."""
    from scipy import stats as st

    if len(u) < SKEW_MIN_SEEDS or np.ptp(u) == 0:
        return 0.0
    z = float(st.skewtest(np.asarray(u, dtype=float)).statistic)
    return z if math.isfinite(z) else 0.0


def limit_chance(n: int) -> float:
    r"""An upper bound on the probability that a calibrated claim (normal scores i.i.d. N(0, 1)) breaks a limit at
    ``n`` seeds, the union bound of the four limits (:data:`BIAS_LIMIT` b, :data:`RMS_HIGH` h, :data:`RMS_LOW` l,
    :data:`SKEW_LIMIT` s, D'Agostino's z being close to standard normal from :data:`SKEW_MIN_SEEDS` seeds on):

    .. math:: P(|t_{n-1}| > b) + P(\chi^2_n > n h^2) + P(\chi^2_n < n l^2) + P(|N(0, 1)| > s).
    """
    from scipy import stats as st

    if n < 2:
        return 0.0
    skew = 2 * st.norm.sf(SKEW_LIMIT) if n >= SKEW_MIN_SEEDS else 0.0
    return float(2 * st.t.sf(BIAS_LIMIT, n - 1) + st.chi2.sf(n * RMS_HIGH**2, n) + st.chi2.cdf(n * RMS_LOW**2, n) + skew)


def median(values) -> float:
    """The (upper) median of the numbers among ``values`` (None and other entries left out); NaN without any."""
    v = sorted(float(x) for x in values if isinstance(x, (int, float)) and not isinstance(x, bool))
    return v[len(v) // 2] if v else math.nan


def read(path: str | Path) -> dict:
    """One calibration file."""
    return json.loads(Path(path).read_text())


def read_all(directory: str | Path | None = None) -> list[dict]:
    """Every calibration file of the committed set, sorted by name."""
    d = Path(directory) if directory is not None else calibration_dir()
    return [read(p) for p in sorted(d.glob("*.json"))]


def run_failures(files: Iterable[Mapping], pages: int | None = None) -> dict:
    r"""The page runs of calibration files ``files`` that failed, whatever the kind of the claim that failed them
    (a statistical claim, a bound, a sign test, an identity: each fails the run, and the build), pooled: the failed
    runs of ``files``' ``failed_seeds`` over their finished runs, the rate with its 95 % Clopper-Pearson interval,
    and what it gives for one run of each of ``pages`` pages (default: the files' notebooks; one build of the
    smoke points), :math:`1 - (1 - q)^{\text{pages}}`, assuming independent pages. Returns ``{"failed", "runs",
    "pages", "rate", "rate_high", "build", "build_high"}``."""
    files = list(files)
    failed = sum(len(d["failed_seeds"]) for d in files)
    runs = sum(len(d["seeds"]) for d in files)
    pages = len({d["notebook"] for d in files}) if pages is None else pages
    out = {"failed": failed, "runs": runs, "pages": pages}
    if not runs:
        return dict(out, rate=math.nan, rate_high=math.nan, build=math.nan, build_high=math.nan)
    rate, high = failed / runs, clopper_pearson(failed, runs)[1]
    return dict(out, rate=rate, rate_high=high, build=1 - (1 - rate) ** pages, build_high=1 - (1 - high) ** pages)


def build_false_fail_rate(summaries: Iterable[ClaimCalibration | MissCount], points: int = 1) -> dict:
    r"""The false-alarm rate per claim and run, pooled over every calibrated claim (misses / claim-runs, a miss being
    a measurement outside its band, whether the claim failed or an undecided gate made it ``not_resolvable``), with
    its 95 % Clopper-Pearson interval, and what it gives for ``points`` runs of every claim once (one build:
    ``points=1``; a sweep of 100 points: 100): :math:`1 - (1 - p)^{K \cdot \text{points}}` with K claims, assuming
    independent claims. Returns ``{"misses", "failures", "runs", "rate", "rate_high", "claims", "build",
    "build_high"}``."""
    summaries = list(summaries)
    misses = sum(s.misses for s in summaries)
    runs = sum(s.runs for s in summaries)
    claims = len({(s.notebook, s.claim) for s in summaries})
    out = {"misses": misses, "failures": sum(s.failed for s in summaries), "runs": runs, "claims": claims}
    if not runs:
        return dict(out, rate=math.nan, rate_high=math.nan, build=math.nan, build_high=math.nan)
    rate, high = misses / runs, clopper_pearson(misses, runs)[1]
    k = claims * points
    return dict(out, rate=rate, rate_high=high, build=1 - (1 - rate) ** k, build_high=1 - (1 - high) ** k)
