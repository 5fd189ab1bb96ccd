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
* **failures**: the empirical false-fail count, with its 95 % Clopper-Pearson interval.

A calibration file (``calibration/<notebook>__<point>.json``, committed) holds the raw per-seed scores and
statuses of one notebook at one point of its domain, with the code version they were measured at
(:func:`code_version`); everything here is computed from it without rerunning anything. Files are written by
:mod:`companion.run.calibrate` (``companion calibrate``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from . import notebooks as nbs
from .cache import import_closure, normalised_source
from .paths import repo_root
from .text import slug
from .verdict import result_of

__all__ = ["BIAS_LIMIT", "RMS_HIGH", "RMS_LOW", "FIRST_SEED", "ClaimCalibration", "code_version", "signed_z",
           "normal_score", "collect", "claim_summaries", "read", "read_all", "calibration_dir", "file_name",
           "build_false_fail_rate"]

#: a claim is biased when its mean normal score is further than this many of its standard errors from 0
BIAS_LIMIT = 3.0
#: a claim's root-mean-square normal score above this: its standard error understates the noise
RMS_HIGH = 1.25
#: ... below this: its band is wider than the noise and hides real deviations
RMS_LOW = 0.5
#: calibration seeds start here, away from the seeds the book and the tests run (1, 2, ...)
FIRST_SEED = 1000
#: the package files outside a result's import closure whose code decides a record's status
_JUDGES = ("verdict.py", "stats.py", "claims.py")


def calibration_dir() -> Path:
    """The committed calibration set: ``<book root>/calibration``."""
    return repo_root() / "calibration"


def file_name(notebook: str, point: str) -> str:
    """``mesa__thm4_1_emergence__smoke.json``: one notebook at one point."""
    return f"{slug(notebook)}__{point.replace(':', '')}.json"


def code_version(notebook: str) -> str:
    """sha256 (16 hex digits) of the code that makes ``notebook``'s records: the code of its result module's import
    closure (:func:`companion.cache.import_closure`), of the judging modules (``verdict``, ``stats``, ``claims``),
    and of the notebook's code cells; docstrings, comments and prose do not count, library versions neither."""
    spec = result_of(notebook)
    root = Path(__file__).resolve().parent
    files = sorted(set(import_closure(spec.module) if spec is not None else ()) | set(_JUDGES))
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode())
        h.update(normalised_source((root / rel).read_text()))
    for cell in nbs.load(notebook).cells:
        if cell.cell_type == "code":
            h.update(cell.source.strip().encode())
    return h.hexdigest()[:16]


def signed_z(rec: Mapping) -> float | None:
    """(measured - predicted) / se of a statistical record (None for another kind, no SE or no measurement)."""
    if rec.get("kind") != "statistical" or rec.get("status") == "not_applicable":
        return None
    z = rec.get("z_score")
    if z is None:  # a record from before z_score: the same number from its fields
        m, p, se = rec.get("measured"), rec.get("predicted"), rec.get("se")
        if m is None or p is None or not se:
            return None
        z = (m - p) / se
    return float(z) if math.isfinite(z) else None


def normal_score(z: float, dof: float | None) -> float:
    """:math:`\\Phi^{-1}(F_t(z; \\nu))`, the normal score of a Student-t score (``z`` itself without ``dof``)."""
    if dof is None:
        return float(z)
    from scipy import stats as st

    # by symmetry from the lower tail, where small probabilities keep their digits
    tail = st.t.cdf(-abs(z), dof)
    return float(math.copysign(-st.norm.ppf(tail), z)) if tail > 0 else float(z)


def collect(points: Iterable[Mapping]) -> dict:
    """The per-claim columns of a calibration file from a sweep's finished points (``results.jsonl`` lines with
    their records): seeds in order, and per statistical claim the signed z, the dof and the status at each seed
    (None where the claim was not applicable or the point crashed)."""
    pts = sorted((p for p in points if p.get("status") in ("ok", "failed")),
                 key=lambda p: int(p["parameters"]["seed"]))
    seeds = [int(p["parameters"]["seed"]) for p in pts]
    claims: dict[str, dict] = {}
    for i, p in enumerate(pts):
        for rec in p.get("records") or []:
            if rec.get("kind") != "statistical":
                continue
            c = claims.setdefault(rec["claim"], {"z": [None] * len(pts), "dof": [None] * len(pts),
                                                 "status": [None] * len(pts), "crit": [None] * len(pts)})
            z = signed_z(rec)
            c["z"][i] = None if z is None else float(f"{z:.6g}")
            c["dof"][i] = rec.get("dof")
            c["crit"][i] = rec.get("crit")
            c["status"][i] = rec.get("status")
    return {"seeds": seeds, "claims": dict(sorted(claims.items()))}


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
    failed: int  # seeds at which the claim failed
    runs: int  # seeds at which the claim was recorded (applicable)
    fail_low: float  # 95 % Clopper-Pearson interval of the false-fail rate
    fail_high: float
    ks: float  # Kolmogorov-Smirnov distance of the normal scores from N(0, 1)
    ks_p: float
    law: str  # "normal" or "t(nu)" (the median dof)
    scores: tuple[float, ...]  # the normal scores, seed order
    stale: bool = False

    @property
    def bias(self) -> float:
        """The mean normal score in units of its standard error."""
        return self.mean / self.mean_se if self.mean_se > 0 else (0.0 if self.mean == 0 else math.inf)

    def problems(self) -> list[str]:
        """What breaks the calibration rules (empty: calibrated); staleness included."""
        out = []
        if self.n < 2:
            out.append(f"only {self.n} seed(s) with a score")
            return out
        if abs(self.bias) > BIAS_LIMIT:
            out.append(f"biased: mean z {self.mean:+.2f} is {self.bias:+.1f} SE from 0 (limit {BIAS_LIMIT:g})")
        if self.rms > RMS_HIGH:
            out.append(f"too wide: root-mean-square z {self.rms:.2f} > {RMS_HIGH:g} (the SE understates the noise)")
        if self.rms < RMS_LOW:
            out.append(f"too narrow: root-mean-square z {self.rms:.2f} < {RMS_LOW:g} (the band hides deviations)")
        if self.stale:
            out.append("stale: the claim's code changed since it was calibrated")
        return out


def claim_summaries(data: Mapping, current_version: str | None = None) -> list[ClaimCalibration]:
    """Every claim of one calibration file, summarised (:class:`ClaimCalibration`); ``current_version``: the
    notebook's :func:`code_version` now (a different one marks every claim stale)."""
    from scipy import stats as st

    out = []
    stale = current_version is not None and current_version != data.get("code_version")
    for claim, col in data["claims"].items():
        pairs = [(z, d) for z, d in zip(col["z"], col["dof"]) if z is not None]
        u = [normal_score(z, d) for z, d in pairs]
        n = len(u)
        runs = sum(1 for s in col["status"] if s is not None and s != "not_applicable")
        failed = sum(1 for s in col["status"] if s == "failed")
        if runs:
            ci = st.binomtest(failed, runs).proportion_ci(0.95, method="exact")
            lo, hi = float(ci.low), float(ci.high)
        else:
            lo, hi = 0.0, 1.0
        mean = sum(u) / n if n else math.nan
        sd = math.sqrt(sum((x - mean) ** 2 for x in u) / (n - 1)) if n > 1 else math.nan
        rms = math.sqrt(sum(x * x for x in u) / n) if n else math.nan
        ks = st.kstest(u, "norm") if n else None
        dofs = sorted(d for _, d in pairs if d is not None)
        law = "normal" if len(dofs) * 2 <= n else f"t({dofs[len(dofs) // 2]:.3g})"
        out.append(ClaimCalibration(
            notebook=data["notebook"], point=data["point"], claim=claim, n=n, mean=mean,
            mean_se=sd / math.sqrt(n) if n > 1 else math.nan, rms=rms,
            max_abs=max((abs(z) for z, _ in pairs), default=math.nan), failed=failed, runs=runs, fail_low=lo,
            fail_high=hi, ks=float(ks.statistic) if ks else math.nan, ks_p=float(ks.pvalue) if ks else math.nan,
            law=law, scores=tuple(u), stale=stale))
    return out


def read(path: str | Path) -> dict:
    """One calibration file."""
    return json.loads(Path(path).read_text())


def read_all(directory: str | Path | None = None) -> list[dict]:
    """Every calibration file of the committed set, sorted by name."""
    d = Path(directory) if directory is not None else calibration_dir()
    return [read(p) for p in sorted(d.glob("*.json"))]


def build_false_fail_rate(summaries: Iterable[ClaimCalibration], points: int = 1) -> dict:
    r"""The false-fail rate per claim and run, pooled over every calibrated claim (failures / claim-runs, with its
    95 % Clopper-Pearson interval), and what it gives for ``points`` runs of every claim once (one build:
    ``points=1``; a sweep of 100 points: 100): :math:`1 - (1 - p)^{K \cdot \text{points}}` with K claims, assuming
    independent claims. Returns ``{"failures", "runs", "rate", "rate_high", "claims", "build", "build_high"}``."""
    from scipy import stats as st

    summaries = list(summaries)
    fails = sum(s.failed for s in summaries)
    runs = sum(s.runs for s in summaries)
    claims = len({(s.notebook, s.claim) for s in summaries})
    if not runs:
        return {"failures": 0, "runs": 0, "rate": math.nan, "rate_high": math.nan, "claims": claims,
                "build": math.nan, "build_high": math.nan}
    ci = st.binomtest(fails, runs).proportion_ci(0.95, method="exact")
    rate, high = fails / runs, float(ci.high)
    k = claims * points
    return {"failures": fails, "runs": runs, "rate": rate, "rate_high": high, "claims": claims,
            "build": 1 - (1 - rate) ** k, "build_high": 1 - (1 - high) ** k}
