"""Checkpoints: one plain `torch.save` file per epoch, written atomically by rank 0.

A checkpoint is a dict, loadable with ``torch.load(path, weights_only=True)``::

    {"format": "nestor.trainers/1",
     "epoch": 3,                       # epochs completed
     "arch": {...},                    # rebuild the model: trainers.models.build_model(arch)
     "model": {name: tensor},          # the FULL (unsplit) state dict
     "optimizer": {"state": {param name: {key: tensor}}, "param_groups": [...]} or None,
     "options": {...},                 # the trial's resolved settings and hyperparameters
     "history": [{...}, ...],          # per-epoch metrics so far
     "trial_id": "..."}

Weights are stored unsplit (split layers are gathered from their
model-parallel group before saving), and optimizer state is keyed by
parameter name, so a checkpoint loads into any dp x mp shape, and into a
plain single process for ensembles. Files are named ``epoch-00003.pt``;
each is written to a temporary name and renamed, so a crash mid-write never
leaves a half file under a real name; older epochs are removed once the new
one is in place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nestor.durable import replace_durably

FORMAT = "nestor.trainers/1"
_NAME = re.compile(r"^epoch-(\d{5,})\.pt$")


def checkpoint_path(directory: str | os.PathLike[str], epoch: int) -> Path:
    return Path(directory) / f"epoch-{epoch:05d}.pt"


def latest_checkpoint(directory: str | os.PathLike[str] | None) -> Path | None:
    """The newest complete checkpoint in ``directory``, or None."""
    if directory is None or not Path(directory).is_dir():
        return None
    found = [(int(m.group(1)), p) for p in Path(directory).iterdir()
             if (m := _NAME.match(p.name)) and p.is_file()]
    return max(found)[1] if found else None


def resolve_source(source: str | os.PathLike[str]) -> Path:
    """A checkpoint file, or the latest checkpoint of a trial's checkpoint directory."""
    path = Path(source)
    if path.is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"init_from must be a checkpoint or a directory holding one,"
                                    f" but {path} has no epoch-*.pt file")
        return latest
    if not path.is_file():
        raise FileNotFoundError(f"init_from must be a checkpoint file or directory, but {path}"
                                " does not exist")
    return path


def save_checkpoint(directory: str | os.PathLike[str], payload: Mapping[str, Any],
                    *, keep: int = 1) -> Path:
    """Write ``payload`` as the checkpoint of its epoch, atomically; keep the newest ``keep``."""
    import torch

    directory = Path(directory)
    final = replace_durably(checkpoint_path(directory, int(payload["epoch"])),
                            lambda handle: torch.save({"format": FORMAT, **payload}, handle))
    older = sorted((int(m.group(1)), p) for p in directory.iterdir()
                   if (m := _NAME.match(p.name)) and p != final)
    for _, path in older[: max(0, len(older) - (keep - 1))]:
        path.unlink(missing_ok=True)
    return final


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint (tensors to CPU), checking it is one of ours."""
    import torch

    path = resolve_source(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path} is not a readable checkpoint: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} must be a nestor checkpoint ({FORMAT}), but it is not")
    return payload


# --- moving weights between the unsplit file and a (possibly split) model ------------


def full_state_dict(model: Any, par: Any) -> dict[str, Any]:
    """The model's unsplit state dict on every rank (collective in each mp group)."""
    from nestor.trainers.models import sharded_layers

    owners = sharded_layers(model)
    full = {}
    for name, tensor in model.state_dict().items():
        if name in owners and par is not None and par.mp > 1:
            tensor = par.comm.allgather(tensor.detach().contiguous(), par.mp_set,
                                        f"ckpt.{name}", lengths=owners[name].widths)
        full[name] = tensor.detach().cpu().clone()
    return full


def _shard(model: Any, name: str, tensor: Any) -> Any:
    from nestor.trainers.models import sharded_layers

    owner = sharded_layers(model).get(name)
    return owner.shard(tensor) if owner is not None else tensor


def mean_weights(sources: Iterable[str | os.PathLike[str]],
                 groups: Iterable[str] = ("features",)) -> dict[str, Any]:
    """A checkpoint payload whose ``groups`` hold the mean of the sources' weights.

    Sub-models trained from the same initial weights on parts of a problem
    (hierarchical transfer) share a basin; their averaged features start the
    combined model, which is then fine-tuned on the whole problem. Each rank
    computes it in memory from the shared checkpoints: nothing is written, and
    the driver never loads a model.
    """
    payloads = [load_checkpoint(s) for s in sources]
    if not payloads:
        raise ValueError("init_from needs at least one checkpoint to average")
    wanted = tuple(groups)
    first = payloads[0]
    model = {name: sum(p["model"][name] for p in payloads) / len(payloads)
             for name in first["model"] if name.split(".", 1)[0] in wanted}
    return {**first, "model": model, "optimizer": None, "history": []}


def load_weights(model: Any, source: str | os.PathLike[str] | Mapping[str, Any], *,
                 groups: Iterable[str] | None = None, freeze: Iterable[str] = ()) -> list[str]:
    """Load weights from a checkpoint into ``model`` (split or not); freeze groups.

    ``groups``: the layer groups to load (None: every parameter must load).
    Each loaded tensor must match the model's shape exactly, else a
    ValueError names it; a new classifier for other classes is the usual
    reason, and loading ``groups=["features"]`` the usual answer. Returns
    the names of the loaded tensors.

        model = build_model(arch)
        load_weights(model, "runs/x/trial-7", groups=["features"], freeze=["features"])
    """
    from nestor.trainers.models import freeze_groups, layer_groups

    payload = source if isinstance(source, Mapping) else load_checkpoint(source)
    state = payload.get("model", payload)
    known = layer_groups(model)
    wanted = tuple(known if groups is None else groups)
    for group in wanted:
        if group not in known:
            raise ValueError(f"init_groups must name layer groups ({', '.join(known)}), but got"
                             f" {group!r}")
    current = model.state_dict()
    loaded: dict[str, Any] = {}
    for name, target in current.items():
        if name.split(".", 1)[0] not in wanted:
            continue
        if name not in state:
            raise ValueError(f"the checkpoint has no weights for {name!r}; it holds"
                             f" {', '.join(sorted(state)) or 'nothing'}")
        tensor = _shard(model, name, state[name])
        if tuple(tensor.shape) != tuple(target.shape):
            raise ValueError(
                f"{name} must have shape {tuple(target.shape)} to load, but the checkpoint's is"
                f" {tuple(state[name].shape)} (another architecture or class count? load only"
                " some groups, e.g. init_groups: [features])"
            )
        loaded[name] = tensor
    model.load_state_dict(loaded, strict=False)
    freeze_groups(model, tuple(freeze))
    return sorted(loaded)


def full_optimizer_state(optimizer: Any, names: list[str], model: Any, par: Any) -> dict[str, Any]:
    """The optimizer's state keyed by parameter name, split state gathered (collective)."""
    from nestor.trainers.models import sharded_layers

    owners = sharded_layers(model)
    state_dict = optimizer.state_dict()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(names):
        entry = state_dict["state"].get(index)
        if entry is None:
            continue
        out = {}
        for key, value in sorted(entry.items()):
            if (hasattr(value, "shape") and name in owners and par is not None and par.mp > 1
                    and tuple(value.shape) == tuple(params[index].shape)):
                value = par.comm.allgather(value.contiguous(), par.mp_set,
                                           f"ckpt.opt.{name}.{key}", lengths=owners[name].widths)
            out[key] = value.detach().cpu().clone() if hasattr(value, "detach") else value
        state[name] = out
    groups = []
    for group in state_dict["param_groups"]:
        groups.append({**group, "params": [names[i] for i in group["params"]]})
    return {"state": state, "param_groups": groups}


def load_optimizer_state(optimizer: Any, saved: Mapping[str, Any], names: list[str],
                         model: Any) -> None:
    """Load name-keyed optimizer state into an optimizer over ``names`` (split or not)."""
    from nestor.trainers.models import sharded_layers

    owners = sharded_layers(model)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, Any]] = {}
    for index, name in enumerate(names):
        entry = saved["state"].get(name)
        if entry is None:
            continue
        out = {}
        for key, value in entry.items():
            if hasattr(value, "shape") and name in owners and value.dim() > 0 \
                    and value.shape[0] == owners[name].out_features:
                value = owners[name].shard(value)
            # Adam's `step` counter stays on the CPU, where torch keeps it: on the GPU each
            # step would read it back to the host once per parameter.
            if hasattr(value, "to") and key != "step":
                value = value.to(params[index].device)
            out[key] = value
        state[index] = out
    current = optimizer.state_dict()
    groups = []
    for group, old in zip(current["param_groups"], saved["param_groups"], strict=False):
        merged = {**old, "params": group["params"]}
        groups.append(merged)
    if len(groups) != len(current["param_groups"]):
        groups = current["param_groups"]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
