"""A user trainer written as a function, to copy from (and to test the function path).

    trainer: {function: "trainers.examples:softmax_digits", settings: {epochs: 3}}

It trains a softmax classifier on scikit-learn's digits, data-parallel
(``ctx.distribute``: Horovod or torch.distributed, as the trial's backend
is) when the trial has several ranks, reports
validation accuracy each epoch, honours ``should_stop()``, and returns its
final metrics. Model parallelism is not used (an mp > 1 trial just repeats
the work in each model-parallel rank).
"""

from __future__ import annotations

from typing import Any


def softmax_digits(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from nestor.trainers.data import epoch_batches, load_splits

    lr = float(config.get("lr", 0.1))
    epochs = int(config.get("epochs", 3))
    batch = int(config.get("batch_size", 64))
    seed = int(config.get("seed", 0))
    splits = load_splits("digits", split_seed=int(config.get("split_seed", 0)))
    torch.manual_seed(seed)
    model = torch.nn.Linear(64, splits.num_classes)
    optimizer: Any = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    net, optimizer = ctx.distribute(model, optimizer)

    def accuracy(x: np.ndarray, y: np.ndarray) -> float:
        with torch.no_grad():
            out = model(torch.from_numpy(x).flatten(1))
        return float((out.argmax(1).numpy() == y).mean())

    val_accuracy = 0.0
    for epoch in range(epochs):
        for idx, size in epoch_batches(len(splits.train), batch, seed=seed, epoch=epoch,
                                       rank=ctx.dp_rank, size=ctx.dp_size):
            xb = torch.from_numpy(splits.train.x[idx]).flatten(1)
            yb = torch.from_numpy(splits.train.y[idx])
            loss = F.cross_entropy(net(xb), yb, reduction="sum") * (ctx.dp_size / size)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        val_accuracy = accuracy(splits.val.x, splits.val.y)
        ctx.report({"val_accuracy": val_accuracy}, step=epoch + 1)
        if ctx.should_stop():
            break
    return {"val_accuracy": val_accuracy,
            "test_accuracy": accuracy(splits.test.x, splits.test.y)}
