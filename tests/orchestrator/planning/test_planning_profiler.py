"""The profiling step runs real Horovod ranks over Gloo and caches what it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nestor.orchestrator.planning import Profile, calibrate, checks, model_size, profile
from nestor.orchestrator.planning import _profiler as profiler
from nestor.orchestrator.planning._stage import estimated_train_samples

pytestmark = pytest.mark.slow
OPTIONS = {"dataset": "digits", "width": 64, "depth": 2, "optimizer": "momentum"}


def test_profiles_real_ranks_caches_and_journals(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from nestor.trainers.catalog import resolve_options

    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    options = resolve_options("mlp", OPTIONS, {})
    run_dir = tmp_path / "run" / "profiles"
    shapes = [(1, 1), (2, 1), (1, 2)]
    got = profile("mlp", options, shapes=shapes, batches=(8, 32), steps=3, repeats=1,
                  places=[run_dir])
    assert got.shapes == sorted(shapes)
    by_shape = {(s.dp, s.mp): s for s in got.steps if s.batch == 32}
    # Only real ranks reduce and gather: a single process has nothing to wait on.
    assert by_shape[(2, 1)].allreduce_s > 0 and by_shape[(2, 1)].gather_s == 0
    assert by_shape[(1, 2)].gather_s > 0 and by_shape[(1, 2)].allreduce_s == 0
    assert by_shape[(1, 1)].gather_s == by_shape[(1, 1)].allreduce_s == 0
    assert {c.kind for c in got.comm} == {"allreduce", "allgather"}
    assert all(c.ranks == 2 and c.seconds > 0 for c in got.comm)
    assert all(s.peak_memory_bytes >= 0 and s.compute_s > 0 for s in got.steps)
    # digits: 1,797 less 180 for validation and 180 for test; the prior counts alike.
    assert got.train_samples == 1437 == estimated_train_samples(options)
    # Plain data: the journal and the run directory hold it, and it reads back equal.
    record = json.loads(json.dumps(got.to_record()))
    assert Profile.from_record(record) == got
    assert (run_dir / f"{got.key}.json").is_file()
    assert (tmp_path / "cache" / "profiles" / f"{got.key}.json").is_file()

    # A second call (a resume, a later plan) profiles nothing.
    def no_probe(*args: object, **kwargs: object) -> dict:
        raise AssertionError("profiled again despite the cache")

    monkeypatch.setattr(profiler, "probe_shape", no_probe)
    assert profile("mlp", options, shapes=shapes, batches=(8, 32)) == got
    # The cost model fits it and reports an error per profiled step.
    size = model_size("mlp", options)
    model = calibrate(got, size)
    assert model.measured and model.comm.alpha > 0
    assert len(checks(got, size)) == len(got.steps)


def test_a_failing_probe_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(profiler.ProfileError, match="profiling mlp at 1x1 failed"):
        profiler.probe_shape("mlp", {"dataset": "digits", "width": 0}, {}, 1, 1, [8])


def test_a_torch_stage_is_profiled_on_torch_ranks_under_its_own_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's ranks, not horovodrun's: a site without Horovod can still plan."""
    from nestor.trainers.catalog import resolve_options

    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "cache"))
    options = resolve_options("mlp", OPTIONS, {})
    launched: list[list[str]] = []
    real_run = profiler.run_argv

    def recording(argv: list[str], **kwargs: object) -> tuple[int, str]:
        launched.append(argv)
        return real_run(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(profiler, "run_argv", recording)
    got = profile("mlp", options, shapes=[(2, 1), (1, 2)], batches=(8,), steps=2, repeats=1,
                  backend="torch")
    assert all("torch.distributed.run" in argv and "horovodrun" not in " ".join(argv)
               for argv in launched), launched
    by_shape = {(s.dp, s.mp): s for s in got.steps}
    assert by_shape[(2, 1)].allreduce_s > 0 and by_shape[(1, 2)].gather_s > 0
    assert {c.kind for c in got.comm} == {"allreduce", "allgather"}
    assert got.machine["backend"] == "torch"
    # Not the Horovod profile's key: the two backends' collectives cost differently.
    horovod_key = profiler.profile_key("mlp", options, profiler.machine(), (8,))
    assert got.key != horovod_key
