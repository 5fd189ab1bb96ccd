"""Step sizes of the mesa runs (companion.mesa.stability): a step size past the stability bound of a replicate set is
refused, naming the set; the pages' defaults, smoke and domain points are accepted; the curvature estimate is the
run's own Hessian."""


import time

import numpy as np
import pytest
import torch

from companion.mesa import stability
from companion.mesa import theory as th
from companion.mesa.data import generate
from companion.mesa.model import loss_grad_fast
from companion.mesa.train import init_diagonal

from _util import ROOT, run_cli

# A diverging case: mesa/thm4_1_emergence at d = 8, T = 60, m = m_rep = m_rep_sparse = 300, sigmas [1.0], lrs_gauss [4e-4]. The
# Gaussian replicate set 2 of 16 at m_rep/4 = 75 sequences (seed replicate_seed(1, 18) = 18000055, tilted by r^6 as
# every Gaussian replicate set) diverges at epoch 4; at 2.5e-4 it trains.
DIVERGING = dict(d=8, T=60, m=300, m_rep=300, m_rep_sparse=300, sigmas=[1.0], lrs_gauss=[4e-4])


THM41_DEFAULTS = dict(d=5, T=100, m=10000, sigmas=[0.5, 1.0, 2.0], lrs_gauss=[1e-3, 1e-4, 2e-6], cs=[0.5, 1.0, 2.0],
                      lrs_sparse=[3e-2, 1e-3, 1e-4], a0s=[0.1, 0.5, 2.0], b0s=[0.1, 1.5, 2.0], m_rep=2500, n_rep=3,
                      n_rep_dev=16, seed=1)


def _thm41_runs(**kw):
    """The runs of mesa/thm4_1_emergence at these parameters (its design, as the page checks them)."""
    from companion.mesa.results import thm4_1

    p = {**THM41_DEFAULTS, **kw}
    design = thm4_1.design(p["sigmas"], p["lrs_gauss"], p["cs"], p["lrs_sparse"], list(zip(p["a0s"], p["b0s"])),
                           p["d"], p["T"], p["m"], 10, 1, p["seed"], p["m_rep"], p["n_rep"], p["n_rep_dev"])
    return design.checked_runs(), p["d"], p["T"]


def test_a_step_size_past_the_bound_of_one_replicate_set_is_refused_naming_that_set():
    from companion.mesa import stability
    from companion.params import ParameterError

    start = time.perf_counter()
    with pytest.raises(ParameterError) as err:
        stability.check_runs(*_thm41_runs(**DIVERGING))
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert msg.startswith("parameter 'lrs_gauss': 0.0004 is unstable") and "\n" not in msg
    assert "m = 75" in msg and "seed 18000055" in msg and "use a step size below 0.000283" in msg


def test_the_page_defaults_smoke_point_and_smaller_step_sizes_are_not_refused():
    import yaml

    from companion.mesa import stability

    smoke = yaml.safe_load((ROOT / "tests" / "smoke" / "mesa.yaml").read_text())["mesa/thm4_1_emergence"]
    assert stability.check_runs(*_thm41_runs())["margin"] > 1  # defaults: closest 1.26, a set of 625 at 2.9/lambda
    assert stability.check_runs(*_thm41_runs(**smoke))["margin"] > 1
    # the diverging sizes at 2.5e-4 (trains) and with m = m_rep = 2000 (its sets differ): accepted
    assert stability.check_runs(*_thm41_runs(**{**DIVERGING, "lrs_gauss": [2.5e-4]}))["margin"] > 1
    assert stability.check_runs(*_thm41_runs(**{**DIVERGING, "m": 2000, "m_rep": 2000}))["margin"] > 1


def test_the_domain_points_step_sizes_from_the_stability_bound_are_not_refused():
    import yaml

    from companion.mesa import stability

    for point in yaml.safe_load((ROOT / "tests" / "domain" / "mesa.yaml").read_text())["mesa/thm4_1_emergence"]:
        p = {**THM41_DEFAULTS, **point}
        inits = list(zip(p["a0s"], p["b0s"]))
        lrs = {law: p[key] or [stability.stable_lr(law, s, p["d"], p["T"], inits, 0.25, p["seed"]) for s in p[scales]]
               for law, key, scales in (("gaussian", "lrs_gauss", "sigmas"), ("sparse", "lrs_sparse", "cs"))}
        assert stability.check_runs(*_thm41_runs(**{**point, "lrs_gauss": lrs["gaussian"],
                                                    "lrs_sparse": lrs["sparse"]}))["margin"] > 1


@pytest.mark.slow  # trains or power-iterates the Hessian on real training sets (18-43 s)
def test_the_curvature_estimate_is_the_empirical_hessian_of_the_run_own_training_set():
    """limit_curvature against the power iteration on the full empirical Hessian, on the diverging set and
    on a set of the same size that trains (1.5e4 apart: the population bound cannot tell them apart)."""
    import torch

    from companion.mesa import stability
    from companion.mesa import theory as th
    from companion.mesa.data import generate
    from companion.mesa.train import init_diagonal
    from companion.seeds import MESA_TRAIN_DATA

    al, be = th.alpha_beta("gaussian", 1.0, 8, 60)
    a, b = th.limits(0.5, 1.5, be / al)
    lams = []
    for seed in (24000073, 17000052):
        data = generate("gaussian", 500, 8, 60, 1.0, MESA_TRAIN_DATA.rng(seed), torch.complex128)
        power = stability.hessian_max_eig(data, *init_diagonal(8, a, b, torch.complex128))
        est = stability.limit_curvature("gaussian", 1.0, 8, 60, 500, seed, a, b)
        assert 1 / stability.ESTIMATE_LOW <= est / power <= 1.05, (seed, est, power)
        lams.append(power)
    assert lams[0] > 2.5 * lams[1]


@pytest.mark.slow  # trains or power-iterates the Hessian on real training sets (18-43 s)
def test_the_refused_replicate_set_really_diverges():
    from companion.mesa.train import RunConfig, TrainingDiverged, train

    cfg = RunConfig(law="gaussian", scale=1.0, d=8, T=60, m=500, m_test=10, a0=0.5, b0=1.5, lr=2e-4, epochs=12,
                    seed=24000073)
    with pytest.raises(TrainingDiverged, match="diverged at epoch 4"):
        train(cfg)


@pytest.mark.slow
def test_an_accepted_step_size_past_two_over_lambda_catapults_and_trains():
    """1.5e-4 on the set that diverges at 2e-4: eta lambda = 3.0 at the limit, accepted; it trains 200 epochs."""
    from companion.mesa.train import RunConfig, train

    r = train(RunConfig(law="gaussian", scale=1.0, d=8, T=60, m=500, m_test=10, a0=0.5, b0=1.5, lr=1.5e-4,
                        epochs=200, seed=24000073))
    assert abs(r.ab[-1] / 0.17983 - 1) < 0.2


@pytest.mark.slow  # executes a notebook with papermill: not in the fast lane (make test-fast)
def test_thm4_1_refuses_the_diverging_case_in_its_validation_cell_before_training(tmp_path):
    args = ["run", "mesa/thm4_1_emergence", "-o", str(tmp_path / "r")]
    for k, v in DIVERGING.items():
        args += ["-p", k, str(v)]
    start = time.perf_counter()
    proc = run_cli(*args, env={"COMPANION_CACHE_DIR": "off"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "parameter 'lrs_gauss'" in ln]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "use a step size below" in lines[0]
    assert time.perf_counter() - start < 120  # the kernel's start and the check; the run trains for minutes


def test_the_full_parameter_bound_refuses_a_masked_full_one_step_the_reduced_bound_accepts():
    """Masked full-one training at d = 5, T = 30, lr = 1e-2 passes the reduced (diagonal) check but its loss
    rises: the full-parameter bound refuses it."""
    inits = [(0.1, 0.1), (0.5, 1.5), (2.0, 2.0)]
    b = stability.stability_bound("full_one", 1.0, 5, 30, inits, m_h=400)
    al, be = th.alpha_beta("full_one", 1.0, 5, 30)
    reduced = min(2 / (al * max(a * a + bb * bb, sum(x * x for x in th.limits(a, bb, be / al)))) for a, bb in inits)
    assert b.lr_max < reduced
    assert b.lr_max < 1e-2


def test_hessian_power_iteration_against_the_reduced_curvature():
    """On a diagonal point the largest Hessian eigenvalue is at least alpha (a^2 + b^2) (the reduced system's
    curvature along (b, a)), computed for the same data."""
    data = generate("sparse", 400, 3, 10, 1.0, np.random.default_rng(0), torch.complex128)
    lam = stability.hessian_max_eig(data, *init_diagonal(3, 0.5, 1.5, torch.complex128))
    al, _ = th.alpha_beta("sparse", 1.0, 3, 10)
    assert lam >= 0.9 * al * (0.5**2 + 1.5**2)


def test_set_max_eig_matches_the_dense_hessian():
    """Lanczos on the Hessian-vector products (complex128, and complex64 with the training-set settings) against
    the largest eigenvalue of the dense Hessian (central differences, d = 2: 24 real parameters)."""
    d = 2
    data = generate("gaussian", 60, d, 6, 1.0, np.random.default_rng(5), torch.complex128)
    W = init_diagonal(d, 0.5, 1.5, torch.complex128)
    n = W[0].numel() + W[1].numel()

    def grad(v):
        z = torch.from_numpy(v[:n] + 1j * v[n:])
        _, gk, gp = loss_grad_fast(data, W[0] + z[:W[0].numel()].reshape(W[0].shape),
                                   W[1] + z[W[0].numel():].reshape(W[1].shape))
        g = torch.cat([gk.reshape(-1), gp.reshape(-1)]).numpy()
        return np.concatenate([g.real, g.imag])

    eps, cols = 1e-5, []
    for i in range(2 * n):
        e = np.zeros(2 * n)
        e[i] = eps
        cols.append((grad(e) - grad(-e)) / (2 * eps))
    H = np.array(cols)
    lam = np.linalg.eigvalsh((H + H.T) / 2)[-1]
    assert stability.set_max_eig(data, *W, tol=1e-8)[0] == pytest.approx(lam, rel=1e-4)
    lo = stability.set_max_eig(data.to(torch.complex64), *(w.to(torch.complex64) for w in W), eps=1e-3, tol=1e-2, ncv=4,
                        dtype=torch.complex64)[0]
    assert lo == pytest.approx(lam, rel=1e-2)
