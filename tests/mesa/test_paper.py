"""The parameter-cell defaults of the mesa notebooks are the paper's settings kept in companion.mesa.paper."""

import ast

import pytest

from companion import notebooks as nbs
from companion.mesa import paper


def _defaults(name):
    out = {}
    for k, spec in nbs.parameters(f"mesa/{name}").items():
        v = spec.default
        out[k] = ast.literal_eval(v) if isinstance(v, str) and k != "results_dir" and spec.type != "str" else v
    return out


TRAINING = ["thm4_1_emergence", "prop4_1_gaussian", "thm4_2_capability", "prop4_2_beyond", "thm4_3_masking",
            "appendix_experiments"]


@pytest.mark.parametrize("name", TRAINING)
def test_common_settings(name):
    p = _defaults(name)
    for k in ("d", "T", "m", "m_test", "epochs", "seed"):
        assert p[k] == paper.COMMON[k], (name, k)


def test_table1_and_inits():
    g = [s for s, _ in paper.TABLE1["gaussian"]], [lr for _, lr in paper.TABLE1["gaussian"]]
    sp = [s for s, _ in paper.TABLE1["sparse"]], [lr for _, lr in paper.TABLE1["sparse"]]
    inits = [a for a, _ in paper.INITS], [b for _, b in paper.INITS]
    for name in ("thm4_1_emergence", "prop4_1_gaussian"):
        p = _defaults(name)
        assert (p["sigmas"], p["lrs_gauss"]) == g and (p["a0s"], p["b0s"]) == inits
    for name in ("thm4_1_emergence", "thm4_2_capability"):
        p = _defaults(name)
        assert (p["cs"], p["lrs_sparse"]) == sp and (p["a0s"], p["b0s"]) == inits
    for name in ("prop4_2_beyond", "thm4_3_masking"):
        p = _defaults(name)
        assert p["lr"] == paper.TABLE1["full_one"][0][1] and (p["a0s"], p["b0s"]) == inits
    p = _defaults("thm4_2_capability")
    probes = dict((law, lr) for law, _, lr in paper.PROBES)
    probes.update(gaussian=dict(paper.TABLE1["gaussian"])[1.0], sparse=dict(paper.TABLE1["sparse"])[1.0])
    assert p["probe_lrs"] == [probes[law] for law in p["probe_laws"]]


def test_appendix_settings():
    p = _defaults("appendix_experiments")
    assert p["sigma_ws"] == paper.FIG5["sigma_ws"] and p["epochs_fig5"] == paper.FIG5["epochs"]
    assert p["lr"] == paper.FIG5["lr"] == dict(paper.TABLE1["gaussian"])[1.0]
    assert list(zip(p["a0s"], p["b0s"])) == paper.INITS + paper.APPENDIX_INITS


def test_replicate_and_sweep_settings():
    r = paper.REPLICATES
    p = _defaults("thm4_1_emergence")
    assert (p["m_rep"], p["n_rep"], p["n_rep_dev"]) == (r["m_rep"], r["n_rep"], r["n_rep_dev"])
    for name in ("thm4_3_masking", "prop4_2_beyond"):  # the same masked and unmasked training sets
        p = _defaults(name)
        assert (p["m_rep"], p["n_rep"]) == (r["m_rep_mask"], r["n_rep_mask"])
    p = _defaults("thm4_2_capability")
    assert (p["m_rep"], p["n_rep"]) == (r["m_rep_cap"], r["n_rep_cap"])
    p = _defaults("prop4_1_gaussian")
    assert {k: p[k] for k in paper.T_SWEEP} == paper.T_SWEEP


def test_paper_runs_are_distinct_and_include_the_replicates(tmp_path, monkeypatch):
    """paper_runs() warms the cache for everything the notebooks train at their defaults: each run once (390), the
    replicate training sets included, with the seeds written out here (replicates 1.. at m, 17.. at m/4; the
    Gaussian and sparse-Gaussian replicate sets tilted). The step sizes written out here are the functions'
    own (probe_lr, stable_lr), on a stand-in for the training sets' curvature (``training_set_bound``: 22 s of
    Lanczos here; on real sets in test_prop4_1 and test_thm4_2): a number far stiffer than the population bound,
    which any change of the law, sizes, inits, sets or tilt moves, so that a run planned on other sets than the
    page's gets another step."""
    import hashlib

    from companion.mesa import stability

    def curvature(law, scale, d, T, inits, sets, tol=1e-2, ncv=4, tilt=0):
        key = repr((law, float(scale), int(d), int(T), [tuple(map(float, i)) for i in inits], list(sets), int(tilt)))
        lam = 1e6 * (1 + int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) / 16**12)
        return stability.Bound(lr_max=2.0 / lam, lam=lam, at=None)

    monkeypatch.setattr(stability, "training_set_bound", curvature)
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path / "cache"))
    from dataclasses import asdict

    from companion import replicate_seed
    from companion.mesa import stability
    from companion.mesa.evidence import GAUSSIAN_TILT
    from companion.mesa.results.plan import paper_runs
    from companion.mesa.results.thm4_1 import SETTING_STRIDE
    from companion.mesa.results.thm4_2 import probe_lr, replicate_tilt
    from companion.mesa.train import RunConfig

    keys = [tuple(sorted(asdict(RunConfig(**kw)).items())) for kw in paper_runs()]
    assert len(keys) == len(set(keys)) == 390

    def reps(law, T, lr, m, n, seed=None, **kw):
        seed = c["seed"] if seed is None else seed
        base = dict(law=law, scale=1.0, d=c["d"], T=T, m_test=10, a0=0.5, b0=1.5, lr=lr, epochs=c["epochs"], **kw)
        return ([dict(base, m=m, seed=replicate_seed(seed, 1 + k)) for k in range(n)]
                + [dict(base, m=m // 4, seed=replicate_seed(seed, 17 + k)) for k in range(n)])

    c, r = paper.COMMON, paper.REPLICATES
    want = []
    # thm4_1: 16 replicate sets per size at every Gaussian scale, sigma = 1 from the page's seed, the others from
    # their own (settings 1 and 2 of the page's order)
    for (s, lr), i in zip(paper.TABLE1["gaussian"], (1, None, 2)):
        seed = None if i is None else replicate_seed(c["seed"], SETTING_STRIDE * i)
        want += [dict(kw, scale=s) for kw in reps("gaussian", c["T"], lr, 2500, 16, seed, tilt=GAUSSIAN_TILT)]
    for law, _, lr in paper.PROBES:  # thm4_2: the probe laws that fail Assumption 4.2 (the Gaussian's are thm4_1's)
        lr = probe_lr(law, lr, c["d"], c["T"], (0.5, 1.5), paper.KAPPA, c["seed"], c["m"], r["m_rep_cap"], r["n_rep_cap"])
        want += reps(law, c["T"], lr, r["m_rep_cap"], r["n_rep_cap"], tilt=replicate_tilt(law))
    for mask in (True, False):  # thm4_3 and prop4_2: the same masked and unmasked training sets
        want += reps("full_one", c["T"], 5e-4, r["m_rep_mask"], r["n_rep_mask"], mask=mask)
    sets = [(m, replicate_seed(c["seed"], k)) for m, k in [(10_000, k) for k in range(1, 11)] + [(2500, k) for k in range(17, 27)]]
    want += reps("gaussian", 10, stability.stable_lr("gaussian", 1.0, c["d"], 10, [(0.5, 1.5)], 0.25, c["seed"], sets=sets,
                                                     tilt=GAUSSIAN_TILT), 10_000, 10, tilt=GAUSSIAN_TILT)
    # the appendix's diagonal inits: (0.5, 1.5) on thm4_1's sets, the later ones with a0 != b0 each from its own base;
    # a0 = b0: nothing to decide, one set per size for the figure
    bases = {(0.5, 1.5): None, (1.5, 0.5): replicate_seed(c["seed"], SETTING_STRIDE),
             (1.0, 0.2): replicate_seed(c["seed"], 2 * SETTING_STRIDE)}
    for a0, b0 in paper.INITS + paper.APPENDIX_INITS:
        n = r["n_rep_init"] if a0 != b0 else 1
        want += [dict(kw, a0=a0, b0=b0) for kw in reps("gaussian", c["T"], paper.FIG5["lr"], r["m_rep_init"], n,
                                                       bases.get((a0, b0)), tilt=GAUSSIAN_TILT)]
    want.append(dict(law="full_one", scale=1.0, d=c["d"], T=c["T"], m=c["m"], m_test=10, a0=2.0, b0=2.0, lr=5e-4,
                     epochs=1, seed=c["seed"]))  # Prop 4.2's first step
    for kw in want:
        assert tuple(sorted(asdict(RunConfig(**kw)).items())) in set(keys), kw


def test_no_mesa_page_trains_a_run_outside_its_result_design():
    """A page trains through its result module, whose design lists every run it trains (and the paper plan reads
    the same design): no page calls the training or the replicate extrapolation itself."""
    from pathlib import Path

    import jupytext

    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "notebooks" / "mesa").glob("*.md")):
        code = "\n".join(c.source for c in jupytext.reads(path.read_text(), fmt="md:myst").cells if c.cell_type == "code")
        for name in ("companion.mesa.train import", "run(", "extrapolated_ab(", "Replicates("):
            assert name not in code, f"{path.name}: {name}"


@pytest.mark.slow
def test_warm_run_cache_computes_each_run_once_into_the_cache_the_notebooks_read(tmp_path, monkeypatch):
    """The runs are trained in worker processes (one thread each) into the run cache; the same call in this
    process is then a cache hit: the identical result, and no new cache entry."""
    from companion.mesa import train
    from companion.mesa.results import plan

    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path / "cache"))
    small = [dict(law="gaussian", scale=1.0, d=5, T=6, m=30 + k, m_test=10, a0=0.5, b0=1.5, lr=1e-5, epochs=3, seed=1)
             for k in range(3)]
    monkeypatch.setattr(plan, "paper_runs", lambda: small)

    def entries():
        return sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.name == "output.pkl")

    plan.warm_run_cache(jobs=2, log=None)
    assert len(entries()) == 3
    before = entries()
    for kw in small:
        train.run(**kw)
    assert entries() == before
