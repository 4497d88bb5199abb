"""User trainers given as ``module:function(config, ctx)``, in one process."""

from __future__ import annotations

import sys
import textwrap

import pytest

from nestor.trainers import TrainerRef, TrialRequest, run_trial


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A throwaway importable module of user trainers."""
    (tmp_path / "nestor_user_fns.py").write_text(textwrap.dedent("""
        def good(config, ctx):
            for epoch in range(config["epochs"]):
                ctx.report({"val_accuracy": 0.5 + epoch / 10}, step=epoch + 1)
                if ctx.should_stop():
                    break
            return {"val_accuracy": 0.7, "ranks": ctx.size, "dp": ctx.dp_size}

        def silent(config, ctx):
            ctx.report({"val_accuracy": 0.25}, step=1)

        def crash(config, ctx):
            raise RuntimeError("out of patience")

        def wrong(config, ctx):
            return [1, 2]

        def nan(config, ctx):
            return {"val_accuracy": float("nan")}

        def no_data(config, ctx):
            with open("/no/such/digits.npz", "rb") as data:
                return {"val_accuracy": len(data.read())}

        def late_import(config, ctx):
            import not_a_package_anyone_installed  # noqa: F401
    """))
    (tmp_path / "nestor_user_typo.py").write_text("def train(config, ctx:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "nestor_user_fns"
    sys.modules.pop("nestor_user_fns", None)
    sys.modules.pop("nestor_user_typo", None)


@pytest.mark.parametrize(("path", "repeats"), [
    ("nestor_user_fns:no_data", True),  # FileNotFoundError
    ("nestor_user_fns:late_import", True),  # ModuleNotFoundError
    ("nestor_user_typo:train", True),  # SyntaxError on import
    ("nestor_no_such_module:train", True),  # the module is not there
    ("nestor_user_fns:crash", False),  # RuntimeError: may pass next time
])
def test_a_failure_says_whether_a_rerun_would_meet_it_again(user_module, path, repeats):
    result = _run(path)
    assert result.status == "failed"
    assert result.repeats is repeats, result.reason


def _run(path: str, **kwargs):
    return run_trial(TrialRequest("f", TrainerRef.python(path), settings={"epochs": 3}),
                     **kwargs)


def test_a_function_gets_config_and_context_and_returns_metrics(user_module):
    seen = []
    result = _run(f"{user_module}:good", report=lambda m, s: seen.append((s, m)))
    assert result.ok
    assert result.metrics["val_accuracy"] == 0.7 and result.metrics["ranks"] == 1
    assert seen == [(1, {"val_accuracy": 0.5}), (2, {"val_accuracy": 0.6}),
                    (3, {"val_accuracy": 0.7})]
    assert [h["step"] for h in result.history] == [1.0, 2.0, 3.0]


def test_should_stop_reaches_the_function(user_module):
    result = _run(f"{user_module}:good", should_stop=lambda: True)
    assert result.ok and result.stopped_early and len(result.history) == 1


def test_a_function_returning_none_keeps_its_last_report(user_module):
    result = _run(f"{user_module}:silent")
    assert result.ok and result.metrics["val_accuracy"] == 0.25


@pytest.mark.parametrize("name, reason", [
    ("crash", "RuntimeError: out of patience"),
    ("wrong", "function nestor_user_fns:wrong must return a dict of metrics or None, but got"
              " list"),
    ("nan", "function returned non-finite metrics: val_accuracy"),
    ("absent", "function 'nestor_user_fns:absent': module 'nestor_user_fns' has no function"
               " 'absent'"),
])
def test_a_failing_function_is_a_failed_trial_with_its_reason(user_module, name, reason):
    result = _run(f"{user_module}:{name}")
    assert result.status == "failed" and result.reason == reason, result.reason


def test_a_missing_module_is_named():
    result = _run("no_such_module_here:train")
    assert result.status == "failed"
    assert result.reason.startswith("function 'no_such_module_here:train': cannot import module")


def test_the_example_function_trainer_learns():
    softmax = TrainerRef.python("nestor.trainers.examples:softmax_digits")
    result = run_trial(TrialRequest("ex", softmax,
                                    config={"epochs": 2}))
    assert result.ok and result.metrics["test_accuracy"] > 0.85, result.metrics
