"""One ``TrainingDiverged`` (companion.params) for both papers' trainers: a diverged run is told from other bad input by
its type, never by its message, and is still the one-line refusal of a ParameterError naming ``lr``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from companion import mesa
from companion.cot import train as cot_train
from companion.cot.results import thm3_2
from companion.mesa import train as mesa_train
from companion.params import PARAMETER_ERRORS, ParameterError, TrainingDiverged


def test_one_class_for_both_papers_and_it_crosses_process_boundaries():
    assert mesa_train.TrainingDiverged is TrainingDiverged and mesa.TrainingDiverged is TrainingDiverged
    err = TrainingDiverged("training diverged at step 3")
    assert isinstance(err, ParameterError) and err.name == "lr"
    assert str(err) == "parameter 'lr': training diverged at step 3"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TrainingDiverged and str(back) == str(err)


def test_cot_training_with_a_too_large_lr_raises_training_diverged():
    with pytest.raises(TrainingDiverged, match=r"parameter 'lr': training diverged at step \d+ \(loss") as info:
        cot_train.train_full("cot", 3, 6, 3, 0.3, steps=200, lr=50.0, batch=16, seed=0, init_scale=1.0)
    assert isinstance(info.value, ParameterError)
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match=r"parameter 'lr': looped training diverged "
                                                                       r"at step \d+ with lr = 1e\+06"):
        cot_train.train_looped_isotropic(3, 6, 20, steps=50, lr=1e6, batch=16, seed=0)


def test_thm3_2_records_a_diverged_run_and_refuses_other_bad_input():
    out = thm3_2.trained_cot(3, 6, 3, 2, 0.3, steps=200, lr=5.0, lr_final=1.0, replicates=2, eval_batch=400, seed=0)
    assert set(out) == {"diverged", "exact"} and out["diverged"].startswith("training diverged at step")
    with pytest.raises(ParameterError, match="'steps'") as info:  # not a diverged run: not swallowed
        thm3_2.trained_cot(3, 6, 3, 2, 0.3, steps=0, lr=1e-3, lr_final=1.0, replicates=2, eval_batch=400, seed=0)
    assert not isinstance(info.value, TrainingDiverged)


def test_the_runner_knows_every_parameter_error_by_name():
    from companion.run.execute import NotebookFailed

    def subclasses(c):
        return {c} | {s for d in c.__subclasses__() for s in subclasses(d)}

    assert {c.__name__ for c in subclasses(ParameterError)} == PARAMETER_ERRORS
    assert NotebookFailed("x", "TrainingDiverged", "parameter 'lr': ...", None).refused
    assert not NotebookFailed("x", "ValueError", "...", None).refused


@pytest.mark.slow
def test_a_notebook_whose_cot_training_diverges_is_refused_in_one_line(tmp_path):
    """The one-line refusal of bad input (exit status 2, no traceback) also when the notebook's training diverges."""
    from _util import run_cli

    out = tmp_path / "run"
    proc = run_cli("run", "cot/thm4_2_ood", "-p", "lr", "1", "-p", "steps", "50", "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("companion: error: cot/thm4_2_ood: parameter 'lr': training diverged "
                                                   "at step ") and "Traceback" not in proc.stderr
    assert not out.exists()
