"""The test split never leaks into tuning: checks on a validated workflow.

Every figure nestor reports as a model's quality is its accuracy on the test
split, and that is honest only if no choice made while tuning saw a test row.
So a spec is refused (each finding points at the field to fix) when

- a search optimizes a test metric (``test_accuracy``, ``test_loss``, ...);
- a trial could move rows between splits: a split setting
  (``trainers.catalog.SPLIT_SETTINGS``) searched or fixed in ``space``, or set in
  a stage's per-trial ``config``; ``train_data`` set anywhere but through a train
  stage's ``data:``;
- a stage would be scored on other splits than the stages it draws from (an
  ensemble's members, a train stage's configuration, a transfer's tuned
  hyperparameters), or a transfer stage pretrains on rows that are its target's
  test rows (source and target on one dataset, split differently).

>>> from nestor.orchestrator.spec import load_spec_text
>>> load_spec_text('''
... name: leak
... stages:
...   - {name: t, kind: hpo, trainer: {name: mlp}, search: {algorithm: random},
...      space: {lr: 0.1}, objective: {metric: test_accuracy, mode: max}}
... ''')  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
orchestrator.spec.errors.SpecError: <spec>:5:...: objective.metric must not be a test metric...
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from nestor.trainers.catalog import SPLIT_SETTINGS, TRAINERS

from .model import Finding, Workflow

TEST_METRIC = re.compile(r"^test($|[_.\-])", re.IGNORECASE)
# What decides the rows of the validation and test splits of one dataset.
ROWS = ("data_dir", "split_seed", "val_fraction", "test_fraction")
SPLIT_LIST = ", ".join(SPLIT_SETTINGS)


def check_splits(workflow: Workflow) -> Iterator[Finding]:
    for index, stage in enumerate(workflow.stages):
        try:
            workflow.trainer_of(stage.name)
            for ref in stage.from_:
                workflow.trainer_of(ref)
        except (KeyError, IndexError, ValueError):
            trainerless = True  # reported on its own ("nothing to inherit")
        else:
            trainerless = False
        here = ("stages", index)
        yield from _objectives(here, stage)
        for name in stage.searched():
            if name in SPLIT_SETTINGS:
                yield (*here, "space", name), (
                    f"space must not name a split setting, but got {name!r}: it would"
                    " move rows between the training, validation and test splits from"
                    " trial to trial, so trials would be compared on different"
                    " validation rows and could train on test rows; set it once in"
                    f" trainer.settings (split settings: {SPLIT_LIST})"
                )
        for name in stage.fixed_config():
            if name in SPLIT_SETTINGS:
                hint = ("; to retrain on the validation rows too, use a train stage's"
                        " data: train+val" if name == "train_data" else
                        "; set it in trainer.settings, the same as the stages it draws from")
                yield (*here, "config", name), (
                    f"config must not set a split setting, but got {name!r}: config is"
                    f" per trial, and splits are fixed per workflow{hint}"
                    f" (split settings: {SPLIT_LIST})"
                )
        yield from _train_data(here, stage)
        if trainerless:
            continue
        if stage.tasks():
            yield from _transfer(workflow, here, stage)
        elif not stage.searches:  # a search draws nothing from its sources
            yield from _same_as_sources(workflow, here, stage)


def _objectives(here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
    for number, objective in enumerate(stage.objectives):
        if TEST_METRIC.match(objective.metric):
            yield (*here, "objective", number, "metric"), (
                f"objective.metric must not be a test metric, but got {objective.metric!r}:"
                " the test split is what the results report, and a search tuned on it"
                " reports a figure no new data would confirm (allowed: a validation or"
                " training metric, e.g. val_accuracy, val_loss)"
            )


def _train_data(here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
    places: list[tuple[tuple[Any, ...], Mapping[str, Any]]] = []
    if stage.trainer is not None:
        places.append(((*here, "trainer", "settings"), stage.trainer.settings))
    places += [((*here, side, "settings"), task.settings) for side, task in stage.tasks().items()]
    for loc, settings in places:
        value = settings.get("train_data", "train")
        if value != "train":
            yield (*loc, "train_data"), (
                f"train_data must be 'train' in settings, but got {value!r}: trials that"
                " train on the validation rows cannot be chosen or weighted on them; a"
                " train stage's data: train+val retrains the chosen configuration on"
                " them after tuning (the test split stays held out)"
            )


def split_of(workflow: Workflow, name: str,
             task: Any | None = None) -> dict[str, Any]:
    """The split settings a stage's trials use: the trainer's defaults (built-in
    trainers), its settings, and for a transfer task the task's dataset, classes
    and settings."""
    trainer = workflow.trainer_of(name)
    values: dict[str, Any] = {}
    if trainer.name in TRAINERS:
        options = TRAINERS[trainer.name].settings
        values = {key: options[key].default for key in SPLIT_SETTINGS if key in options}
    values.update({k: v for k, v in trainer.settings.items() if k in SPLIT_SETTINGS})
    if task is not None:
        values["dataset"] = task.dataset
        if task.classes is not None:
            values["classes"] = list(task.classes)
        values.update({k: v for k, v in task.settings.items() if k in SPLIT_SETTINGS})
    return values


def _source_split(workflow: Workflow, name: str) -> dict[str, Any]:
    """What a source stage's models were scored on (a transfer: its target)."""
    return split_of(workflow, name, workflow.stage(name).scored_task())


def _show(value: Any) -> str:
    return "unset" if value is None else repr(value)


def _same_as_sources(workflow: Workflow, here: tuple[Any, ...],
                     stage: Any) -> Iterator[Finding]:
    ours = split_of(workflow, stage.name)
    own = stage.trainer.settings if stage.trainer is not None else {}
    for ref_index, ref in enumerate(stage.from_):
        theirs = _source_split(workflow, ref)
        for key in ("dataset", *ROWS, "classes"):
            if ours.get(key) == theirs.get(key):
                continue
            if key in own or stage.trainer is not None:
                yield (*here, "trainer", "settings", key), (
                    f"{key} must be the same as in stage {ref!r} ({_show(theirs.get(key))}),"
                    f" but got {_show(ours.get(key))}: this stage's models would be scored on"
                    f" other validation and test rows than {ref!r}, whose trials chose them"
                    " and may have trained on those rows"
                )
            else:
                yield (*here, "from", ref_index), (
                    f"from: {ref!r} must use the same splits as this stage, but its {key} is"
                    f" {_show(theirs.get(key))} and this stage's is {_show(ours.get(key))}"
                    f" (set {key} in this stage's trainer.settings to match)"
                )
            break  # one finding per source is enough to fix it


def _transfer(workflow: Workflow, here: tuple[Any, ...],
              stage: Any) -> Iterator[Finding]:
    sides = {side: split_of(workflow, stage.name, getattr(stage, side))
             for side in ("source", "target")}
    source, target = sides["source"], sides["target"]
    if source.get("dataset") == target.get("dataset"):
        for key in ROWS:
            if source.get(key) != target.get(key):
                side = "target" if key in stage.target.settings else "source"
                yield (*here, side, "settings", key), (
                    f"{key} must be the same for source and target on one dataset"
                    f" ({stage.source.dataset}), but got {_show(source.get(key))} and"
                    f" {_show(target.get(key))}: the split is drawn over the whole dataset,"
                    " so pretraining on the source would train on rows that are the"
                    " target's test rows"
                )
                break
    for ref_index, ref in enumerate(stage.from_):
        theirs = _source_split(workflow, ref)
        for side, ours in sides.items():
            if ours.get("dataset") != theirs.get("dataset"):
                continue  # other data: no row of one is a row of the other
            key = next((k for k in ROWS if ours.get(k) != theirs.get(k)), None)
            if key is None:
                continue
            task_settings = getattr(stage, side).settings
            loc = ((*here, side, "settings", key) if key in task_settings else
                   (*here, "trainer", "settings", key)
                   if stage.trainer is not None and key in stage.trainer.settings else
                   (*here, "from", ref_index))
            yield loc, (
                f"{key} must be the same as in stage {ref!r} ({_show(theirs.get(key))}) for"
                f" the {side} on {ours.get('dataset')}, but got {_show(ours.get(key))}: the"
                f" hyperparameters taken from {ref!r} were chosen on other validation rows,"
                " and its trials may have trained on this stage's test rows"
            )
