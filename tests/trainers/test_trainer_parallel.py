"""Data, model and hybrid parallelism with real ranks over Gloo (no mocks), on both
backends: Horovod (horovodrun) and torch.distributed (torchrun)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nestor.trainers import TrainerRef, TrialRequest, run_trial

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow


def _rank_files(outdir: Path, check: str, ranks: int) -> list[dict]:
    files = sorted(outdir.glob(f"{check}-*.json"))
    assert len(files) == ranks, f"expected {ranks} rank reports, found {[f.name for f in files]}"
    return [json.loads(f.read_text()) for f in files]


def _close(a: list[float], b: list[float], rel: float = 1e-5) -> bool:
    return len(a) == len(b) and all(
        abs(x - y) <= rel * max(1.0, abs(y)) for x, y in zip(a, b, strict=True)
    )


def test_mp2_gives_the_unsplit_models_output_and_gradients(ranks, tmp_path):
    done = ranks(2, [str(HERE / "rank_checks.py"), "mp_equivalence", str(tmp_path)])
    assert done.returncode == 0, done.stdout[-4000:]
    reports = _rank_files(tmp_path, "mp_equivalence", 2)
    assert sorted(r["mp_rank"] for r in reports) == [0, 1]
    for report in reports:
        for model in ("mlp", "cnn"):
            result = report[model]
            assert result["out_max_diff"] <= 1e-5 * max(1.0, result["out_scale"]), (model, result)
            split = 0
            for name, grad in result["grads"].items():
                assert grad["scale"] > 0, f"{model} {name}: zero reference gradient"
                assert grad["max_diff"] <= 1e-5 * max(1.0, grad["scale"]), (model, name, grad)
                split += grad["shape"] != grad["full_shape"]
            assert split >= 4, f"{model}: expected split weights, got none: {result['grads']}"
    # The shares differ (63 = 32 + 31): each rank really holds only its part.
    shapes = {r["mp_rank"]: r["mlp"]["grads"]["features.1.weight"]["shape"] for r in reports}
    assert shapes == {0: [32, 64], 1: [31, 64]}


def _single(tmp_path: Path, trainer: str, settings: dict, config: dict) -> dict:
    request = TrialRequest("single", TrainerRef.builtin(trainer), settings=settings,
                           config=config, checkpoint_dir=str(tmp_path / "single-ckpt"))
    result = run_trial(request)
    assert result.ok, result.details
    return result.to_dict()


def _cli_args(settings: dict, config: dict) -> list[str]:
    args = []
    for k, v in settings.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    for k, v in config.items():
        args += ["--param", f"{k}={json.dumps(v)}"]
    return args


def test_dp2_follows_dp1s_loss_curve_with_the_same_global_batch(trainers_cli, tmp_path):
    # 301 samples, batch 33: uneven shares (17 + 16) and a short last batch,
    # so the loss weighting is exercised, not just the easy case.
    settings = {"dataset": "digits", "epochs": 3, "max_train_samples": 301, "seed": 3}
    config = {"width": 48, "batch_size": 33, "lr": 0.1, "optimizer": "momentum"}
    single = _single(tmp_path, "mlp", settings, config)
    dp2 = trainers_cli(2, ["--trainer", "mlp", "--data-parallel", "2",
                           *_cli_args(settings, config)], tmp_path / "dp2.json")
    assert dp2["status"] == "ok", dp2
    for key in ("train_loss", "val_loss", "val_accuracy"):
        ours = [h[key] for h in dp2["history"]]
        ref = [h[key] for h in single["history"]]
        assert _close(ours, ref), (key, ours, ref)
    # Training really happened, and it was not a constant curve.
    losses = [h["train_loss"] for h in single["history"]]
    assert losses[-1] < losses[0] * 0.8
    assert dp2["metrics"]["test_accuracy"] == pytest.approx(single["metrics"]["test_accuracy"])


def test_dp2_by_mp2_matches_the_unsplit_single_process_run(ranks, tmp_path):
    import torch
    from rank_checks import HYBRID_CONFIG, HYBRID_SETTINGS

    single = _single(tmp_path, "cnn", HYBRID_SETTINGS, HYBRID_CONFIG)
    done = ranks(4, [str(HERE / "rank_checks.py"), "hybrid", str(tmp_path)], timeout=240)
    assert done.returncode == 0, done.stdout[-4000:]
    reports = _rank_files(tmp_path, "hybrid", 4)
    # Every rank's story at once: a rank that fails first makes the others fail with
    # "Horovod has been shut down", which alone says nothing of the cause.
    failures = [f"rank {rank} {phase}: {report[phase]['details']}"
                for rank, report in enumerate(reports) for phase in ("first", "resumed")
                if report[phase]["status"] != "ok"]
    assert not failures, "\n\n".join(failures) + "\n\nranks' output:\n" + done.stdout[-6000:]
    assert all(report["resumed"]["resumed_from_epoch"] == 1 for report in reports)
    hybrid = reports[0]["resumed"]
    for key in ("train_loss", "val_loss"):
        ours = [h[key] for h in hybrid["history"]]
        ref = [h[key] for h in single["history"]]
        assert _close(ours, ref, rel=1e-4), (key, ours, ref)
    # The saved (gathered, unsplit) weights equal the single process's weights.
    ours = torch.load(hybrid["checkpoint"], weights_only=True)["model"]
    ref = torch.load(single["checkpoint"], weights_only=True)["model"]
    assert ours.keys() == ref.keys()
    for name in ref:
        assert ours[name].shape == ref[name].shape, name
        assert torch.allclose(ours[name], ref[name], atol=1e-4), name


def test_a_warm_gang_runs_trial_after_trial_of_different_shapes(ranks, tmp_path):
    done = ranks(2, [str(HERE / "rank_checks.py"), "warm", str(tmp_path)])
    assert done.returncode == 0, done.stdout[-4000:]
    by_rank = {r["rank"]: r for r in _rank_files(tmp_path, "warm", 2)}
    root = by_rank[0]
    assert root["backend"] == by_rank[1]["backend"] == ranks.backend
    for name in ("dp2", "mp2", "dp2_again", "dp2_fp16", "dp2_per_rank", "function",
                 "dp2_after_failures"):
        assert root[name]["status"] == "ok", (name, root[name]["reason"], root[name]["details"])
        assert by_rank[1][name]["status"] == "ok", name
    # Per-trial state is reset: the same request gives the same curve again.
    first = [h["train_loss"] for h in root["dp2"]["history"]]
    assert first == [h["train_loss"] for h in root["dp2_again"]["history"]]
    assert first == [h["train_loss"] for h in root["dp2_after_failures"]["history"]]
    # mp2 of the same model: the same curve up to float rounding.
    assert _close([h["train_loss"] for h in root["mp2"]["history"]], first, rel=1e-5)
    # fp16 gradient compression changes the numbers a little, not the course.
    fp16 = [h["train_loss"] for h in root["dp2_fp16"]["history"]]
    assert fp16 != first and _close(fp16, first, rel=2e-2)
    assert _close([h["train_loss"] for h in root["dp2_per_rank"]["history"]], first, rel=1e-6)
    assert root["tiny_batch"]["status"] == "failed"
    assert root["tiny_batch"]["reason"] == (
        "batch_size must be at least the data-parallel size (2), but got 1")
    for name in ("dp2", "mp2"):
        stopped, resumed = root[f"{name}_stopped"], root[f"{name}_resumed"]
        assert stopped["stopped_early"] and len(stopped["history"]) == 1
        assert resumed["status"] == "ok" and resumed["resumed_from_epoch"] == 1
        assert by_rank[1][f"{name}_resumed"]["resumed_from_epoch"] == 1
        assert _close([h["train_loss"] for h in resumed["history"]],
                      [h["train_loss"] for h in root[name]["history"]], rel=1e-5), name
    assert root["bad_option"]["status"] == "failed"
    assert "no option 'widht'" in root["bad_option"]["reason"]
    assert root["wrong_size"]["status"] == "failed"
    assert "needs 4 ranks, but 2 are running" in root["wrong_size"]["reason"]
    assert root["function"]["metrics"]["test_accuracy"] > 0.8
    assert len(root["function"]["history"]) == 2
