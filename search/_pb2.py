"""PB2's explore step: a GP bandit picks the explored numbers (Parker-Holder et al., 2020).

Population-based bandits ("Provably efficient online hyperparameter
optimization with population-based bandits", NeurIPS 2020; Ray Tune's
``PB2``) keep PBT's exploit step and replace its random perturbation: the
numbers a member trains with next are the maximum of an upper confidence
bound (UCB) of a Gaussian process that predicts how much the reward will
change over the next interval.

The data are the intervals trained so far, one point per trial that
continued a checkpoint: inputs ``(t, r_before, h)`` (the interval, the reward
the checkpoint had, the hyperparameters scaled to [0, 1], log scale where
the parameter has ``log``) and output the change of reward per budget unit
it trained. The kernel is the paper's time-varying squared exponential,

    k(x, x') = variance * exp(-|(r, h) - (r', h')|^2 / lengthscale) * (1 - epsilon)^(|t - t'| / 2)

so old intervals count less as training moves on (the best learning rate
at epoch 2 is not the best at epoch 20). The new point's context is fixed
and only ``h`` is chosen. Hyperparameters already chosen for the same
interval are added to the data at that context (GP-BUCB, as Ray Tune's
PB2): they shrink the uncertainty where they are, so the members exploring
at once spread out instead of all asking for one point.

What differs from Ray Tune's implementation, and why: the kernel's
settings are fitted by maximizing the marginal likelihood over a fixed grid
(variance profiled out analytically) instead of GPy's gradient optimizer, so
no GPy is needed and the choice is deterministic; the acquisition is
maximized by random candidates refined by shrinking local steps, from a
generator seeded per proposal; and the UCB is mean + 1 x the posterior
standard deviation, where Ray adds sqrt(0.2 + log(0.4 N)) x the variance.
That weight (about 1.9 at 80 points) explored the ends of the range more
than it paid on the toy problems of ``tests/search/test_pb2.py`` (population
8, 12 intervals, 4 at once, 10 seeds): mean distance, in decades of lr, of
the values chosen at exploits from the 3rd interval on from the best lr
(worst seed in brackets), and the best final score (of about 11-12):

    problem                             PBT perturb      PB2, Ray's weight  PB2, weight 1
    best 1e-2 in [1e-4, 1e-1]           0.44 (0.95) 11.4  0.59 (0.83) 11.3  0.40 (0.59) 11.4
    best 1e-2 in [1e-6, 1]              0.96 (2.37) 11.1  1.19 (1.41) 11.3  0.78 (1.15) 11.4
    best drifting 10^-1.5 -> 10^-3      1.05 (1.72)  8.2  1.08 (1.51) 10.2  0.64 (0.94) 10.4

As in Ray Tune, the new point's context is the donor's last interval (its
interval and the reward it started from), which the data cover; the
members already explored for the same interval count as pending.

Pure numpy; the search imports this module only when ``explore="pb2"``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

LENGTHSCALES = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0)
EPSILONS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5)  # Ray Tune's kernel caps epsilon at 0.5
NOISE_RATIOS = (1e-3, 1e-2, 0.1, 0.3, 1.0)  # noise variance / signal variance
WINDOW = 250  # most recent points the GP is fitted on: its cost grows as N^3
JITTER = 1e-8
KAPPA = 1.0  # UCB = mean + KAPPA * standard deviation (see the module docstring)


@dataclass(frozen=True)
class Fit:
    """The chosen kernel settings and what the fit needs to predict."""

    variance: float
    lengthscale: float
    epsilon: float
    noise: float
    log_likelihood: float


def kernel(
    a: np.ndarray, b: np.ndarray, variance: float, lengthscale: float, epsilon: float
) -> np.ndarray:
    """The time-varying squared exponential between rows of ``a`` and ``b``
    (column 0: time; the rest: reward before and hyperparameters)."""
    time = np.abs(a[:, :1] - b[:, :1].T)
    squared = ((a[:, None, 1:] - b[None, :, 1:]) ** 2).sum(axis=-1)
    return variance * np.exp(-squared / lengthscale) * (1.0 - epsilon) ** (0.5 * time)


class TimeVaryingGP:
    """A GP on standardized outputs with the time-varying kernel, fitted by
    maximum marginal likelihood over a grid of (lengthscale, epsilon, noise)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, fit: Fit | None = None) -> None:
        if x.ndim != 2 or len(x) != len(y) or len(x) < 1:
            raise ValueError(f"x and y must hold the same number (>= 1) of points, but got "
                             f"{x.shape} and {y.shape}")  # fmt: skip
        self.x, self.y = x, y
        self.fit = fit if fit is not None else self._fit()
        f = self.fit
        covariance = kernel(x, x, f.variance, f.lengthscale, f.epsilon)
        covariance += (f.noise + JITTER) * np.eye(len(x))
        self._chol = np.linalg.cholesky(covariance)
        self._alpha = _solve(self._chol, y)

    def _fit(self) -> Fit:
        n = len(self.x)
        time = np.abs(self.x[:, :1] - self.x[:, :1].T)
        squared = ((self.x[:, None, 1:] - self.x[None, :, 1:]) ** 2).sum(axis=-1)
        best: Fit | None = None
        rbf = {ell: np.exp(-squared / ell) for ell in LENGTHSCALES}
        decay = {eps: (1.0 - eps) ** (0.5 * time) for eps in EPSILONS}
        eye = np.eye(n)
        for lengthscale, epsilon, ratio in itertools.product(
            LENGTHSCALES, EPSILONS, NOISE_RATIOS
        ):
            shape = rbf[lengthscale] * decay[epsilon] + (ratio + JITTER) * eye
            try:
                chol = np.linalg.cholesky(shape)
            except np.linalg.LinAlgError:
                continue
            quadratic = float(self.y @ _solve(chol, self.y))
            variance = max(quadratic / n, 1e-12)  # the variance that maximizes the likelihood
            log_det = 2.0 * float(np.log(np.diag(chol)).sum())
            constant = n * (1 + math.log(2 * math.pi))
            log_likelihood = -0.5 * (n * math.log(variance) + log_det + constant)
            if best is None or log_likelihood > best.log_likelihood:
                best = Fit(variance, lengthscale, epsilon, ratio * variance, log_likelihood)
        if best is None:  # pragma: no cover - the largest noise ratio always factorizes
            raise np.linalg.LinAlgError("no kernel setting gave a positive definite covariance")
        return best

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the (noise-free) change at ``points``."""
        f = self.fit
        cross = kernel(points, self.x, f.variance, f.lengthscale, f.epsilon)
        mean = cross @ self._alpha
        from scipy.linalg import solve_triangular  # here: `import nestor.search` lists every module

        v = solve_triangular(self._chol, cross.T, lower=True, check_finite=False)
        variance = np.maximum(f.variance - (v**2).sum(axis=0), 0.0)
        return mean, np.sqrt(variance)

    def with_pending(self, points: np.ndarray) -> TimeVaryingGP:
        """The same GP with ``points`` added as if observed at their predicted mean:
        the mean stays, the uncertainty around them shrinks (GP-BUCB)."""
        if len(points) == 0:
            return self
        mean, _ = self.predict(points)
        return TimeVaryingGP(np.vstack([self.x, points]), np.concatenate([self.y, mean]), self.fit)


def _solve(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.linalg import cho_solve

    return cho_solve((chol, True), b, check_finite=False)


def _scale(column: np.ndarray, value: float) -> tuple[np.ndarray, float]:
    low, high = float(column.min()), float(column.max())
    width = high - low if high > low else 1.0
    return (column - low) / width, (value - low) / width


def select(
    times: np.ndarray,
    rewards_before: np.ndarray,
    hyperparameters: np.ndarray,
    changes: np.ndarray,
    *,
    time: float,
    reward_before: float,
    pending: np.ndarray,
    rng: np.random.Generator,
    candidates: int = 512,
) -> tuple[np.ndarray, dict[str, float]]:
    """The hyperparameters (in [0, 1]^d) that maximize the UCB of the change of
    reward, trained from (``time``, ``reward_before``); and what the fit chose.

    ``hyperparameters`` (N x d, already in [0, 1]) and ``changes`` (N) are the
    data; ``pending`` (P x d) the hyperparameters still training at ``time``.
    """
    times, rewards_before, changes = times[-WINDOW:], rewards_before[-WINDOW:], changes[-WINDOW:]
    hyperparameters = hyperparameters[-WINDOW:]
    t, t_new = _scale(times.astype(float), time)
    r, r_new = _scale(rewards_before.astype(float), reward_before)
    spread = float(changes.std())
    y = (changes - changes.mean()) / (spread if spread > 0 else 1.0)
    x = np.column_stack([t, r, hyperparameters])
    model = TimeVaryingGP(x, y)
    d = hyperparameters.shape[1]
    context = np.array([t_new, r_new])
    if len(pending):
        spread_out = model.with_pending(np.column_stack([np.tile(context, (len(pending), 1)),
                                                         pending]))  # fmt: skip
    else:
        spread_out = model
    kappa = KAPPA

    def ucb(h: np.ndarray) -> np.ndarray:
        points = np.column_stack([np.tile(context, (len(h), 1)), h])
        mean, _ = model.predict(points)
        _, std = spread_out.predict(points)
        return mean + kappa * std

    pool = rng.random((candidates, d))
    scores = ucb(pool)
    starts = pool[np.argsort(-scores)[:4]]
    best, best_score = starts[0], float(scores.max())
    for start in starts:
        point, score = start, float(ucb(start[None, :])[0])
        for step in (0.1, 0.05, 0.02, 0.01, 0.005):
            tries = np.clip(point + rng.normal(0.0, step, (16, d)), 0.0, 1.0)
            tried = ucb(tries)
            if float(tried.max()) > score:
                point, score = tries[int(np.argmax(tried))], float(tried.max())
        if score > best_score:
            best, best_score = point, score
    f = model.fit
    return best, {"lengthscale": f.lengthscale, "epsilon": f.epsilon, "ucb": best_score,
                  "kappa": kappa, "points": float(len(x))}  # fmt: skip
