"""The README's defaults for a stage's `trial` block (its table of fields): a trial
with no `trial` block gets no timeout, one retry and a 30 min progress timeout;
`progress_timeout: null` turns the hang check off. The engine's use of the value is
tested at 12 s in tests/reliability/test_engine_events.py."""

from __future__ import annotations

from nestor.orchestrator.spec import load_spec_text

SPEC = """
name: defaults
stages:
  - name: tune
    kind: hpo
    trainer: {{name: mlp, settings: {{dataset: digits}}}}
    search: {{algorithm: random, budget: 2}}
    space: {{lr: {{type: float, low: 0.01, high: 0.1}}}}
{trial}
"""


def test_a_stage_without_a_trial_block_gets_the_readmes_defaults() -> None:
    trial = load_spec_text(SPEC.format(trial="")).stages[0].trial
    assert (trial.timeout, trial.retries, trial.progress_timeout) == (None, 1, 30 * 60)


def test_progress_timeout_null_turns_the_hang_check_off() -> None:
    text = SPEC.format(trial="    trial: {progress_timeout: null}")
    assert load_spec_text(text).stages[0].trial.progress_timeout is None
