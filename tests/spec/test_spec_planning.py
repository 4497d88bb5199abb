"""parallel: auto, batch: and memory_per_slot in a spec: parsed, checked, resolved."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import SpecError, load_spec_text

SPEC = """\
name: auto
resources: {{slots: {slots}{extra}}}
stages:
  - name: tune
    kind: hpo
    trainer: {{name: cnn, settings: {{dataset: mnist5k, epochs: 1}}}}
    parallel: {parallel}
    batch: {{global_max: {cap}, lr_rule: sqrt}}
    search: {{algorithm: random, budget: {runs}}}
    space:
      lr: {{type: float, low: 1.0e-3, high: 0.2, log: true}}
      batch_size: {{type: int, low: 16, high: 64, log: true}}
  - name: final
    kind: train
    from: [tune]
"""


@pytest.fixture(autouse=True)
def empty_profile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans here come from the prior: a profile cached by someone's earlier run must
    not change them."""
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))


def spec(*, slots: int = 8, parallel: str = "auto", cap: int = 256, runs: int = 8,
         extra: str = "") -> str:
    return SPEC.format(slots=slots, parallel=parallel, cap=cap, runs=runs, extra=extra)


def test_auto_resolves_to_a_concrete_shape_within_cap_and_slots() -> None:
    workflow = load_spec_text(spec())
    assert workflow.declared_parallel("tune").is_auto
    shape = workflow.parallel_of("tune")
    assert not shape.is_auto
    assert shape.ranks <= 8 and shape.data * 64 <= 256
    # The train stage inherits auto and plans its one run: wider than a search's trials.
    assert workflow.parallel_of("final").ranks >= shape.ranks
    assert workflow.parallel_of("tune", slots=1).ranks == 1


def test_one_factor_fixed() -> None:
    workflow = load_spec_text(spec(parallel="{data: 2, model: auto}"))
    assert workflow.parallel_of("tune").data == 2
    workflow = load_spec_text(spec(parallel="{data: auto, model: 1}"))
    assert workflow.parallel_of("tune").model == 1


def test_batch_makes_batch_size_per_rank_with_the_lr_rule() -> None:
    workflow = load_spec_text(spec())
    settings = workflow.trainer_of("tune").settings
    assert settings["batch_per_rank"] is True and settings["lr_scaling"] == "sqrt"
    # The hpo runner reads the stage's own trainer, not trainer_of: it must carry them too.
    own = workflow.stage("tune").trainer.settings
    assert own["batch_per_rank"] is True and own["lr_scaling"] == "sqrt"
    assert workflow.trainer_of("final").settings["lr_scaling"] == "sqrt"  # inherited
    plain = load_spec_text(spec().replace("    batch: {global_max: 256, lr_rule: sqrt}\n", "")
                           .replace("parallel: auto", "parallel: {data: 2}"))
    assert "batch_per_rank" not in plain.trainer_of("tune").settings


def test_memory_limit_pushes_to_model_parallelism() -> None:
    free = load_spec_text(spec(runs=64)).parallel_of("tune")
    assert free.model == 1
    tight = load_spec_text(spec(runs=64, extra=", memory_per_slot: 30MiB")).parallel_of("tune")
    assert tight.model > 1


def test_cap_below_one_rank_is_an_error_saying_what_fits() -> None:
    with pytest.raises(SpecError, match="global_max at least 64"):
        load_spec_text(spec(cap=40))


def test_validate_shows_the_plan_and_why(tmp_path: Path) -> None:
    path = tmp_path / "auto.yaml"
    path.write_text(spec())
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "plan for tune: dp" in result.output
    assert "unmeasured prior" in result.output and "ruled out" in result.output
