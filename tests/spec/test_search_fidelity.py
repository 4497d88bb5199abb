"""The spec's side of PB2 (``explore: pb2``) and of ``auto`` over a fidelity."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import SpecError, load_spec_text

STAGE = textwrap.dedent("""
    name: fid
    stages:
      - name: tune
        kind: hpo
        trainer: TRAINER
        search: SEARCH
        space:
          lr: {type: float, low: 0.001, high: 0.3, log: true}
          width: {type: int, low: 16, high: 256, log: true}
    """)
CNN27 = "{name: cnn, settings: {dataset: digits, epochs: 27}}"


def spec(search: str, trainer: str = CNN27) -> str:
    return STAGE.replace("TRAINER", trainer).replace("SEARCH", search)


def test_auto_with_a_fidelity_plans_asha_over_the_trainers_epochs() -> None:
    stage = load_spec_text(spec("{algorithm: auto, budget: 20, fidelity: epochs}")).stage("tune")
    assert stage.max_fidelity() == 27
    assert stage.auto_choice().label() == "asha tpe, rungs 1-27, eta 3, budget 540 epochs"
    assert stage.planned_trials() == 20  # full trainings' worth; the epochs end it
    assert stage.search_settings() == {"seed": 0, "budget": 20, "parallel": None,
                                       "max_fidelity": 27, "prefer": "anytime"}  # fmt: skip
    # Without fidelity (or with the built-in default of 3 epochs) auto picks as before.
    plain = load_spec_text(spec("{algorithm: auto, budget: 20}")).stage("tune")
    short = load_spec_text(spec("{algorithm: auto, budget: 20, fidelity: epochs}",
                                "{name: cnn, settings: {dataset: digits}}")).stage("tune")
    assert plain.auto_choice() == short.auto_choice()
    assert plain.auto_choice().algorithm == "bayesian" and plain.planned_trials() == 20
    assert short.max_fidelity() == 3 and short.planned_trials() == 20


def test_prefer_final_trains_every_trial_in_full_and_other_values_are_refused() -> None:
    """auto with a fidelity favours the anytime pick (ASHA-TPE); ``prefer: final`` asks
    for the best result at the budget's end, which trained every trial in full on the
    held-out bench (issue 41 item 3). Anything else is refused naming what is allowed."""
    final = load_spec_text(spec("{algorithm: auto, budget: 20, fidelity: epochs,"
                                " prefer: final}")).stage("tune")
    assert final.auto_choice().algorithm not in ("asha", "hyperband")
    assert "prefer: final, so every trial trains its full 27" in final.auto_choice().reason
    assert final.search_settings()["prefer"] == "final"
    plain = load_spec_text(spec("{algorithm: auto, budget: 20}")).stage("tune")
    assert final.auto_choice().label() == plain.auto_choice().label()
    with pytest.raises(SpecError) as info:
        load_spec_text(spec("{algorithm: auto, fidelity: epochs, prefer: fast}"))
    text = " ".join(str(info.value).split())
    assert "search.prefer" in text and "anytime" in text and "final" in text, text


def test_a_command_trainer_names_its_full_length_in_its_settings() -> None:
    trainer = '{command: "python3 fit.py", settings: {steps: 81}, checkpoints: true}'
    stage = load_spec_text(spec("{algorithm: auto, budget: 40, fidelity: steps}", trainer)
                           ).stage("tune")  # fmt: skip
    assert stage.auto_choice().label().startswith("asha tpe, rungs 3-81")


@pytest.mark.parametrize(
    ("search", "trainer", "message"),
    [
        ("{algorithm: auto, fidelity: lr}", CNN27,
         "search.fidelity must be a setting that sets how long a cnn trial trains and that it"
         " continues from a checkpoint, but got 'lr' (allowed: epochs)"),
        ("{algorithm: auto, fidelity: steps}", '{command: "python3 fit.py"}',
         "search.fidelity 'steps' needs trainer.settings.steps: a trial's full length"),
        ("{algorithm: auto, fidelity: steps}", '{command: "fit", settings: {steps: 2.5}}',
         "trainer.settings.steps, the full length search.fidelity 'steps' splits, must be a"
         " positive integer, but got 2.5"),
        ("{algorithm: pbt, explore: gp}", CNN27,
         "search.explore: must be one of perturb, pb2, but got 'gp'"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_with_what_is_allowed(search: str, trainer: str,
                                                    message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(spec(search, trainer))
    assert message in " ".join(str(info.value).split())


def test_a_searched_fidelity_is_refused() -> None:
    text = spec("{algorithm: auto, fidelity: epochs}").replace(
        "width: {type: int, low: 16, high: 256, log: true}", "epochs: {type: int, low: 1, high: 9}")
    with pytest.raises(SpecError, match="cannot be searched in space too"):
        load_spec_text(text)


def test_pb2_needs_a_number_to_choose() -> None:
    text = STAGE.replace("TRAINER", CNN27).replace("SEARCH", "{algorithm: pbt, explore: pb2}")
    text = text.replace("lr: {type: float, low: 0.001, high: 0.3, log: true}",
                        "optimizer: [sgd, adam]").replace(
        "width: {type: int, low: 16, high: 256, log: true}", "width: 64")
    with pytest.raises(SpecError) as info:
        load_spec_text(text)
    assert ("search.explore pb2 needs a float or int parameter in space for its GP bandit"
            " to choose, but the searched ones are categorical (optimizer)") in str(info.value)


def test_validate_prints_the_pb2_and_auto_hyperband_plans(tmp_path: Path) -> None:
    pb2 = tmp_path / "pb2.yaml"
    pb2.write_text(spec("{algorithm: pbt, explore: pb2, population: 4, intervals: 5}").replace(
        "width: {type: int, low: 16, high: 256, log: true}",  # PBT cannot search a shape
        "momentum: {type: float, low: 0.5, high: 0.99}"))
    auto = tmp_path / "auto.yaml"
    auto.write_text(spec("{algorithm: auto, budget: 20, fidelity: epochs}"))
    result = CliRunner().invoke(cli, ["validate", "--slots", "4", str(pb2), str(auto)])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "pb2 4 members, exploit every 1 epochs" in output
    assert "auto picked asha tpe, rungs 1-27, eta 3, budget 540 epochs" in output
    assert "budget of 20 full trainings is 540 epochs, spent until the next trial" in output
