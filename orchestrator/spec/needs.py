"""What a stage needs of its trainer beyond a result, and what the trainer must do.

A search that continues trials (PBT, PB2, ASHA, Hyperband, BOHB, ``auto`` when it
picks one of those), a train stage that replays a PBT winner's schedule and a
transfer stage need checkpoints; an ensemble needs its members' predictions.
Built-in trainers give both. Whether user code does cannot be seen before it
runs, so a function or command trainer says so in the spec
(``trainer: {checkpoints: true, predictions: true}``): `nestor validate` refuses a
stage whose trainer does not, and the engine fails the run when a trainer that
said so leaves none (orchestrator/engine/trials.py), so that a continuing search
never quietly becomes a random one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HOW = {
    "checkpoints": (
        "save to ctx.checkpoint_dir and load ctx.continue_from (ctx.init_from for"
        " transfer), or NESTOR_CHECKPOINT_DIR / NESTOR_CONTINUE_FROM (NESTOR_INIT_FROM)"
        " for a command"),
    "predictions": (
        "write predictions.npz (arrays val_probs, val_labels, test_probs, test_labels)"
        " into ctx.checkpoint_dir, or NESTOR_CHECKPOINT_DIR for a command"),
}
"""What a function or command trainer must do to give each capability."""


@dataclass(frozen=True)
class Need:
    """A capability (``checkpoints``, ``predictions``) a stage needs of its trainer,
    the field of the stage that asks for it, and why, in a few words."""

    capability: str
    where: tuple[Any, ...]
    why: str


def what_to_do(capability: str, why: str, *, declare: bool = True) -> str:
    """The sentence that says what a trainer must do, e.g. "PBT needs checkpoints: ...";
    with ``declare``, also that its spec must say so."""
    said = f", and set {capability}: true in its trainer" if declare else ""
    return f"{why} needs {capability}: {HOW[capability]}{said}"


def unmet_needs(workflow: Any, index: int, stage: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Findings for each need of ``stage`` (``stages[index]``) that its trainer (its own,
    or inherited through from:) does not declare."""
    try:
        trainer = workflow.trainer_of(stage.name)
    except (KeyError, IndexError, ValueError):
        return  # a missing or cyclic from: is reported on its own
    for need in stage.needs(workflow):
        if not trainer.can(need.capability):
            yield ("stages", index, *need.where), (
                f"stage {stage.name!r}: its {trainer.kind} trainer {trainer.describe()!r} does"
                f" not say it gives {need.capability}, and {what_to_do(need.capability, need.why)}"
            )
