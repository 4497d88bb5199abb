"""What keeps a GPU fed, checked on the CPU: the host reads the loss once per epoch
(a read is a wait for the GPU), Adam's step counter stays on the CPU after a
resume, the built-in trainers take a ``precision``, a split layer's gather
exchanges no lengths it knows, and a training split is kept on the GPU only
where it fits (trainers.feed)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.checkpoint import full_optimizer_state, load_optimizer_state
from nestor.trainers.comm import TorchComm
from nestor.trainers.data import splits_of, steps_per_epoch
from nestor.trainers.feed import fits_on_device
from nestor.trainers.gpu import resolve_precision
from nestor.trainers.parallel import Parallel, gather_features

DIGITS = {"dataset": "digits", "optimizer": "sgd", "batch_size": 16}


@pytest.fixture
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every read of a tensor's value into Python (float(), .item(), .tolist())."""
    reads: list[str] = []
    for name in ("__float__", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _name: str = name,
                    _original: Any = original) -> Any:
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    yield reads


def test_the_loss_is_read_about_once_per_epoch_not_once_per_step(host_reads: list) -> None:
    epochs = 3
    result = run_trial(TrialRequest("t", TrainerRef.builtin("mlp"),
                                    settings={**DIGITS, "epochs": epochs}))
    assert result.ok, result.reason
    n_train = len(splits_of({"dataset": "digits"}).train)
    steps = steps_per_epoch(n_train, DIGITS["batch_size"], 1) * epochs
    assert steps >= 60
    # per epoch: the train loss and the validation sums; then the test sums
    assert len(host_reads) <= 2 * epochs + 2, host_reads


def test_adams_step_stays_on_the_cpu_when_state_is_loaded_for_another_device() -> None:
    model = torch.nn.Linear(3, 2)
    names = [n for n, _ in model.named_parameters()]
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    saved = full_optimizer_state(optimizer, names, model, None)
    on_meta = torch.nn.Linear(3, 2, device="meta")  # a device the state must move to
    fresh = torch.optim.Adam(on_meta.parameters())
    load_optimizer_state(fresh, saved, names, on_meta)
    for state in fresh.state.values():
        assert state["step"].device.type == "cpu"
        assert state["exp_avg"].device.type == "meta"


def test_precision_bf16_trains_and_auto_is_fp32_on_the_cpu() -> None:
    bf16 = run_trial(TrialRequest("b", TrainerRef.builtin("mlp"),
                                  settings={**DIGITS, "epochs": 2, "precision": "bf16"}))
    assert bf16.ok, bf16.reason
    assert bf16.metrics["val_accuracy"] > 0.5
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    fp16 = run_trial(TrialRequest("h", TrainerRef.builtin("mlp"),
                                  settings={**DIGITS, "epochs": 1, "precision": "fp16"}))
    assert fp16.status == "failed" and "precision fp16 needs a GPU" in fp16.reason


def test_auto_precision_is_bf16_on_a_gpu_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto", torch.device("cuda", 0)) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto", torch.device("cuda", 0)) == "fp32"
    assert resolve_precision("fp16", torch.device("cuda", 0)) == "fp16"


def test_a_split_layers_gather_exchanges_no_lengths_it_knows() -> None:
    """mp = 2, widths 2 and 1: one all_gather of the padded features, none of lengths."""
    calls: list[int] = []

    def all_gather(parts: list[torch.Tensor], tensor: torch.Tensor, group: Any = None) -> None:
        calls.append(len(parts))
        for index, part in enumerate(parts):
            part.copy_(tensor + 10 * index)  # rank i's features: this rank's + 10 i

    comm = TorchComm.__new__(TorchComm)
    comm.dist = SimpleNamespace(all_gather=all_gather, get_world_size=lambda group=None: 2,
                                group=SimpleNamespace(WORLD="world"))
    comm._groups = {}
    par = Parallel(1, 2, rank=0, comm=comm, mp_set="mp")
    local = torch.tensor([[1.0, 2.0]])  # one sample, this rank's 2 features
    out = gather_features(local, par, "fc", [2, 1])
    assert calls == [2]
    assert out.tolist() == [[1.0, 2.0, 11.0]]  # rank 1's first (its only) feature


def test_a_training_split_is_kept_on_the_gpu_only_where_it_fits() -> None:
    gib = 2**30
    assert fits_on_device(20 * gib, 80 * gib)
    assert not fits_on_device(21 * gib, 80 * gib)
    assert not fits_on_device(2 * gib, 80 * gib, gpu_share=0.0625)
