"""Command trainers: any program, run once per trial, as Urika's HPO and CANDLE run them.

The trial's settings and hyperparameters become ``--name=value`` arguments
(prefix configurable; a name that already starts with ``-`` gets none, so
``-a`` becomes ``-a=0.5``). The program runs as an argument vector, never
through a shell, so a value such as ``$(touch /tmp/x)`` arrives literally.
Its result is the last output line matching the result pattern (default
``FoM: (\\S+)``; stdout is searched first, then stderr); every matching line
is also reported as a per-step metric, so ASHA can prune a command trainer
that prints its figure each epoch.

Output is streamed, never held whole: each stream's first half of
``log_limit`` bytes goes to ``<log_dir>/stdout.log`` (or ``stderr.log``) as
it comes, the last half is kept in a bounded buffer, and anything between is
replaced by a note saying how many bytes were left out. A program printing
gigabytes costs at most ``log_limit`` bytes of memory and disk per stream.

The program gets the environment of the caller without Horovod's variables
(its ranks are its own business) plus ``NESTOR_TRIAL_ID``,
``NESTOR_CHECKPOINT_DIR`` (a folder that exists: files the command leaves there
are the trial's checkpoint), ``NESTOR_CONTINUE_FROM`` (the checkpoint folder of
the trial it carries on from, or empty), ``NESTOR_INIT_FROM`` (folders to start
from, joined by ``os.pathsep``, or empty), ``NESTOR_DATA_SPLIT`` (``train`` or
``train+val``), ``NESTOR_DATA_PARALLEL``, ``NESTOR_MODEL_PARALLEL``
(trainers.outputs says what the folders hold) and ``NESTOR_ARTIFACT_DIR`` (a
folder that exists: the files in it when the command ends are artifacts of the
trial's MLflow run). Lines it prints on stdout as ``nestor.metric NAME=VALUE ...
[step=N]`` and ``nestor.tag KEY=VALUE`` log metrics and tags into that run
(trainers.logged). A one-rank command also gets ``LOCAL_RANK=0`` and a
``CUDA_VISIBLE_DEVICES`` naming only its own GPU (:func:`own_device_env`); the
trial records that GPU as ``device_gpu`` and ``device_index``, as every trainer
kind does (:func:`command_device`).

A trial of several ranks runs the command once, in its gang's rank 0, as a
launcher that starts the ranks itself (``horovodrun``, ``torchrun``,
``srun``): its argv placeholders (``{np}``, ``{hosts}``, ``{hostfile}``,
``{master_addr}``, ``{master_port}``, ``{nnodes}``, ``{nproc_per_node}``) and
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``NESTOR_HOSTS``,
``NESTOR_NP`` and torchrun's ``PET_*`` say where the gang's slots are
(:mod:`trainers.launch`). A command that names ``{node_rank}`` runs instead
once per node, on each node's first rank (:func:`run_command_rank`), with
``NODE_RANK`` and ``PET_NODE_RANK`` set too; the logs of node k > 0 go to
``<log_dir>/node<k>/``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import re
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from nestor.trainers._types import (
    Heartbeat,
    Report,
    ResultStatus,
    ShouldStop,
    TrialRequest,
    TrialResult,
)
from nestor.trainers.gpu import gpu_granted, gpu_metrics
from nestor.trainers.history import BoundedHistory
from nestor.trainers.launch import (
    PLACEHOLDERS,
    Layout,
    Node,
    fill,
    format_hosts,
    next_launch,
    per_node,
    share_port,
)
from nestor.trainers.logged import ARTIFACTS_ENV, Logged, prepare_artifacts
from nestor.trainers.outputs import left_checkpoint, prepare_folder
from nestor.trainers.warden import Warden

LOG_LIMIT = 8 * 1024 * 1024
MAX_LINE = 64 * 1024
CHUNK = 64 * 1024
KILL_GRACE = 5.0
POLL = 0.1


def format_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(format_value(v) for v in value)
    return str(value)


def build_argv(base: tuple[str, ...] | list[str], params: Mapping[str, Any],
               prefix: str = "--") -> list[str]:
    """The command's argument vector: ``base`` then one ``flag=value`` per parameter.

    >>> build_argv(["fit"], {"lr": 0.5, "-a": 1})
    ['fit', '--lr=0.5', '-a=1']
    """
    argv = list(base)
    for name, value in params.items():
        flag = name if name.startswith("-") else f"{prefix}{name}"
        argv.append(f"{flag}={format_value(value)}")
    return argv


class _Stream:
    """One pipe's output, as :class:`_Pump` reads it: keeps a bounded log and scans
    lines for results."""

    def __init__(self, pipe: BinaryIO, log_path: Path | None, limit: int, pattern: re.Pattern[str],
                 on_result: Any, on_line: Any = None) -> None:
        self.pipe, self.pattern, self.on_result = pipe, pattern, on_result
        self.on_line = on_line  # every line (stdout's: nestor.metric and nestor.tag lines)
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.log = open(log_path, "wb") if log_path is not None else None  # noqa: SIM115
        self.log_path = log_path
        self.head_written = 0
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = 0
        self.total = 0
        self.partial = bytearray()
        self.last_lines: collections.deque[str] = collections.deque(maxlen=5)
        self.last_match: tuple[str, str] | None = None

    def feed(self, chunk: bytes) -> None:
        """What the pipe gave: logged (bounded) and scanned, line by line."""
        self.total += len(chunk)
        self._keep(chunk)
        self._scan(chunk)

    def ended(self) -> None:
        """The pipe is at its end: a last line without its newline counts too."""
        if self.partial:
            self._line(bytes(self.partial))
            self.partial.clear()

    def _keep(self, chunk: bytes) -> None:
        room = self.head_limit - self.head_written
        if room > 0:
            head, chunk = chunk[:room], chunk[room:]
            if self.log is not None:
                self.log.write(head)
            self.head_written += len(head)
        if chunk:
            self.tail.append(chunk)
            self.tail_size += len(chunk)
            while self.tail_size - len(self.tail[0]) >= self.tail_limit:
                self.tail_size -= len(self.tail.popleft())
            if self.tail_size > self.tail_limit:  # trim the oldest chunk's front
                excess = self.tail_size - self.tail_limit
                self.tail[0] = self.tail[0][excess:]
                self.tail_size -= excess

    def _scan(self, chunk: bytes) -> None:
        # Lines longer than MAX_LINE are cut: no sensible result line is that long,
        # and a program printing one huge line must not grow memory.
        pieces = chunk.split(b"\n")
        for i, piece in enumerate(pieces):
            room = MAX_LINE - len(self.partial)
            if room > 0:
                self.partial += piece[:room]
            if i < len(pieces) - 1:
                self._line(bytes(self.partial))
                self.partial.clear()

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if text.strip():
            self.last_lines.append(text[:500])
        match = self.pattern.search(text)
        if match:
            self.last_match = (match.group(1), text[:500])
            self.on_result(match.group(1))
        if self.on_line is not None:
            self.on_line(text)

    def finish(self) -> None:
        """The log completed: what was left out of its middle said, its tail written."""
        if self.log is not None:
            omitted = self.total - self.head_written - self.tail_size
            if omitted > 0:
                self.log.write(f"\n[nestor: {omitted} bytes of output left out here; the log keeps"
                               f" the first and last {self.head_limit} bytes]\n".encode())
            for chunk in self.tail:
                self.log.write(chunk)
            self.log.close()


class _Pump:
    """A command's pipes read in the calling thread, whichever has output, while it
    waits for the command: no reader thread per pipe, whose two starts (and the
    switches between three threads) cost a trivial command trial about a millisecond
    in its rank."""

    def __init__(self, streams: Mapping[str, _Stream]) -> None:
        self.selector = selectors.DefaultSelector()
        for stream in streams.values():
            os.set_blocking(stream.pipe.fileno(), False)
            self.selector.register(stream.pipe, selectors.EVENT_READ, stream)

    @property
    def open(self) -> bool:
        """Some pipe has not reached its end yet."""
        return bool(self.selector.get_map())

    def read(self, timeout: float) -> None:
        """Read what the pipes have, waiting up to ``timeout`` for some output (or
        their ends); returns once something came or the time is up."""
        for key, _mask in self.selector.select(timeout):
            stream: _Stream = key.data
            try:
                chunk = os.read(stream.pipe.fileno(), CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                stream.feed(chunk)
            else:
                self.selector.unregister(stream.pipe)
                stream.ended()

    def drain(self, timeout: float) -> None:
        """Read the pipes to their ends, for up to ``timeout`` (the command's group is
        gone by then: only output already written is left)."""
        deadline = time.monotonic() + timeout
        while self.open and (left := deadline - time.monotonic()) > 0:
            self.read(left)
        for key in list(self.selector.get_map().values()):  # still open: given up on
            self.selector.unregister(key.fileobj)
            key.data.ended()
        self.selector.close()


class _Exit:
    """Waiting for a command's exit once its pipes are closed: on its pidfd (Linux 5.3
    and newer), which wakes at the exit itself, where Popen's own timed wait looks,
    sleeps half a millisecond, looks again, then 1, 2 ... ms: about a millisecond a
    trivial trial lost in the window between its pipes' end and its exit."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        try:
            self.fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux, or an older kernel
            self.fd = None

    def wait(self, timeout: float) -> None:
        """Up to ``timeout`` for the exit (poll() then reaps it)."""
        if self.fd is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
            return
        with selectors.DefaultSelector() as waiting:
            waiting.register(self.fd, selectors.EVENT_READ)
            waiting.select(max(timeout, 0.0))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End the command and anything it started in its session: TERM, a grace, then KILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# Exit statuses a rerun of the same argv gets again: a usage error (argparse, getopt and
# Python's own "can't open file" exit 2), a program found but not executable (126), a
# program not found (127, from a shell or env).
REPEATING_STATUSES = {2: "a usage error", 126: "not executable", 127: "not found"}
# The last line of a Python traceback whose error a rerun meets again.
REPEATING_ERROR = re.compile(
    r"^(ModuleNotFoundError|ImportError|SyntaxError|IndentationError|TabError"
    r"|FileNotFoundError)\b")


def exit_repeats(returncode: int, last_stderr: str) -> bool:
    """Would the command fail the same way when run again? For an exit status that
    says the command line or the program is wrong, or a Python script that died of an
    import, syntax or missing-file error; a signal or any other status may pass.

    >>> exit_repeats(2, "usage: fit.py [-h] --lr LR"), exit_repeats(1, "RuntimeError: CUDA")
    (True, False)
    >>> exit_repeats(1, "ModuleNotFoundError: No module named 'sklearn'")
    True
    """
    return returncode in REPEATING_STATUSES or bool(REPEATING_ERROR.match(last_stderr))


# A result as a program prints it: ASCII digits, a point, an exponent. Python's float()
# reads more ("1_000", digits of other scripts, "inf"), which no program means as a result.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _parse(value: str) -> float | str:
    """The number, or a message saying why it is not one."""
    try:
        number = float(value)
    except ValueError:
        return "is not a number"
    if not math.isfinite(number):
        return "is not finite"
    if _NUMBER.fullmatch(value) is None:
        return "is not a plain number (digits, a point, an exponent: no '_' or other digits)"
    return number


# How long another node's first rank waits for rank 0's node to publish the master
# port of a per-node launch, when the trial has no timeout of its own.
PORT_WAIT_S = 600.0


def run_command_rank(request: TrialRequest, rank: int, report: Report | None = None,
                     should_stop: ShouldStop | None = None,
                     heartbeat: Heartbeat | None = None) -> TrialResult:
    """Gang rank ``rank``'s part of a command trial (every rank calls it, as
    :func:`trainers.run_trial` does).

    A launcher runs in rank 0 only; the other ranks hold their slots and return
    at once. A command naming ``{node_rank}`` runs on the first rank of every
    node: rank 0's result is the trial's, another node's is ok when its command
    exits 0 (its failure fails the trial)."""
    launch = next_launch()  # counted in every rank, so the gang's ranks agree on it
    np = request.data_parallel * request.model_parallel
    if not per_node(request.trainer.argv or ()):
        if rank == 0:
            return run_command(request, report, should_stop, heartbeat)
        return TrialResult(trial_id=request.trial_id, status=ResultStatus.OK)
    try:
        node = Node.here(rank, np)
    except ValueError as exc:
        return _failed_early(request, str(exc), time.perf_counter())
    if not node.leader:  # the command on this node's first rank starts this one
        return TrialResult(trial_id=request.trial_id, status=ResultStatus.OK)
    return run_command(request, report if rank == 0 else None, should_stop, heartbeat,
                       node=node, launch=launch)


def run_command(request: TrialRequest, report: Report | None = None,
                should_stop: ShouldStop | None = None, heartbeat: Heartbeat | None = None, *,
                log_limit: int = LOG_LIMIT, node: Node | None = None,
                launch: int = 0) -> TrialResult:
    """Run a command trainer once and read its result; never raises for the command's faults.

    With ``node`` (a per-node launch), on that node: node 0's run is the
    trial's and reads its result; another node's only has to exit 0, and logs
    to ``<log_dir>/node<k>/``."""
    started = time.perf_counter()
    trainer = request.trainer
    params = {**request.settings, **request.config}
    pattern = re.compile(trainer.result_pattern)
    log_dir = Path(request.log_dir) if request.log_dir else None
    if log_dir is not None and node is not None and node.rank > 0:
        log_dir = log_dir / f"node{node.rank}"
    with contextlib.ExitStack() as cleanup:
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            files = log_dir
        else:  # the hostfile needs a home for the command's life
            files = Path(cleanup.enter_context(tempfile.TemporaryDirectory(
                prefix="nestor-command-")))
        try:
            layout = Layout.here(request.data_parallel * request.model_parallel)
            if node is not None:
                port = layout.master_port
                if node.count > 1:
                    port = share_port(launch, node, port, request.timeout or PORT_WAIT_S)
                layout = dataclasses.replace(layout, master_port=port, node=node)
        except (ValueError, TimeoutError) as exc:
            return _failed_early(request, _on_node(node, str(exc)), started)
        hostfile = files / "hostfile"
        hostfile.write_text(layout.hostfile_text())
        try:
            base = fill(trainer.argv or (), layout.values(hostfile))
        except KeyError as exc:
            return _failed_early(request, _placeholder_problem(exc.args[0], layout), started)
        argv = build_argv(base, params, trainer.flag_prefix)
        if log_dir is not None:
            (log_dir / "command.txt").write_text("\n".join(argv) + "\n")
        result = _run(request, argv, pattern, log_dir, layout.env(hostfile), started, report,
                      should_stop, heartbeat, log_limit,
                      need_result=node is None or node.rank == 0)
        if not result.ok and node is not None and node.rank > 0:
            result.reason = _on_node(node, result.reason or "")
        return result


def own_device_env(environ: Mapping[str, str], ranks: int) -> dict[str, str]:
    """A one-rank command is a rank itself: ``LOCAL_RANK=0`` and a
    ``CUDA_VISIBLE_DEVICES`` naming only its own GPU (its gang's rank's, the first
    listed), so ``cuda:0`` and ``cuda:$LOCAL_RANK`` are that GPU. A launcher of
    several ranks gets its node's GPUs and no LOCAL_RANK: it starts the ranks and
    tells each its own.

    >>> own_device_env({"CUDA_VISIBLE_DEVICES": "3,5"}, 1)
    {'LOCAL_RANK': '0', 'CUDA_VISIBLE_DEVICES': '3'}
    >>> own_device_env({"CUDA_VISIBLE_DEVICES": "3,5"}, 2)
    {}
    """
    if ranks > 1:
        return {}
    out = {"LOCAL_RANK": "0"}
    visible = _visible(environ)
    if visible:
        out["CUDA_VISIBLE_DEVICES"] = visible[_own_index(environ, ranks, visible)]
    return out


def command_device(environ: Mapping[str, str], ranks: int) -> dict[str, float]:
    """The device metrics of a command trial (trainers.gpu.gpu_metrics), from what its
    gang's rank was granted: the CUDA index a built-in trainer in that rank would
    take (its local rank's GPU among those it sees; a launcher's rank 0 takes the
    first), or the CPU where no GPU was granted or none is visible.

    >>> command_device({"NESTOR_GPU_GRANTED": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    ...                 "NESTOR_GANG_LOCAL_RANK": "3"}, 1)
    {'device_gpu': 1.0, 'device_index': 3.0}
    >>> command_device({"CUDA_VISIBLE_DEVICES": "0"}, 1)
    {'device_gpu': 0.0, 'device_index': -1.0}
    """
    visible = _visible(environ)
    if not gpu_granted(environ) or not visible:
        return gpu_metrics(None)
    return gpu_metrics(_own_index(environ, ranks, visible))


def _visible(environ: Mapping[str, str]) -> list[str]:
    return [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]


def _own_index(environ: Mapping[str, str], ranks: int, visible: list[str]) -> int:
    """Which of the rank's visible GPUs is the command's (``cuda:<local rank>``)."""
    if ranks > 1:  # a launcher: its rank 0 has local rank 0
        return 0
    local = int(environ.get("HOROVOD_LOCAL_RANK") or environ.get("NESTOR_GANG_LOCAL_RANK") or 0)
    return local % len(visible)


def _on_node(node: Node | None, reason: str) -> str:
    """A per-node launch's reason says which node (rank 0's needs no name)."""
    return f"node {node.rank}: {reason}" if node is not None and node.rank > 0 else reason


def _failed_early(request: TrialRequest, reason: str, started: float) -> TrialResult:
    return TrialResult(trial_id=request.trial_id, status=ResultStatus.FAILED, reason=reason,
                       metrics={"wall_time": time.perf_counter() - started})


def _placeholder_problem(name: str, layout: Layout) -> str:
    """Why a placeholder of the command has no value, as a trial's reason."""
    if name == "nproc_per_node":
        return ("{nproc_per_node} needs the same number of ranks on every node, but the"
                f" ranks are {format_hosts(layout.hosts)}; use {{hosts}} or {{hostfile}}")
    return (f"the command names an unknown placeholder {{{name}}}"
            f" (allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")


def _run(request: TrialRequest, argv: list[str], pattern: re.Pattern[str],
         log_dir: Path | None, launch_env: dict[str, str], started: float,
         report: Report | None, should_stop: ShouldStop | None, heartbeat: Heartbeat | None,
         log_limit: int, *, need_result: bool = True) -> TrialResult:
    """Start ``argv`` and follow it to its end (see :func:`run_command`).

    ``need_result=False``: an exit status of 0 is success; no result line is read."""
    trainer = request.trainer
    # Horovod's variables are the gang's, not the command's (its ranks are its own);
    # the gang's layout reaches it as the launch variables.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "NESTOR_GANG_"))}
    env.update(launch_env)
    env.update({
        "NESTOR_TRIAL_ID": request.trial_id,
        "NESTOR_CHECKPOINT_DIR": request.checkpoint_dir or "",
        # several checkpoints (to average) are joined like PATH entries
        "NESTOR_INIT_FROM": os.pathsep.join([request.init_from]
                                            if isinstance(request.init_from, str)
                                            else request.init_from or ()),
        "NESTOR_CONTINUE_FROM": request.continue_from or "",
        "NESTOR_DATA_SPLIT": request.data_split,
        "NESTOR_DATA_PARALLEL": str(request.data_parallel),
        "NESTOR_MODEL_PARALLEL": str(request.model_parallel),
        ARTIFACTS_ENV: request.artifact_dir or "",
    })
    ranks = request.data_parallel * request.model_parallel
    env.update(own_device_env(os.environ, ranks))
    device = command_device(os.environ, ranks)
    history = BoundedHistory()  # a million result lines cost MAX_HISTORY rows
    unreported: list[dict[str, float]] = []  # kept rows the pruner has not heard of
    lock = threading.Lock()
    logged = Logged()  # its nestor.metric and nestor.tag lines, bounded

    def on_line(text: str) -> None:  # as the pump reads stdout
        if "nestor." in text:
            with lock:
                logged.line(text)

    def record() -> dict[str, Any]:
        with lock:
            return logged.record(request.artifact_dir)

    def failed(reason: str, **extra: Any) -> TrialResult:
        return TrialResult(trial_id=request.trial_id, status=ResultStatus.FAILED, reason=reason,
                           metrics={**device, "wall_time": time.perf_counter() - started},
                           history=history, logged=record(), **extra)

    prepare_folder(request.checkpoint_dir)
    prepare_artifacts(request.artifact_dir)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=request.workdir, env=env, start_new_session=True,
        )
    except FileNotFoundError:
        return failed(f"command not found: {argv[0]!r}", repeats=True)
    except PermissionError:
        return failed(f"command is not executable: {argv[0]!r}", repeats=True)
    except OSError as exc:
        return failed(f"command {argv[0]!r} could not start: {exc}")
    warden = Warden(proc.pid)  # the group dies with this rank, whatever kills it

    def on_result(text: str) -> None:  # as the pump reads stdout
        number = _parse(text)
        if isinstance(number, float):
            with lock:
                row = {"step": float(history.seen + 1), trainer.result_metric: number}
                if history.append(row) and report is not None:
                    unreported.append(row)

    def flush_reports() -> None:
        # report() is called from this (the caller's) thread only, in order.
        with lock:
            new = unreported[:]
            unreported.clear()
        if report is not None:
            for row in new:
                report({trainer.result_metric: row[trainer.result_metric]}, int(row["step"]))

    streams = {
        name: _Stream(pipe, log_dir / f"{name}.log" if log_dir else None, log_limit, pattern,
                      on_result if name == "stdout" else (lambda _text: None),
                      on_line if name == "stdout" else None)
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))
    }
    pump = _Pump(streams)
    exit_ = _Exit(proc)
    ended_by: str | None = None
    output = 0
    checked = -math.inf  # when the reports, the beat, the timeout and the stop were
    try:
        while proc.poll() is None:
            if time.monotonic() - checked >= POLL:  # a chatty command: once a POLL
                checked = time.monotonic()
                flush_reports()
                if heartbeat is not None and \
                        streams["stdout"].total + streams["stderr"].total > output:
                    output = streams["stdout"].total + streams["stderr"].total
                    heartbeat()  # a command makes progress as it writes output
                if request.timeout is not None and \
                        time.perf_counter() - started > request.timeout:
                    ended_by = "timeout"
                    break
                if should_stop is not None and should_stop():
                    ended_by = "stop"
                    break
            # Back as soon as it exits, not a whole POLL later: a short command (a
            # cheap evaluation) would otherwise cost its slot up to POLL each trial.
            # Its pipes' ends come with its exit; once they are closed (or held by a
            # process it left behind), its exit is waited for itself.
            if pump.open:
                pump.read(POLL - (time.monotonic() - checked))
            else:
                exit_.wait(POLL - (time.monotonic() - checked))
    finally:
        exit_.close()
        if proc.poll() is None or ended_by is not None:
            _kill_group(proc)
        else:
            # The leader exited; end children that still hold the pipes.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        pump.drain(timeout=10.0)
        for stream in streams.values():
            stream.finish()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    returncode = proc.wait()
    warden.release()  # the group is gone: its number may be another's from now on
    flush_reports()
    logs = {name: str(s.log_path) for name, s in streams.items() if s.log_path is not None}
    out, err = streams["stdout"], streams["stderr"]
    where = f" (logs in {log_dir})" if log_dir else ""
    last_err = err.last_lines[-1] if err.last_lines else (
        out.last_lines[-1] if out.last_lines else "")
    tail = f"; last output: {last_err!r}" if last_err else ""
    details = "\n".join([*out.last_lines, "--- stderr ---", *err.last_lines])

    if ended_by == "timeout":
        return failed(f"command timed out after {request.timeout:g} s{where}", logs=logs,
                      details=details)
    if ended_by is None and returncode != 0:
        if returncode < 0:
            try:
                signame = signal.Signals(-returncode).name
            except ValueError:
                signame = f"signal {-returncode}"
            reason = f"command was killed by {signame}{tail}{where}"
        else:
            reason = f"command exited with status {returncode}{tail}{where}"
        last = err.last_lines[-1] if err.last_lines else ""
        return failed(reason, logs=logs, details=details,
                      repeats=returncode > 0 and exit_repeats(returncode, last))
    if not need_result:
        return TrialResult(trial_id=request.trial_id, status=ResultStatus.OK,
                           metrics={"wall_time": time.perf_counter() - started},
                           stopped_early=ended_by == "stop", logs=logs)
    found = out.last_match or err.last_match
    if found is None:
        if ended_by == "stop":
            return failed("stopped before the command printed a result", logs=logs,
                          details=details, stopped_early=True)
        return failed(f"command printed no line matching '{trainer.result_pattern}'{tail}{where}",
                      logs=logs, details=details, repeats=True)
    value, line = found
    number = _parse(value)
    if isinstance(number, str):
        return failed(f"the result {value!r} in the line {line!r} {number}", logs=logs,
                      details=details, repeats=number == "is not a number")
    metrics = {**device, trainer.result_metric: number,
               "wall_time": time.perf_counter() - started}
    return TrialResult(trial_id=request.trial_id, status=ResultStatus.OK, metrics=metrics,
                       history=history, stopped_early=ended_by == "stop", logs=logs,
                       checkpoint=left_checkpoint(request.checkpoint_dir), logged=record())
