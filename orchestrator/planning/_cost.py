"""The cost model: time and memory of a training step at any dp x mp, from a profile.

A step of a rank with per-rank batch ``b`` in a trial of ``dp`` x ``mp`` ranks::

    T = compute(b, mp, busy) + gathers(b, mp) + allreduce(dp, gradient bytes(mp))
    compute = (c0 + c0_split / mp + b * (c_rep + c_split / mp)) * (1 + k * (busy - 1))

``compute`` is fitted to the measured compute times (least squares, non-
negative); the split terms are what model parallelism divides, and ``k`` is
the slowdown per other rank computing on the same node (``busy``: this
trial's ranks and those of trials running beside it, up to the node's
cores), found by a grid search around the linear fit. Collectives
follow the alpha-beta-gamma model (Thakur, Rabenseifner & Gropp 2005; Ben-Nun
& Hoefler 2019, sec. 5): a message step costs alpha (latency), each byte
sent beta, each byte reduced gamma. For ``P`` ranks and ``n`` bytes:

====================  ===============  =====================  ================
algorithm             alpha x          beta x                 gamma x
====================  ===============  =====================  ================
ring allreduce        2 (P-1)          2 n (P-1) / P          n (P-1) / P
tree allreduce        2 ceil(log2 P)   2 n ceil(log2 P)       n ceil(log2 P)
reduce-scatter +      2 ceil(log2 P)   2 n (P-1) / P          n (P-1) / P
allgather (rsag)
ring allgather        P-1              n (P-1) / P            0
====================  ===============  =====================  ================

The issue's ring formula 2 gamma m G (P-1)/P + 2 L (P-1) is the first row
with L = alpha, gamma m = beta per byte of a G-element gradient of m-byte
floats (plus the reduction arithmetic, gamma here). Model parallelism costs,
per split layer and step, one allgather of its output (b x out floats) and,
backward, one allreduce of its input's gradient (b x in floats) over the
``mp`` ranks. alpha, beta and gamma are fitted (least squares) to the
profile's micro-benchmark of allreduce and allgather at several sizes and
to the collectives timed inside its training steps; those also carry a
``skew`` per collective, the wait for the slowest peer, which a
micro-benchmark's ranks (arriving together) do not pay.

Memory per rank: weights, gradients and optimizer state (split layers
divided by mp) plus the activations a sample keeps, times the batch; scaled
up by the largest measured/estimated ratio of the shapes profiled, so the
limit check errs on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._arch import ModelSize
from ._profile import CommSample, Profile, StepSample

ALGORITHMS = ("ring", "tree", "rsag")


def _log2(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def coefficients(kind: str, ranks: int, nbytes: float, algorithm: str = "ring"
                 ) -> tuple[float, float, float]:
    """Multipliers of (alpha, beta, gamma) for one collective: time = a.alpha + b.beta + g.gamma."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, but got {algorithm!r}")
    p = int(ranks)
    if p <= 1 or nbytes <= 0:
        return 0.0, 0.0, 0.0
    share = (p - 1) / p
    if kind == "allreduce":
        if algorithm == "ring":
            return 2.0 * (p - 1), 2.0 * nbytes * share, nbytes * share
        if algorithm == "tree":
            steps = _log2(p)
            return 2.0 * steps, 2.0 * nbytes * steps, nbytes * steps
        return 2.0 * _log2(p), 2.0 * nbytes * share, nbytes * share
    if kind == "allgather":
        if algorithm == "ring":
            return float(p - 1), nbytes * share, 0.0
        return float(_log2(p)), nbytes * share, 0.0
    raise ValueError(f"kind must be one of allreduce, allgather, but got {kind!r}")


@dataclass(frozen=True)
class CommParams:
    """alpha (s per message step), beta (s per byte sent), gamma (s per byte reduced),
    and skew: the wait, per collective inside a training step, for the slowest peer
    to arrive (a micro-benchmark's ranks arrive together; a training step's do not)."""

    alpha: float
    beta: float
    gamma: float
    algorithm: str = "ring"
    skew: float = 0.0

    def time(self, kind: str, ranks: int, nbytes: float, in_step: bool = False) -> float:
        a, b, g = coefficients(kind, ranks, nbytes, self.algorithm)
        wait = self.skew if in_step and a else 0.0
        return a * self.alpha + b * self.beta + g * self.gamma + wait


@dataclass(frozen=True)
class ComputeParams:
    """compute(b, mp) = (c0 + c0_split/mp + b (c_rep + c_split/mp)) (1 + contention (busy-1)),
    in seconds; ``busy``: ranks computing at once on the node (this trial's and
    its neighbours'), which share memory bandwidth, caches and, on a shared
    machine, the cores other users load."""

    c0: float
    c0_split: float
    c_rep: float
    c_split: float
    contention: float = 0.0

    def time(self, batch: float, mp: int, busy: int = 1) -> float:
        alone = self.c0 + self.c0_split / mp + batch * (self.c_rep + self.c_split / mp)
        return alone * (1 + self.contention * max(0, busy - 1))


# An unmeasured machine: one CPU core of about 5 GMAC/s (forward, backward and
# update ~ 3x the forward's multiply-adds), Horovod's 1 ms cycle as latency and
# ~1 GB/s through loopback TCP. Only used until a profile exists, and said so.
PRIOR_SECONDS_PER_MAC = 3 / 5e9
PRIOR_COMM = CommParams(alpha=5e-4, beta=1e-9, gamma=2.5e-10)
PRIOR_STEP_OVERHEAD_S = 1e-3


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    solution, _ = nnls(a, y)
    return solution


def step_collectives(size: ModelSize, dp: int, mp: int, batch: float, fp16: bool = False
                     ) -> tuple[list[tuple[str, int, float]], list[tuple[str, int, float]]]:
    """The collectives of one training step: (model-parallel ones, data-parallel ones),
    each as (kind, ranks, bytes)."""
    gathers: list[tuple[str, int, float]] = []
    if mp > 1:
        for layer in size.split_layers:
            gathers.append(("allgather", mp, batch * layer.out_features * 4))
            if layer.input_needs_grad:
                gathers.append(("allreduce", mp, batch * layer.in_features * 4))
    reduces = [("allreduce", dp, float(size.gradient_bytes(mp, fp16)))] if dp > 1 else []
    return gathers, reduces


def _row(calls: list[tuple[str, int, float]], algorithm: str) -> list[float]:
    a = b = g = 0.0
    for kind, ranks, nbytes in calls:
        ca, cb, cg = coefficients(kind, ranks, nbytes, algorithm)
        a, b, g = a + ca, b + cb, g + cg
    return [a, b, g, float(sum(1 for k, r, n in calls if r > 1 and n > 0))]


def fit_comm(samples: list[CommSample] | tuple[CommSample, ...], algorithm: str = "ring",
             steps: list[StepSample] | tuple[StepSample, ...] = (),
             size: ModelSize | None = None, fp16: bool = False) -> CommParams:
    """Least-squares alpha, beta, gamma and skew (all >= 0) for ``algorithm``'s formulas.

    Rows: each micro-benchmark sample (no skew), and each profiled step's
    measured gathers and gradient allreduce (the sum of that step's
    collectives, plus skew per call). Each row is weighted by 1/seconds, so
    the fit minimises relative errors: a 4 KiB message's latency matters as
    much as an 8 MiB one's bandwidth.
    """
    rows: list[list[float]] = []
    times: list[float] = []
    for s in samples:
        if s.ranks > 1:
            rows.append([*coefficients(s.kind, s.ranks, s.bytes, algorithm), 0.0])
            times.append(s.seconds)
    if size is not None:
        for st in steps:
            gathers, reduces = step_collectives(size, st.dp, st.mp, st.batch, fp16)
            for calls, seconds in ((gathers, st.gather_s), (reduces, st.allreduce_s)):
                if calls and seconds > 0:
                    rows.append(_row(calls, algorithm))
                    times.append(seconds)
    if not rows:
        return CommParams(PRIOR_COMM.alpha, PRIOR_COMM.beta, PRIOR_COMM.gamma, algorithm)
    a = np.array(rows, dtype=float)
    y = np.array(times, dtype=float)
    weight = 1.0 / np.maximum(y, 1e-9)
    alpha, beta, gamma, skew = _nnls(a * weight[:, None], y * weight)
    if not any(r[2] > 0 for r in rows):
        gamma = PRIOR_COMM.gamma  # no allreduce measured: not identifiable
    return CommParams(float(alpha), float(beta), float(gamma), algorithm, float(skew))


CONTENTION_GRID = tuple(i / 50 for i in range(0, 151))  # 0 .. 3 in steps of 0.02


def _fit_alone(samples: list[StepSample] | tuple[StepSample, ...], size: ModelSize,
               times: np.ndarray) -> tuple[ComputeParams, float]:
    """Linear least squares of the compute terms to ``times`` (contention removed);
    returns the parameters and the relative residual."""
    y = times
    weight = 1.0 / np.maximum(y, 1e-9)
    share = size.split_share
    if any(s.mp > 1 for s in samples) and len({(s.mp, s.batch) for s in samples}) >= 4:
        a = np.array([[1.0, 1.0 / s.mp, s.batch, s.batch / s.mp] for s in samples])
        theta = _nnls(a * weight[:, None], y * weight)
        params = ComputeParams(*(float(t) for t in theta))
    elif len({s.batch for s in samples}) >= 2:
        a = np.array([[1.0, s.batch / s.mp * share + s.batch * (1 - share)] for s in samples])
        c0, per_sample = _nnls(a * weight[:, None], y * weight)
        params = ComputeParams(float(c0), 0.0, float(per_sample * (1 - share)),
                               float(per_sample * share))
    else:
        per_sample = float(np.mean([t / s.batch for s, t in zip(samples, y, strict=True)]))
        params = ComputeParams(0.0, 0.0, per_sample * (1 - share), per_sample * share)
    predicted = np.array([params.time(s.batch, s.mp) for s in samples])
    return params, float(np.sum(((predicted - y) * weight) ** 2))


def fit_compute(samples: list[StepSample] | tuple[StepSample, ...], size: ModelSize
                ) -> ComputeParams:
    """Least-squares compute parameters from the measured compute times.

    The terms are linear; the contention factor is found by a grid search
    around them (each candidate divides the times by 1 + k (busy - 1), with
    busy = the profiled shape's ranks, and the best relative residual wins).
    It is identified only when shapes of different sizes were profiled.
    With no model-parallel sample the split terms cannot be told apart: the
    per-sample time is then divided by the split layers' share of the
    arithmetic (from the architecture).
    """
    if not samples:
        macs = size.replicated_macs + size.split_macs
        per_sample = macs * PRIOR_SECONDS_PER_MAC
        return ComputeParams(PRIOR_STEP_OVERHEAD_S, 0.0, per_sample * (1 - size.split_share),
                             per_sample * size.split_share)
    y = np.array([s.compute_s for s in samples], dtype=float)
    busy = np.array([s.dp * s.mp for s in samples], dtype=float)
    grid = CONTENTION_GRID if len(set(busy.tolist())) > 1 else (0.0,)
    best: tuple[float, ComputeParams, float] | None = None
    for k in grid:
        params, residual = _fit_alone(samples, size, y / (1 + k * (busy - 1)))
        if best is None or residual < best[2] - 1e-12:
            best = (k, params, residual)
    assert best is not None
    k, params, _ = best
    return ComputeParams(params.c0, params.c0_split, params.c_rep, params.c_split, float(k))


@dataclass(frozen=True)
class StepTime:
    compute: float
    gather: float
    allreduce: float

    @property
    def total(self) -> float:
        return self.compute + self.gather + self.allreduce


@dataclass(frozen=True)
class CostModel:
    """Predicts a step, an epoch and a rank's memory at any shape."""

    size: ModelSize
    compute: ComputeParams
    comm: CommParams
    train_samples: int
    fp16_allreduce: bool = False
    memory_scale: float = 1.0
    measured: bool = True  # False: the prior, no profile behind it
    cores_per_node: int = 1  # ranks beyond this are on other nodes: no contention with them
    # The collectives' times by (mp, batch) and (dp, mp): a plan at 32,768 slots prices
    # some 200,000 shapes, which share them.
    _memo: dict[tuple[Any, ...], float] = field(default_factory=dict, init=False, repr=False,
                                               compare=False)

    def busy(self, ranks: int) -> int:
        return max(1, min(ranks, self.cores_per_node))

    def step(self, dp: int, mp: int, batch: float, busy: int | None = None) -> StepTime:
        """One step of a rank holding ``batch`` samples in a dp x mp trial, with
        ``busy`` ranks computing on its node (default: the trial's own)."""
        busy = self.busy(dp * mp if busy is None else busy)
        gather = self._memo.get(("gather", mp, batch))
        if gather is None:
            gathers, _ = step_collectives(self.size, 1, mp, batch, self.fp16_allreduce)
            gather = self._memo[("gather", mp, batch)] = sum(
                self.comm.time(k, r, n, in_step=True) for k, r, n in gathers)
        reduce = self._memo.get(("allreduce", dp, mp))
        if reduce is None:  # the gradients' allreduce does not depend on the batch
            _, reduces = step_collectives(self.size, dp, mp, batch, self.fp16_allreduce)
            reduce = self._memo[("allreduce", dp, mp)] = sum(
                self.comm.time(k, r, n, in_step=True) for k, r, n in reduces)
        return StepTime(self.compute.time(batch, mp, busy), gather, reduce)

    def epoch(self, dp: int, mp: int, per_rank_batch: int, busy: int | None = None) -> float:
        """Seconds of one training epoch (no evaluation), cut as trainers/data.py cuts it;
        ``busy``: ranks computing on the node, all trials at once included."""
        busy = self.busy(dp * mp if busy is None else busy)
        key = ("epoch", dp, mp, per_rank_batch, busy)
        seconds = self._memo.get(key)
        if seconds is None:
            full, rest = divmod(self.train_samples, per_rank_batch * dp)
            seconds = full * self.step(dp, mp, per_rank_batch, busy).total
            if rest >= dp:
                seconds += self.step(dp, mp, math.ceil(rest / dp), busy).total
            self._memo[key] = seconds
        return seconds

    def memory(self, mp: int, per_rank_batch: int) -> int:
        """Bytes a rank needs for training (weights, gradients, state, activations)."""
        key = ("memory", mp, per_rank_batch)
        if key not in self._memo:
            raw = self.size.state_bytes(mp) + per_rank_batch * self.size.activation_bytes(mp)
            self._memo[key] = math.ceil(raw * self.memory_scale)
        return int(self._memo[key])

    def parameters(self) -> dict[str, Any]:
        """The fitted numbers, for tables and reports."""
        return {"compute": asdict(self.compute), "comm": asdict(self.comm),
                "memory_scale": self.memory_scale, "measured": self.measured,
                "cores_per_node": self.cores_per_node,
                "train_samples": self.train_samples}


def prior_model(size: ModelSize, train_samples: int, fp16_allreduce: bool = False) -> CostModel:
    """The model before anything was measured (see PRIOR_*)."""
    return CostModel(size, fit_compute([], size), PRIOR_COMM, train_samples, fp16_allreduce,
                     memory_scale=1.0, measured=False)


def calibrate(profile: Profile, size: ModelSize, algorithm: str = "ring") -> CostModel:
    """Fit the cost model to a profile."""
    fp16 = bool(profile.options.get("fp16_allreduce", False))
    compute = fit_compute(profile.steps, size)
    comm = fit_comm(profile.comm, algorithm, profile.steps, size, fp16)
    scale = 1.0
    for s in profile.steps:
        estimate = size.state_bytes(s.mp) + s.batch * size.activation_bytes(s.mp)
        if estimate > 0 and s.peak_memory_bytes > 0:
            scale = max(scale, s.peak_memory_bytes / estimate)
    return CostModel(size, compute, comm, profile.train_samples, fp16, scale, measured=True,
                     cores_per_node=int(profile.machine.get("cores") or 1))


@dataclass(frozen=True)
class Check:
    """One measured step against the model's prediction."""

    dp: int
    mp: int
    batch: int
    measured_s: float
    predicted_s: float
    held_out: bool  # True: predicted by a model fitted without this shape

    @property
    def error(self) -> float:
        """Relative error of the prediction (+: predicted slower than measured)."""
        return (self.predicted_s - self.measured_s) / self.measured_s


def checks(profile: Profile, size: ModelSize, algorithm: str = "ring") -> list[Check]:
    """Each profiled step against the model: leave-one-shape-out where another
    shape is left to fit on, else in-sample (``held_out`` says which). A held-out
    model-parallel shape is predicted from the split layers' share of the
    arithmetic, as any unprofiled mp is.

    The collective micro-benchmark is kept in every fold: it measures the
    network, not a training shape.
    """
    out: list[Check] = []
    full = calibrate(profile, size, algorithm)
    shapes = profile.shapes
    for dp, mp in shapes:
        rest = profile.without(dp, mp)
        held_out = len(shapes) > 1
        model = calibrate(rest, size, algorithm) if held_out else full
        for s in profile.steps:
            if (s.dp, s.mp) == (dp, mp):
                out.append(Check(dp, mp, s.batch, s.step_s, model.step(dp, mp, s.batch).total,
                                 held_out))
    return out
