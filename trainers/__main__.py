"""Run one trial from a shell, for people and tests.

    python -m nestor.trainers --trainer cnn --set dataset=mnist5k --set epochs=2 --param lr=0.05
    horovodrun -np 2 -H localhost:2 --gloo python -m nestor.trainers --trainer cnn --data-parallel 2
    horovodrun -np 4 -H localhost:4 --gloo python -m nestor.trainers --trainer mlp \
        --data-parallel 2 --model-parallel 2
    torchrun --standalone --nproc_per_node 2 -m nestor.trainers --backend torch --trainer cnn \
        --data-parallel 2
    python -m nestor.trainers --command "python3 fit.py" --param lr=0.1
    python -m nestor.trainers --command "torchrun --nproc_per_node {np} fit.py" --data-parallel 2
    python -m nestor.trainers --function mypkg.fit:train --param lr=0.1

Values are read as JSON where they parse (``2``, ``0.05``, ``true``,
``[0,1]``), else as strings. Rank 0 prints one line per epoch and, at the
end, the result as JSON (also written to ``--json PATH``). The exit status
is 0 for an ok trial and 1 for a failed one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nestor.trainers._types import TrainerRef, TrialRequest
from nestor.trainers.comm import backend_names


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"{flag} must look like name=value, but got {item!r}")
        out[name] = _value(value)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nestor.trainers",
                                description=__doc__.split("\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--trainer", help="a built-in trainer (mlp, cnn)")
    which.add_argument("--function", help="a Python trainer, package.module:function")
    which.add_argument("--command", help="a command trainer, split like a shell would")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting (repeatable)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyperparameter (repeatable)")
    # Long names first: under horovodrun, a bare --mp is taken as an abbreviation
    # of horovodrun's own --mpi-* options.
    p.add_argument("--data-parallel", "--dp", dest="dp", type=int, default=1,
                   help="data-parallel ranks")
    p.add_argument("--model-parallel", "--mp", dest="mp", type=int, default=1,
                   help="model-parallel ranks (write --model-parallel under horovodrun)")
    p.add_argument("--backend", choices=backend_names(),
                   help="what the ranks communicate over (default: horovod; torch under"
                        " torchrun)")
    p.add_argument("--trial-id", default="cli")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--init-from", help="checkpoint file or directory to start from")
    p.add_argument("--init-groups", help="comma-separated layer groups to load from --init-from")
    p.add_argument("--freeze", default="", help="comma-separated layer groups not to train")
    p.add_argument("--log-dir")
    p.add_argument("--timeout", type=float)
    p.add_argument("--result-pattern", help="command trainers: regex, group 1 is the result")
    p.add_argument("--flag-prefix", help="command trainers: prefix of parameter flags")
    p.add_argument("--json", help="also write rank 0's result to this file")
    p.add_argument("--quiet", action="store_true", help="print only the final result")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.trainer:
        trainer = TrainerRef.builtin(args.trainer)
    elif args.function:
        trainer = TrainerRef.python(args.function)
    else:
        trainer = TrainerRef.command(args.command, result_pattern=args.result_pattern,
                                     flag_prefix=args.flag_prefix)
    split = (lambda text: tuple(g for g in text.split(",") if g))  # noqa: E731
    request = TrialRequest(
        trial_id=args.trial_id, trainer=trainer, settings=_pairs(args.set, "--set"),
        config=_pairs(args.param, "--param"), data_parallel=args.dp, model_parallel=args.mp,
        checkpoint_dir=args.checkpoint_dir, init_from=args.init_from,
        init_groups=split(args.init_groups) if args.init_groups else None,
        freeze=split(args.freeze), log_dir=args.log_dir, timeout=args.timeout,
        backend=args.backend,
    )

    def report(metrics: dict[str, float], step: int) -> None:
        if not args.quiet:
            shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k != "epoch")
            print(f"[{request.trial_id}] step {step}: {shown}", flush=True)

    from nestor.trainers._run import command_rank, run_trial

    result = run_trial(request, report=report)
    rank = command_rank() if trainer.kind == "command" else 0  # only rank 0 ran it
    if trainer.kind != "command":
        from nestor.trainers.parallel import process_rank

        rank = process_rank(args.backend)
    if rank == 0:
        text = json.dumps(result.to_dict(), indent=None if args.quiet else 2, default=str)
        print(text, flush=True)
        if args.json:
            with open(args.json, "w") as handle:
                handle.write(text + "\n")
        if not result.ok:
            print(f"trial failed: {result.reason}", file=sys.stderr, flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    from nestor.trainers.parallel import exit_process

    exit_process(main())
