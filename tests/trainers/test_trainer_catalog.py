"""The catalog (what the validator accepts) and the implementation agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from nestor import trainers
from nestor.trainers.catalog import DATASETS, LAYER_GROUPS, TRAINERS, Option, resolve_options

PACKAGE = Path(trainers.__file__).resolve().parent


def _used_option_names() -> set[str]:
    """Every ``options["name"]`` / ``options.get("name")`` the training code reads."""
    used: set[str] = set()
    for module in ("builtin.py", "models.py", "data.py"):
        text = (PACKAGE / module).read_text()
        used |= set(re.findall(r'options\["(\w+)"\]', text))
        used |= set(re.findall(r'options\.get\("(\w+)"', text))
    used |= set(re.findall(r'arch\["(\w+)"\]', (PACKAGE / "models.py").read_text()))
    return used - {"trainer", "image_shape", "num_classes"}


def test_every_listed_option_is_read_by_the_code_and_no_other():
    used = _used_option_names()
    listed = {name for info in TRAINERS.values() for name in info.options}
    assert listed - used == set(), "listed in catalog.py but never used"
    assert used - listed == set(), "used by the code but missing from catalog.py"


def test_each_trainer_builds_a_model_and_the_groups_are_as_listed():
    from nestor.trainers.models import MODELS, build_model, layer_groups, make_arch

    assert set(MODELS) == set(TRAINERS) == set(LAYER_GROUPS)
    for name in TRAINERS:
        options = resolve_options(name, {}, {})
        model = build_model(make_arch(name, options, (1, 8, 8), 10), seed=0)
        assert layer_groups(model) == LAYER_GROUPS[name]


def test_every_choice_is_implemented():
    import torch

    from nestor.trainers.builtin import make_optimizer
    from nestor.trainers.models import ACTIVATIONS

    info = TRAINERS["cnn"]
    assert set(info.hyperparameters["activation"].choices) == set(ACTIVATIONS)
    params = [torch.nn.Parameter(torch.zeros(2))]
    for choice in info.hyperparameters["optimizer"].choices:
        options = resolve_options("cnn", {}, {"optimizer": choice})
        assert isinstance(make_optimizer(options, params, 0.1), torch.optim.Optimizer)
    assert set(info.settings["dataset"].choices) == set(DATASETS)


def test_defaults_pass_their_own_checks():
    for info in TRAINERS.values():
        for name, option in info.options.items():
            assert option.check(name, option.default) == option.default


@pytest.mark.parametrize("settings, config, message", [
    ({}, {"lrr": 0.1}, "cnn has no option 'lrr' (in config); allowed: activation,"),
    ({}, {"lr": -1.0}, "lr must be at least 1e-12, but got -1.0"),
    ({}, {"dropout": 1.0}, "dropout must be less than 1, but got 1.0"),
    ({}, {"batch_size": 2.5}, "batch_size must be an integer, but got 2.5"),
    ({}, {"epochs": True}, "epochs must be an integer, but got True"),
    ({}, {"optimizer": "lbfgs"}, "optimizer must be one of sgd, momentum, nesterov, adam,"),
    ({"dataset": "mnist"}, {}, "data_dir must name the directory"),
    ({"classes": [1, 1]}, {}, "classes must be distinct, but got [1, 1]"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, {}, "val_fraction + test_fraction must be"),
])
def test_bad_options_are_refused_with_a_clear_message(settings, config, message):
    with pytest.raises(ValueError) as info:
        resolve_options("cnn", settings, config)
    assert str(info.value).startswith(message), str(info.value)


def test_config_may_set_a_setting_and_wins_over_settings():
    options = resolve_options("mlp", {"epochs": 5}, {"epochs": 2.0, "lr": 1})
    assert options["epochs"] == 2 and isinstance(options["epochs"], int)
    assert options["lr"] == 1.0 and isinstance(options["lr"], float)


def test_importing_trainers_and_its_catalog_stays_light():
    import subprocess

    code = ("import sys, nestor.trainers.catalog; from nestor.trainers import TrialRequest;"
            " print(sorted(m for m in ('torch', 'horovod', 'numpy', 'ray', 'mlflow')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_option_check_accepts_integral_floats_only_for_ints():
    option = Option(int, 1, "x", low=1)
    assert option.check("n", 3.0) == 3
    with pytest.raises(ValueError, match="n must be at least 1, but got 0"):
        option.check("n", 0)
