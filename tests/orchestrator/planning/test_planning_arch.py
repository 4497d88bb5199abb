"""The torch-free model counts agree with the real torch models they describe."""

from __future__ import annotations

import pytest

from nestor.orchestrator.planning import model_size
from nestor.orchestrator.planning._arch import IMAGE_SHAPES

CASES = [
    ("mlp", {"dataset": "digits", "width": 63, "depth": 3}),
    ("mlp", {"dataset": "mnist5k", "width": 256, "depth": 2}),
    ("cnn", {"dataset": "mnist5k", "width": 512, "depth": 1, "channels": 32}),
    ("cnn", {"dataset": "digits", "width": 40, "depth": 2, "channels": 4, "classes": [1, 2, 3]}),
]


@pytest.mark.parametrize(("trainer", "given"), CASES)
@pytest.mark.parametrize("mp", [1, 2, 3])
def test_counts_match_the_torch_model(trainer: str, given: dict, mp: int) -> None:
    from nestor.trainers.catalog import resolve_options
    from nestor.trainers.models import ShardedLinear, build_model, make_arch
    from nestor.trainers.parallel import Parallel

    options = resolve_options(trainer, given, {})
    classes = len(options["classes"]) if options["classes"] else 10
    arch = make_arch(trainer, options, IMAGE_SHAPES[options["dataset"]], classes)
    size = model_size(trainer, options)
    # Rank 0 holds the largest share of every split layer.
    model = build_model(arch, Parallel(1, mp, rank=0), seed=0)
    assert size.params_per_rank(mp) == sum(p.numel() for p in model.parameters())
    full = build_model(arch, None, seed=0)
    assert size.params == sum(p.numel() for p in full.parameters())
    layers = [m for m in full.modules() if isinstance(m, ShardedLinear)]
    assert [(layer.in_features, layer.out_features) for layer in size.split_layers] == [
        (m.in_features, m.out_features) for m in layers]
    assert size.split_params == sum(p.numel() for m in layers for p in m.parameters())
