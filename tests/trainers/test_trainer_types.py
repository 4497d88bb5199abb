"""TrialRequest, TrainerRef and TrialResult: validation, and they travel by pickle."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from nestor.trainers import DEFAULT_RESULT_PATTERN, TrainerRef, TrialRequest, TrialResult


def test_a_request_and_a_result_survive_pickling_as_ray_sends_them():
    request = TrialRequest("t1", TrainerRef.command("python3 fit.py --x 'a b'"),
                           settings={"epochs": 2}, config={"lr": 0.1}, data_parallel=2,
                           freeze=["features"])
    assert pickle.loads(pickle.dumps(request)) == request
    assert request.trainer.argv == ("python3", "fit.py", "--x", "a b")
    assert request.freeze == ("features",) and request.ranks == 2
    result = TrialResult("t1", "ok", metrics={"val_accuracy": 0.5}, history=[{"epoch": 1}])
    assert pickle.loads(pickle.dumps(result)).to_dict() == result.to_dict()


def test_from_spec_reads_an_orchestrator_trainer_by_its_attributes():
    spec = SimpleNamespace(name=None, function=None, command=["fit", "-v"],
                           result_pattern=None, flag_prefix="-")
    ref = TrainerRef.from_spec(spec, result_metric="val_accuracy")
    assert ref.kind == "command" and ref.argv == ("fit", "-v") and ref.flag_prefix == "-"
    assert ref.result_pattern == DEFAULT_RESULT_PATTERN and ref.result_metric == "val_accuracy"
    assert TrainerRef.from_spec(SimpleNamespace(name="cnn")).kind == "builtin"
    assert TrainerRef.from_spec(SimpleNamespace(name=None, function="a.b:c")).function == "a.b:c"


@pytest.mark.parametrize("make, message", [
    (lambda: TrainerRef(), "a trainer needs exactly one of name, function, argv, but got none"),
    (lambda: TrainerRef(name="cnn", function="a:b"),
     "a trainer needs exactly one of name, function, argv, but got name, function"),
    (lambda: TrainerRef.python("a.b"), "function must look like 'package.module:function'"),
    (lambda: TrainerRef.command([]), "a command must name a program, but got an empty command"),
    (lambda: TrainerRef.command("fit", result_pattern="FoM: \\S+"),
     "result_pattern must have a group around the number"),
    (lambda: TrainerRef.command("fit", result_pattern="(unclosed"),
     "result_pattern must be a regular expression"),
    (lambda: TrialRequest("t", TrainerRef.builtin("cnn"), data_parallel=0),
     "data_parallel must be an integer of at least 1, but got 0"),
    (lambda: TrialRequest("t", TrainerRef.builtin("cnn"), timeout=-1),
     "timeout must be a positive number of seconds, but got -1"),
])
def test_bad_requests_are_refused_with_the_reason(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message), str(info.value)
