"""Each paper's settings are stated once (companion.mesa.paper, companion.cot.paper): every default of a notebook's
parameters cell that its paper's settings define equals their value, and every other default is named here as the
page's own.

The parameters cell stays literal ``name: type = value  # help`` lines (papermill injects parameters there), so the
settings cannot be imported into it; this test keeps the two in step instead. It reads the cell with the runner's own
parser (:func:`companion.notebooks.parameters`)."""

from __future__ import annotations

import inspect

import pytest

from companion import notebooks as nbs
from companion.cot import paper as cot_paper
from companion.mesa import paper
from companion.mesa.stability import stable_lr


def _lr(law: str, scale: float) -> float:
    return dict(paper.TABLE1[law])[scale]


def _mesa_plan() -> dict[str, dict[str, tuple[object, str]]]:
    """Per mesa notebook: parameter -> (the plan's value, where the plan states it)."""
    C, inits = paper.COMMON, paper.INITS
    common = {k: (C[k], f"paper.COMMON[{k!r}]") for k in ("d", "T", "m", "m_test", "epochs", "seed")}
    diag = {"a0s": ([a for a, _ in inits], "paper.INITS"), "b0s": ([b for _, b in inits], "paper.INITS")}
    kappa = (inspect.signature(stable_lr).parameters["kappa"].default, "mesa.stability.stable_lr(kappa=...)")
    gauss = {"sigmas": ([s for s, _ in paper.TABLE1["gaussian"]], "paper.TABLE1['gaussian']"),
             "lrs_gauss": ([lr for _, lr in paper.TABLE1["gaussian"]], "paper.TABLE1['gaussian']")}
    sparse = {"cs": ([s for s, _ in paper.TABLE1["sparse"]], "paper.TABLE1['sparse']"),
              "lrs_sparse": ([lr for _, lr in paper.TABLE1["sparse"]], "paper.TABLE1['sparse']")}
    full_one = {"lr": (paper.TABLE1["full_one"][0][1], "paper.TABLE1['full_one']")}
    rep = paper.REPLICATES
    probes = dict([("gaussian", _lr("gaussian", 1.0)), *((law, lr) for law, _, lr in paper.PROBES),
                   ("sparse", _lr("sparse", 1.0))])
    return {
        "mesa/setup": {k: common[k] for k in ("d", "T", "seed")},
        "mesa/thm4_1_emergence": {**common, **gauss, **sparse, **diag, "kappa": kappa,
                                  "m_rep": (rep["m_rep"], "paper.REPLICATES['m_rep']"),
                                  "n_rep": (rep["n_rep"], "paper.REPLICATES['n_rep']"),
                                  "n_rep_dev": (rep["n_rep_dev"], "paper.REPLICATES['n_rep_dev']"),
                                  "m_rep_sparse": (rep["m_rep_sparse"], "paper.REPLICATES['m_rep_sparse']"),
                                  "n_rep_sparse": (rep["n_rep_sparse"], "paper.REPLICATES['n_rep_sparse']")},
        "mesa/thm4_2_capability": {**common, **sparse, **diag, "kappa": kappa,
                                   "probe_laws": (list(probes), "paper.PROBES + paper.TABLE1 at scale 1"),
                                   "probe_lrs": (list(probes.values()), "paper.PROBES + paper.TABLE1 at scale 1"),
                                   "m_rep": (rep["m_rep_cap"], "paper.REPLICATES['m_rep_cap']"),
                                   "n_rep": (rep["n_rep_cap"], "paper.REPLICATES['n_rep_cap']")},
        "mesa/prop4_1_gaussian": {**common, **gauss, **diag,
                                  **{k: (paper.T_SWEEP[k], f"paper.T_SWEEP[{k!r}]")
                                     for k in ("Ts", "m_sweep", "n_rep", "kappa")}},
        "mesa/prop4_2_beyond": {**common, **full_one, **diag, "kappa": kappa,
                                "m_rep": (rep["m_rep_mask"], "paper.REPLICATES['m_rep_mask']"),
                                "n_rep": (rep["n_rep_mask"], "paper.REPLICATES['n_rep_mask']")},
        "mesa/thm4_3_masking": {**common, **full_one, **diag, "kappa": kappa,
                                "m_rep": (rep["m_rep_mask"], "paper.REPLICATES['m_rep_mask']"),
                                "n_rep": (rep["n_rep_mask"], "paper.REPLICATES['n_rep_mask']")},
        "mesa/appendix_experiments": {
            **common, "kappa": kappa,
            "sigma_ws": (paper.FIG5["sigma_ws"], "paper.FIG5['sigma_ws']"),
            "lr": (paper.FIG5["lr"], "paper.FIG5['lr']"),
            "epochs_fig5": (paper.FIG5["epochs"], "paper.FIG5['epochs']"),
            "a0s": ([a for a, _ in inits + paper.APPENDIX_INITS], "paper.INITS + paper.APPENDIX_INITS"),
            "b0s": ([b for _, b in inits + paper.APPENDIX_INITS], "paper.INITS + paper.APPENDIX_INITS"),
            **{k: (paper.RATE[k], f"paper.RATE[{k!r}]") for k in ("m_rate", "n_rate")},
            "m_init": (rep["m_rep_init"], "paper.REPLICATES['m_rep_init']"),
            "n_init": (rep["n_rep_init"], "paper.REPLICATES['n_rep_init']")},
    }


def _cot_plan() -> dict[str, dict[str, tuple[object, str]]]:
    """Per cot notebook: parameter -> (the plan's value, where the plan states it)."""
    C, T, N = cot_paper.COMMON, cot_paper.COT_TRAIN, cot_paper.NO_COT_TRAIN

    def common(*keys, **renamed):  # renamed: the page's name -> the plan's key
        out = {k: (C[k], f"cot.paper.COMMON[{k!r}]") for k in keys}
        return out | {k: (C[v], f"cot.paper.COMMON[{v!r}]") for k, v in renamed.items()}

    def cot_train(*keys):
        return {k: (T[k], f"cot.paper.COT_TRAIN[{k!r}]") for k in keys}

    def no_cot_train(*keys):
        return {k: (N[k], f"cot.paper.NO_COT_TRAIN[{k!r}]") for k in keys}

    shared = ("steps", "lr", "lr_final", "replicates")  # the pages that train CoT models with the plan's optimiser
    return {
        "cot/setup": common("d", "n", "k", "eta", "seed"),
        "cot/thm3_1_no_cot": {**common("d", "n", "seed"), **no_cot_train("lr", "lr_final", "path", "batch", "replicates")},
        "cot/cor3_1_floor": {**common("seed"), **no_cot_train("lr", "lr_final", "path", "replicates")},
        "cot/thm3_2_construction": {**common("d", "n", "eta", "seed", k_train="k"), **cot_train(*shared)},
        "cot/experiments": {**common("d", "seed"), **cot_train(*shared)},
        "cot/thm4_1_dynamics": {**common("d", "n", "k", "eta", "seed", eta_ode="eta", k_ode="k"),
                                **cot_train(*shared, "batch")},
        "cot/thm4_2_ood": {**common("d", "n", "eta", "seed", k_train="k"), **cot_train(*shared)},
        "cot/looped": common("d", "n", "eta", "seed"),
    }


def _plan() -> dict[str, dict[str, tuple[object, str]]]:
    return {**_mesa_plan(), **_cot_plan()}


#: the defaults that are a page's own (not part of the run plan): the page's parameters cell is their one home
PAGE_OWN = {
    "mesa/setup": {"law", "scale", "m", "a", "b", "m_direct"},  # the set-up checks train nothing
    "mesa/thm4_2_capability": {"n_batches"},
    "mesa/prop4_2_beyond": {"a_check", "b_check", "m_mc", "n_groups", "m_mom"},
    "mesa/thm4_3_masking": {"m_mc"},
    "mesa/appendix_experiments": {"m_div", "n_batches"},
    "cot/setup": {"batch"},  # the identity checks train nothing
    "cot/thm3_1_no_cot": {"num_mc"},
    "cot/cor3_1_floor": {"d_list", "ratios", "num_mc", "train_d", "train_ratio", "eval_batch"},
    "cot/thm3_2_construction": {"k_list", "ratios", "num_model", "num_mc", "mp_levels", "k_eval", "eval_batch"},
    "cot/experiments": {"n_list", "eta_list", "k", "lr_no_cot", "lr_final_no_cot", "eval_batch", "num_mc"},
    "cot/thm4_1_dynamics": {"sigma", "num_eig", "d_flow", "n_flow", "k_flow", "num_S", "d_regime", "c_n", "c_k",
                            "eval_batch", "num_mc"},
    "cot/thm4_2_ood": {"k_list", "spectra", "eval_batch", "num_mc", "grid"},
    # the looped models have their own optimiser settings (full-parameter and isotropic)
    "cot/looped": {"k_max", "num_eig", "num_check", "k_check", "steps", "lr", "lr_final", "iso_steps", "iso_lr",
                   "replicates"},
}
RUNNER = {"results_dir"}  # set by the runner and the sweep
PLAN_MODULE = {"mesa": "companion.mesa.paper", "cot": "companion.cot.paper"}


def _notebooks(paper_name: str | None = None) -> list[str]:
    return [n for n in nbs.all_notebooks(toc_only=True) if paper_name is None or n.startswith(f"{paper_name}/")]


@pytest.mark.parametrize("paper_name", sorted(PLAN_MODULE))
def test_every_notebook_has_a_plan(paper_name):
    plans = _mesa_plan() if paper_name == "mesa" else _cot_plan()
    assert set(plans) == set(_notebooks(paper_name))


def test_every_notebook_is_of_a_paper_with_a_plan():
    assert {n.split("/")[0] for n in _notebooks()} == set(PLAN_MODULE)


@pytest.mark.parametrize("name", _notebooks())
def test_defaults_equal_the_run_plan(name):
    defaults = {k: p.default_value for k, p in nbs.parameters(name).items()}
    plan = _plan()[name]
    wrong = [f"{k} = {defaults[k]!r}, but {src} = {want!r}" for k, (want, src) in plan.items()
             if k in defaults and defaults[k] != want]
    assert not wrong, f"{name}: " + "; ".join(wrong)
    missing = sorted(set(plan) - set(defaults))
    assert not missing, f"{name}: the plan defines {missing}, the parameters cell has no such parameter"
    own = PAGE_OWN.get(name, set())
    stale = sorted((own - set(defaults)) | (own & set(plan)))
    assert not stale, f"{name}: PAGE_OWN lists {stale}, which is no parameter of the page or is in the plan"
    unknown = sorted(set(defaults) - set(plan) - own - RUNNER)
    assert not unknown, (f"{name}: the defaults of {unknown} come from nowhere: define them in "
                         f"{PLAN_MODULE[name.split('/')[0]]} (and check them here) or list them in PAGE_OWN")
