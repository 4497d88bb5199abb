"""A trial's ranks (:class:`Shape`) and where a gang of them goes on nodes (:func:`place`).

Neutral ground for both backends: the Ray pool admits gangs by :func:`place`, and
the simulated cluster places them by the same rule; the Backend interface speaks
of shapes. Nothing here knows Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nestor.trainers.comm import comm_class  # what a rank can talk over: declared once


@dataclass(frozen=True, order=True)
class Shape:
    """The ranks of one trial: data-parallel x model-parallel, and what they talk over
    (``horovod``, or ``torch`` for torch.distributed): gangs of another backend are
    not interchangeable, so the backend is part of what a warm gang is reused for."""

    data: int = 1
    model: int = 1
    backend: str = "horovod"

    def __post_init__(self) -> None:
        for name in ("data", "model"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, but got {value!r}")
        comm_class(self.backend)  # a name no backend has: refused, naming those there are

    @property
    def ranks(self) -> int:
        return self.data * self.model

    def __str__(self) -> str:
        return f"{self.data}x{self.model}"



def place(free: Sequence[int], shape: Shape) -> list[tuple[int, int]] | None:
    """Where a gang's ranks go: ``[(node, ranks there), ...]``, or None if it does
    not fit. Each model-parallel group (``shape.model`` consecutive ranks) lies on
    one node; groups go best-fit, to the nodes with the fewest free slots that
    still hold a group, so whole nodes stay free for wide groups. The one rule
    for the real pool's admission and the simulated cluster's placement.

    >>> place([8, 3, 4], Shape(data=3, model=2))
    [(1, 2), (2, 4)]
    >>> place([3, 3], Shape(data=1, model=4)) is None
    True
    """
    mp, groups = shape.model, shape.data
    fitting = sorted((f, node) for node, f in enumerate(free) if f >= mp)
    if sum(f // mp for f, _ in fitting) < groups:
        return None
    out = []
    for f, node in fitting:
        take = min(f // mp, groups)
        out.append((node, take * mp))
        groups -= take
        if not groups:
            break
    return out


def place_groups(free: Sequence[int], shape: Shape) -> list[int] | None:
    """The nodes' free slots once ``shape``'s groups are placed (:func:`place`), or
    None if they do not fit.

    >>> place_groups([3, 3, 4], Shape(data=2, model=2))
    [1, 1, 4]
    """
    where = place(free, shape)
    if where is None:
        return None
    left = list(free)
    for node, ranks in where:
        left[node] -= ranks
    return left
