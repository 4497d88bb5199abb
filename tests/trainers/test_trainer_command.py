"""Command trainers: argv flags, results from output, bounded logs, and every way to fail."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from nestor.trainers import TrainerRef, TrialRequest, run_trial
from nestor.trainers.command import build_argv

PY = sys.executable


def _run(tmp_path: Path, script: str, config: dict | None = None, **kwargs) -> object:
    path = tmp_path / "fit.py"
    path.write_text(script)
    trainer_kwargs = {k: kwargs.pop(k) for k in ("result_pattern", "flag_prefix", "result_metric")
                      if k in kwargs}
    request = TrialRequest(
        "cmd", TrainerRef.command([PY, str(path)], **trainer_kwargs), config=config or {},
        log_dir=str(tmp_path / "logs"), **{k: kwargs.pop(k) for k in ("timeout", "settings")
                                           if k in kwargs},
    )
    return run_trial(request, **kwargs)


ECHO = "import sys\nprint('args', sys.argv[1:])\nprint('FoM: 0.75')\n"


def test_flags_are_built_as_urika_and_candle_pass_them():
    assert build_argv(["fit"], {"lr": 0.5, "-a": 1, "layers": [1, 2]}) == [
        "fit", "--lr=0.5", "-a=1", "--layers=1,2"]
    assert build_argv(["fit"], {"lr": 0.5}, prefix="-") == ["fit", "-lr=0.5"]
    assert build_argv(["fit"], {"lr": 0.5}, prefix="") == ["fit", "lr=0.5"]


def test_a_command_gets_literal_values_and_its_result_is_read(tmp_path):
    marker = tmp_path / "pwned"
    reports = []
    result = _run(tmp_path, ECHO + "print('FoM: 0.875')\n",
                  config={"lr": 0.1, "-a": 0.5, "evil": f"$(touch {marker})"},
                  report=lambda m, s: reports.append((m, s)))
    assert result.ok, result.reason
    assert result.metrics["result"] == 0.875
    assert "wall_time" in result.metrics
    assert not marker.exists(), "a value was run through a shell"
    out = Path(result.logs["stdout"]).read_text()
    assert f"'--evil=$(touch {marker})'" in out and "'-a=0.5'" in out and "'--lr=0.1'" in out
    # Every matching line is reported as a step, the last one is the result.
    assert reports == [({"result": 0.75}, 1), ({"result": 0.875}, 2)]
    assert (tmp_path / "logs" / "command.txt").read_text().splitlines()[-1] == (
        f"--evil=$(touch {marker})")


def test_pattern_prefix_and_metric_name_are_configurable(tmp_path):
    script = "import sys\nprint('accuracy=', sys.argv[1])\n"
    result = _run(tmp_path, script, config={"x": 3}, result_pattern=r"accuracy= -x=(\S+)",
                  flag_prefix="-", result_metric="val_accuracy")
    assert result.ok, result.reason
    assert result.metrics["val_accuracy"] == 3.0


def test_a_result_on_stderr_counts_when_stdout_has_none(tmp_path):
    result = _run(tmp_path, "import sys\nprint('FoM: 2.5', file=sys.stderr)\n")
    assert result.ok and result.metrics["result"] == 2.5


@pytest.mark.parametrize("script, reason", [
    ("print('done, no figure')\n",
     r"command printed no line matching 'FoM: (\S+)'; last output: 'done, no figure'"),
    ("import sys\nprint('FoM: 0.9')\nsys.stderr.write('boom\\n')\nsys.exit(3)\n",
     "command exited with status 3; last output: 'boom'"),
    ("print('FoM: 0.9abc')\n", "the result '0.9abc' in the line 'FoM: 0.9abc' is not a number"),
    ("print('FoM: nan')\n", "the result 'nan' in the line 'FoM: nan' is not finite"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "command was killed by SIGKILL"),
])
def test_a_failing_command_is_a_failed_trial_with_its_reason(tmp_path, script, reason):
    result = _run(tmp_path, script)
    assert result.status == "failed"
    assert result.reason.startswith(reason), result.reason
    assert str(tmp_path / "logs") in result.reason or "not" in reason


def test_a_missing_program_is_a_failed_trial(tmp_path):
    request = TrialRequest("cmd", TrainerRef.command(["/no/such/program", "x"]))
    result = run_trial(request)
    assert result.status == "failed" and result.reason == "command not found: '/no/such/program'"
    assert result.repeats  # a rerun finds no program either


ARGPARSE = ("import argparse\nparser = argparse.ArgumentParser()\n"
            "parser.add_argument('--rate')\nparser.parse_args()\n")


@pytest.mark.parametrize(("script", "config", "repeats"), [
    (ARGPARSE, {"lr": 0.1}, True),  # argparse refuses --lr: exit 2
    ("import sys\nsys.exit(126)\n", {}, True),
    ("import sys\nsys.exit(127)\n", {}, True),
    ("open('/no/such/digits.npz')\n", {}, True),  # a traceback's FileNotFoundError, exit 1
    ("import not_a_package_anyone_installed\n", {}, True),
    ("def broken(:\n", {}, True),  # SyntaxError
    ("print('accuracy 0.9')\n", {}, True),  # no FoM line
    ("print('FoM: high')\n", {}, True),
    ("import sys\nsys.exit('no licence for the solver')\n", {}, False),  # exit 1: may pass
    ("raise RuntimeError('CUDA error: out of memory')\n", {}, False),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", {}, False),
    ("print('FoM: nan')\n", {}, False),
])
def test_a_failure_says_whether_a_rerun_would_meet_it_again(tmp_path, script, config, repeats):
    result = _run(tmp_path, script, config=config)
    assert result.status == "failed"
    assert result.repeats is repeats, result.reason


def test_a_missing_script_exits_2_and_would_repeat(tmp_path):
    request = TrialRequest("cmd", TrainerRef.command([PY, str(tmp_path / "no_such_fit.py")]))
    result = run_trial(request)
    assert "status 2" in result.reason and result.repeats


def test_a_timeout_kills_the_command_and_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    result = _run(tmp_path, script, timeout=2.0)
    assert result.status == "failed" and result.reason.startswith("command timed out after 2 s")
    assert time.monotonic() - started < 20
    child = int(pidfile.read_text())

    def gone() -> bool:
        try:
            return "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[-1][:3]
        except FileNotFoundError:
            return True

    # SIGKILL is delivered asynchronously: on a loaded machine the child may still be
    # listed as running for a moment after killpg returns (seen here at load 14).
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(), "the command's child outlived its timeout"


def test_should_stop_ends_a_command_and_keeps_its_last_result(tmp_path):
    script = "import time\nfor i in range(100):\n    print(f'FoM: {i}', flush=True)\n" \
             "    time.sleep(0.2)\n"
    seen: list[float] = []
    result = _run(tmp_path, script, report=lambda m, s: seen.append(m["result"]),
                  should_stop=lambda: len(seen) >= 3)
    assert result.ok and result.stopped_early
    assert result.metrics["result"] >= 2.0 and len(seen) < 50


def test_a_flood_of_output_is_kept_bounded_with_a_note(tmp_path):
    # 200 MB of output in long lines, then the result: memory and log stay bounded.
    script = ("import sys\nline = 'x' * 99999 + '\\n'\nfor _ in range(2000):\n"
              "    sys.stdout.write(line)\nprint('FoM: 1.5')\n")
    import resource

    from nestor.trainers.command import run_command

    path = tmp_path / "flood.py"
    path.write_text(script)
    request = TrialRequest("flood", TrainerRef.command([PY, str(path)]),
                           log_dir=str(tmp_path / "logs"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_command(request, log_limit=1_000_000)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.ok and result.metrics["result"] == 1.5
    log = Path(result.logs["stdout"])
    assert log.stat().st_size < 1_100_000
    text = log.read_text()
    assert "bytes of output left out here" in text and text.rstrip().endswith("FoM: 1.5")
    assert grown_kib < 100_000, f"memory grew by {grown_kib} KiB"


ARGV_AND_ENV = (
    "import json, os, sys\n"
    "keys = ['WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'NESTOR_HOSTS', 'NESTOR_NP',\n"
    "        'PET_NPROC_PER_NODE', 'PET_NNODES', 'NESTOR_GANG_HOSTS', 'HOROVOD_RANK',\n"
    "        'NODE_RANK', 'PET_NODE_RANK', 'NESTOR_GANG_NODES']\n"
    "print(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in keys}}))\n"
    "print('FoM: 1')\n"
)


def _argv_and_env(result: object) -> dict:
    import json

    return json.loads(Path(result.logs["stdout"]).read_text().splitlines()[0])


def test_placeholder_values_reach_the_program_literally(tmp_path):
    # A log directory whose path has spaces, quotes and a shell expansion: the
    # hostfile's path must arrive as one word, unexpanded, and nothing may run.
    odd = tmp_path / "it's a \"run\" $(touch pwned) dir"
    odd.mkdir()
    script = tmp_path / "show.py"
    script.write_text(ARGV_AND_ENV)
    request = TrialRequest(
        "cmd", TrainerRef.command([PY, str(script), "{hostfile}", "-np={np}", "{{np}}",
                                   '{"json": {np}}']),
        config={"lr": "{np}"}, data_parallel=2, model_parallel=2, log_dir=str(odd / "logs"))
    result = run_trial(request)
    assert result.ok, result.reason
    seen = _argv_and_env(result)
    hostfile = odd / "logs" / "hostfile"
    assert seen["argv"] == [str(hostfile), "-np=4", "{np}", '{"json": 4}', "--lr={np}"]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    host, slots = hostfile.read_text().split()
    assert slots == "slots=4" and host
    env = seen["env"]
    assert env["WORLD_SIZE"] == "4" and env["NESTOR_NP"] == "4"
    assert env["NESTOR_HOSTS"] == f"{host}:4" and env["PET_NPROC_PER_NODE"] == "4"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0


def test_a_gangs_layout_fills_the_placeholders_and_stays_out_of_the_env(tmp_path, monkeypatch):
    monkeypatch.setenv("NESTOR_GANG_HOSTS", "node-a:2,node-b:2")
    monkeypatch.setenv("NESTOR_GANG_ADDR", "10.0.0.7")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    script = tmp_path / "show.py"
    script.write_text(ARGV_AND_ENV)
    request = TrialRequest(
        "cmd", TrainerRef.command([PY, str(script), "{hosts}", "{nnodes}", "{nproc_per_node}",
                                   "{master_addr}"]),
        data_parallel=4, log_dir=str(tmp_path / "logs"))
    result = run_trial(request)
    assert result.ok, result.reason
    seen = _argv_and_env(result)
    assert seen["argv"] == ["node-a:2,node-b:2", "2", "2", "10.0.0.7"]
    assert (tmp_path / "logs" / "hostfile").read_text() == "node-a slots=2\nnode-b slots=2\n"
    env = seen["env"]
    assert env["MASTER_ADDR"] == "10.0.0.7" and env["PET_NNODES"] == "2"
    # the gang's own variables are not the launcher's
    assert env["NESTOR_GANG_HOSTS"] is None and env["HOROVOD_RANK"] is None


def test_nproc_per_node_on_uneven_nodes_fails_the_trial_saying_why(tmp_path, monkeypatch):
    monkeypatch.setenv("NESTOR_GANG_HOSTS", "node-a:3,node-b:1")
    request = TrialRequest("cmd", TrainerRef.command([PY, "-c", "print('FoM: 1')",
                                                      "{nproc_per_node}"]), data_parallel=4)
    result = run_trial(request)
    assert result.status == "failed"
    assert result.reason.startswith("{nproc_per_node} needs the same number of ranks on every"
                                    " node, but the ranks are node-a:3,node-b:1")


def test_an_unknown_placeholder_fails_the_trial_naming_it(tmp_path):
    marker = tmp_path / "ran"
    request = TrialRequest("cmd", TrainerRef.command(
        [PY, "-c", f"open({str(marker)!r}, 'w')", "{nprocs}"]))
    result = run_trial(request)
    assert result.status == "failed" and not marker.exists()
    assert result.reason.startswith("the command names an unknown placeholder {nprocs}")


PER_NODE = ["--nnodes={nnodes}", "--node_rank={node_rank}", "--nproc_per_node={nproc_per_node}",
            "--master_addr={master_addr}", "--master_port={master_port}", "{np}"]


def _per_node(tmp_path: Path, monkeypatch, rank: int, nodes: str, script: str = ARGV_AND_ENV,
              port: int = 29123) -> tuple[object, list[tuple]]:
    """Gang rank ``rank`` of a per-node command, its ranks on ``nodes``; the port
    rank 0's node would publish through Ray is ``port``."""
    import nestor.trainers.command

    shared: list[tuple] = []

    def share_port(launch, node, picked, timeout_s):
        shared.append((node.rank, node.count, timeout_s))
        return port if node.rank else picked

    monkeypatch.setattr(nestor.trainers.command, "share_port", share_port)
    monkeypatch.setenv("NESTOR_GANG_HOSTS", "node-a:2,node-b:2")
    monkeypatch.setenv("NESTOR_GANG_ADDR", "10.0.0.7")
    monkeypatch.setenv("NESTOR_GANG_NODES", nodes)
    monkeypatch.setenv("HOROVOD_RANK", str(rank))
    path = tmp_path / "show.py"
    path.write_text(script)
    request = TrialRequest("cmd", TrainerRef.command([PY, str(path), *PER_NODE]),
                           data_parallel=4, log_dir=str(tmp_path / "logs"), timeout=30,
                           result_path=str(tmp_path / "result.json"))
    return run_trial(request), shared


def test_a_per_node_command_runs_on_each_nodes_first_rank_with_its_node_rank(tmp_path,
                                                                            monkeypatch):
    # rank 2 is the first of node 1 (ranks 0 and 1 are on node 0)
    result, shared = _per_node(tmp_path, monkeypatch, 2, "0,0,1,1")
    assert result.ok, result.reason
    seen = _argv_and_env(result)
    assert seen["argv"] == ["--nnodes=2", "--node_rank=1", "--nproc_per_node=2",
                            "--master_addr=10.0.0.7", "--master_port=29123", "4"]
    env = seen["env"]
    assert env["NODE_RANK"] == "1" and env["PET_NODE_RANK"] == "1" and env["PET_NNODES"] == "2"
    assert env["MASTER_PORT"] == "29123" and env["WORLD_SIZE"] == "4"
    assert env["NESTOR_GANG_NODES"] is None and env["HOROVOD_RANK"] is None
    assert shared == [(1, 2, 30)]  # it waited for rank 0's node's port, within the timeout
    # node 1 logs beside rank 0's; its result is not the trial's (no FoM needed) and
    # only rank 0 writes the trial's result file
    assert Path(result.logs["stdout"]) == tmp_path / "logs" / "node1" / "stdout.log"
    assert not (tmp_path / "result.json").exists()


def test_a_per_node_commands_node_0_is_rank_0_and_publishes_its_port(tmp_path, monkeypatch):
    result, shared = _per_node(tmp_path, monkeypatch, 0, "0,1,0,1")
    assert result.ok and result.metrics["result"] == 1.0, result.reason
    seen = _argv_and_env(result)
    assert seen["argv"][:3] == ["--nnodes=2", "--node_rank=0", "--nproc_per_node=2"]
    assert seen["argv"][4] == f"--master_port={seen['env']['MASTER_PORT']}"
    assert shared == [(0, 2, 30)]
    assert Path(result.logs["stdout"]) == tmp_path / "logs" / "stdout.log"
    assert (tmp_path / "result.json").exists()


@pytest.mark.parametrize(("rank", "nodes"), [(1, "0,0,1,1"), (3, "0,0,1,1"), (2, "0,1,0,1")])
def test_a_per_node_commands_other_ranks_only_hold_their_slots(tmp_path, monkeypatch, rank,
                                                               nodes):
    marker = tmp_path / "ran"
    result, shared = _per_node(tmp_path, monkeypatch, rank, nodes,
                               script=f"open({str(marker)!r}, 'w')\n")
    assert result.ok and result.metrics == {} and not marker.exists() and not shared


def test_a_per_node_command_failing_on_another_node_fails_saying_which(tmp_path, monkeypatch):
    result, _ = _per_node(tmp_path, monkeypatch, 1, "0,1,1,1",
                          script="import sys\nprint('bad node')\nsys.exit(3)\n")
    assert result.status == "failed"
    assert result.reason.startswith("node 1: command exited with status 3"), result.reason


def test_a_per_node_command_outside_a_gang_is_node_0_of_1(tmp_path):
    path = tmp_path / "show.py"
    path.write_text(ARGV_AND_ENV)
    request = TrialRequest("cmd", TrainerRef.command([PY, str(path), *PER_NODE]),
                           data_parallel=2, log_dir=str(tmp_path / "logs"))
    result = run_trial(request)
    assert result.ok and result.metrics["result"] == 1.0, result.reason
    argv = _argv_and_env(result)["argv"]
    assert argv[:4] == ["--nnodes=1", "--node_rank=0", "--nproc_per_node=2",
                        "--master_addr=127.0.0.1"]


def test_the_other_ranks_of_a_command_gang_only_hold_their_slots(tmp_path, monkeypatch):
    # The launcher in rank 0 starts every rank; a second launcher would start them twice.
    marker = tmp_path / "ran"
    monkeypatch.setenv("HOROVOD_RANK", "1")
    request = TrialRequest("cmd", TrainerRef.command(
        [PY, "-c", f"open({str(marker)!r}, 'w'); print('FoM: 1')"]), data_parallel=2,
        result_path=str(tmp_path / "result.json"))
    result = run_trial(request)
    assert result.ok and not marker.exists() and not (tmp_path / "result.json").exists()


def test_a_short_command_ends_its_trial_when_it_exits_not_at_the_next_poll(tmp_path,
                                                                         monkeypatch):
    # A cheap evaluation (a command of a few ms, still running at the first look) must
    # not hold its slot until the next look at the process: 100 ms apart, those looks
    # were most of a trivial trial's time end to end. With them 30 s apart, a 0.2 s
    # command's trial still ends when it does.
    result, seconds = _run_with_rare_looks(tmp_path, monkeypatch, "sleep 0.2; echo FoM: 0.5")
    assert result.ok and result.metrics["result"] == 0.5, result.reason
    assert seconds < 20.0


def _run_with_rare_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         script: str) -> tuple[object, float]:
    """A ``/bin/sh -c script`` trial with the rank's looks at its command (POLL) 30 s
    apart, and the seconds it took: a trial that ends with its command ends well
    before the first look."""
    from nestor.trainers import command

    monkeypatch.setattr(command, "POLL", 30.0)
    request = TrialRequest("sh", TrainerRef.command(["/bin/sh", "-c", script]), config={},
                           log_dir=str(tmp_path / "logs"))
    began = time.perf_counter()
    result = run_trial(request)
    return result, time.perf_counter() - began


def test_one_warden_serves_every_command_trial_of_a_process(tmp_path):
    """A rank keeps one warden (trainers/warden.py) for all its command trials, not a
    ``/bin/sh`` started and waited for per trial; it watches each command's group
    only while the command runs (tests/security/test_rank_death.py kills a real
    rank to see the group go)."""
    from nestor.trainers import warden

    first = _run(tmp_path, ECHO)
    keeper = warden._KEEPER.process
    assert first.ok and keeper is not None and keeper.poll() is None
    for _ in range(3):
        assert _run(tmp_path, ECHO).ok
    assert warden._KEEPER.process is keeper and keeper.poll() is None


def test_the_warden_kills_the_groups_still_watched_when_its_process_dies(tmp_path):
    """The warden's script itself: a group named with ``watch`` and not ``done`` is
    killed at the end of its input (its process gone); a group released is not,
    nor a group whose number merely contains another's."""
    import os
    import subprocess

    from nestor.trainers.warden import WARDEN_SCRIPT

    sleepers = [subprocess.Popen([PY, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True) for _ in range(3)]
    kept, released, other = sleepers
    try:
        shell = subprocess.Popen(["/bin/sh", "-c", WARDEN_SCRIPT], stdin=subprocess.PIPE,
                                 start_new_session=True)
        shell.communicate(f"watch {kept.pid}\nwatch {released.pid}\ndone {released.pid}\n"
                          f"done {other.pid}\n".encode(), timeout=10)
        assert kept.wait(timeout=10) == -9
        time.sleep(0.2)
        assert released.poll() is None and other.poll() is None
    finally:
        for sleeper in sleepers:
            if sleeper.poll() is None:
                os.killpg(sleeper.pid, 9)
                sleeper.wait()


def test_a_command_that_closes_its_pipes_is_waited_for_until_it_exits(tmp_path, monkeypatch):
    """Once its pipes are closed the command's exit itself is waited on (its pidfd on
    Linux, which wakes at the exit): with the looks 30 s apart, a command that closes
    its output and exits 0.3 s later still ends its trial then, with its status."""
    result, seconds = _run_with_rare_looks(
        tmp_path, monkeypatch, "echo FoM: 0.5; exec >&- 2>&-; sleep 0.3; exit 3")
    assert result.status == "failed" and "exited with status 3" in result.reason
    assert seconds < 20.0
