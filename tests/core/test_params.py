import math

import pytest

from companion import params


def test_integer_accepts_in_range_and_rejects_bool_float_and_out_of_range():
    assert params.integer("d", 5, min=1) == 5
    with pytest.raises(params.ParameterError, match=r"parameter 'd': must be an integer >= 1; got 0"):
        params.integer("d", 0, min=1)
    with pytest.raises(params.ParameterError, match="must be an integer"):
        params.integer("d", True)
    with pytest.raises(params.ParameterError, match="must be an integer"):
        params.integer("d", 2.0)
    with pytest.raises(params.ParameterError, match=r"in \[1, 3\]"):
        params.integer("k", 4, min=1, max=3)


def test_real_interval_kinds_and_nan():
    assert params.real("eta", 1, min=0, min_open=True) == 1.0
    with pytest.raises(params.ParameterError, match=r"parameter 'eta': must be a finite number > 0; got 0.0"):
        params.real("eta", 0.0, min=0, min_open=True)
    with pytest.raises(params.ParameterError, match=r"in \(0, 1\)"):
        params.real("eta", 1.0, min=0, max=1, min_open=True, max_open=True)
    with pytest.raises(params.ParameterError):
        params.real("eta", math.nan)
    with pytest.raises(params.ParameterError, match="must be a real number"):
        params.real("eta", "0.1")


def test_choice_suggests_close_match():
    assert params.choice("law", "gaussian", ["gaussian", "sparse"]) == "gaussian"
    with pytest.raises(params.ParameterError, match="did you mean 'gaussian'"):
        params.choice("law", "gausian", ["gaussian", "sparse"])


def test_lists_name_the_bad_element():
    assert params.real_list("sigmas", [0.5, 1], min=0, min_open=True) == [0.5, 1.0]
    with pytest.raises(params.ParameterError, match=r"parameter 'sigmas\[1\]'"):
        params.real_list("sigmas", [0.5, -1], min=0, min_open=True)
    with pytest.raises(params.ParameterError, match="must be a list"):
        params.real_list("sigmas", "0.5")
    with pytest.raises(params.ParameterError, match="at least 1 element"):
        params.integer_list("ks", [])


def test_require_and_bool_text():
    params.require(True, "n", "unused")
    with pytest.raises(params.ParameterError, match=r"parameter 'n': must be >= d"):
        params.require(False, "n", "must be >= d")
    assert params.boolean("mask", False) is False
    with pytest.raises(params.ParameterError):
        params.boolean("mask", 1)
    with pytest.raises(params.ParameterError):
        params.text("results_dir", 3)


def test_reject_unknown_reads_the_injected_cell():
    params_cell = "d: int = 5  # dimension\nseed: int = 1  # seed\n"
    params.reject_unknown(["", params_cell, "# Parameters\nd = 3\n", "x = 1"])  # fine
    params.reject_unknown(["", params_cell, "x = 1"])  # nothing injected
    with pytest.raises(params.ParameterError, match=r"parameter 'sed': is not a parameter of this notebook \(did you mean 'seed'\?\)"):
        params.reject_unknown(["", params_cell, "# Parameters\nsed = 3\n"])


def test_parameter_errors_cross_process_boundaries_unchanged():
    """Raised in a worker process (run cache warming, Dask), an error arrives pickled: same type, same one line."""
    import pickle

    from companion.mesa.train import TrainingDiverged
    from companion.params import ParameterError

    for err in (ParameterError("d", "must be at least 1"), TrainingDiverged("training diverged at epoch 3")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.name == err.name


def test_cot_training_replicates_zero_only_where_a_page_allows_none():
    """``replicates = 0`` (no trained models: the Sweeps page's runs of the Thm 3.2 page) is accepted only with
    ``allow_none``; one replicate never (no spread over seeds), with the allowed values named."""
    from companion.cot import domain

    assert domain.training(10, 0.01, 0.5, 0, allow_none=True)[3] == 0
    assert domain.training(10, 0.01, 0.5, 2, allow_none=True)[3] == 2
    with pytest.raises(params.ParameterError, match=r"'replicates': must be 0 \(no trained models\) or 2 <= replicates"):
        domain.training(10, 0.01, 0.5, 1, allow_none=True)
    with pytest.raises(params.ParameterError, match=r"'replicates': must be an integer in \[2, 16\]; got 0"):
        domain.training(10, 0.01, 0.5, 0)
