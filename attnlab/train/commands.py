"""`attnlab train`: the command line of the training loop (`attnlab.train.loop`). Every field
of `TrainConfig` is a flag; a recipe fills them all in, and flags given beside it win. A run
resumed (`--out` of an existing run) starts from the settings it was saved with."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any

from attnlab.errors import ArgumentParser, ConfigError, DataError, json_loads
from attnlab.model.checkpoint import step_dirs
from attnlab.model.config import PRESETS, parse_overrides
from attnlab.train.guard import lost_rank
from attnlab.train.loop import TrainConfig, Trainer
from attnlab.train.recipes import RECIPES, recipe
from attnlab.train.regime import COMPILE_MODES

HELP = {  # every field of TrainConfig that is a flag (`build_parser` takes each from here)
    "max_steps": "updates to train; default: the preset's in the paper (base 100000, big 300000), else 100000",
    "max_minutes": "stop, with a checkpoint, after this many minutes of wall time (default 0: no limit)",
    "save_every": "write a checkpoint (and the dev scores, probe traces) every N updates (default 1000)",
    "keep_last": "checkpoints kept, the last K (0: all); default: what the paper averages for the preset "
    "(base 5, big 20), else 5",
    "seed": "seeds the weights, the batches' order and the dropout masks (default 1)",
    "max_tokens": "token budget per process and micro-batch, each side (padded); an update reads "
    "max_tokens × processes × update_freq; default: the paper's ~25000 a side an update, shared by them, for "
    "base, big and the rows of Table 3, else 4096",
    "update_freq": "micro-batches accumulated into one update: the paper's batch on fewer or smaller devices (default 1)",
    "warmup": "warm-up steps of Eq. (3): the learning rate rises for N updates, then decays as 1/√step (default 4000)",
    "lr_scale": "multiplies Eq. (3)'s learning rate (default 1; small models on small data like 2)",
    "clip_norm": "clip the gradient's norm to this (default 0: no clipping, as the paper)",
    "dtype": "fp32 or bf16 (autocast, fp32 weights); default auto: bf16 on a GPU, fp32 on a CPU",
    "compile": "torch.compile: off, loss, model (and loss), or auto (default: where it pays on this device "
    "and run length; one line says which); a bare --compile means model",
    "log_every": "print and log the loss every N updates (default 50)",
    "eval_sentences": "dev pairs scored at each checkpoint: loss, perplexity, and BLEU or F1 of greedy decoding"
    " (beam 1, for speed: `attnlab evaluate` scores with the paper's beam 4) (default 200; 0: none)",
    "probes": "dev pairs whose attention is recorded at each checkpoint, for the explorer's Training "
    "timeline (default 4)",
    "align_gold": "a human word-alignment set of the data's languages (e.g. zhen_dev): every head's AER at "
    "each checkpoint",
    "align_pairs": "how many of --align-gold's pairs to score (default 100; 0: all of them; ~0.5 s a pair on a CPU)",
    "device": "cpu, cuda, cuda:N, mps, or auto (default: the GPU when one is visible)",
    "skip_nonfinite": "skip (and count) an update whose loss or gradient is nan or inf, instead of stopping",
}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="attnlab train",
        description="`attnlab train`: the training regime of §5, as one explicit loop.",
        epilog="Extra KEY=VALUE arguments override the preset (e.g. p_drop=0.3 n_layers=3).",
        allow_abbrev=False,  # `--lr 0.1` was taken as --lr-scale 0.1, `--warm` as --warmup, without a word
    )
    parser.add_argument("--preset", choices=list(PRESETS), help="model preset (default: base)")
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help=f"a named recipe that fills in every other option: {', '.join(RECIPES)} (attnlab.train.recipes)",
    )
    parser.add_argument(
        "--data", help="a directory written by `attnlab data prepare` (required for a new run without --recipe)"
    )
    parser.add_argument(
        "--out",
        help="run directory (checkpoints, metrics.jsonl); an existing one resumes (required without --recipe)",
    )
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("data", "out", "preset", "overrides"):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.name == "compile":  # a bare --compile (as before 2026-12) compiles the model and the loss
            parser.add_argument(flag, nargs="?", const="model", choices=COMPILE_MODES, default=None, help=HELP[f.name])
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=None, help=HELP[f.name])
        else:
            kind = int if f.default is None else type(f.default)  # (None: the preset's, `preset_defaults`)
            parser.add_argument(flag, type=kind, default=None, help=HELP[f.name])
    return parser


def run_settings(out: str | None) -> dict[str, Any]:
    """The settings a run was last saved with (from its newest checkpoint that has them), {} for
    a new run: `--out RUN` alone resumes as the run went. A flag left out was its default before
    (a run of --warmup 2 went on at 4000, said in one line), and --data had to be given again."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for _step, path in reversed(step_dirs(Path(out)) if out else []):
        try:
            saved = json_loads((path / "trainer.json").read_text()).get("train_config", {})
        except (OSError, ValueError, AttributeError):  # a damaged checkpoint: the one before it
            continue
        return {key: value for key, value in saved.items() if key in names and key != "out"}
    return {}


def resumed(out: str | os.PathLike, **changes: Any) -> TrainConfig:
    """The settings run `out` was last saved with, `changes` applied: what `attnlab train --out RUN`
    resumes with, for a notebook. `TrainConfig(data=..., out=RUN)` starts from its fields'
    defaults: a run of max_tokens 512 was refused at 4096, and one of warmup 5 went on at 4000."""
    if not isinstance(out, str | os.PathLike):
        raise ConfigError(f"out is a run directory, got {out!r}")
    if unknown := sorted(set(changes) - {f.name for f in dataclasses.fields(TrainConfig)}):
        raise ConfigError(f"{', '.join(unknown)}: not a setting of a run (TrainConfig's fields)")
    saved = run_settings(os.fspath(out))
    if not saved:
        raise ConfigError(
            f"{os.fspath(out)}: no checkpoint with the settings of a run; start one with TrainConfig(...)"
        )
    return TrainConfig(**{**saved, "out": os.fspath(out), **changes})


def config_from_args(argv: list[str]) -> TrainConfig:
    args, rest = build_parser().parse_known_args(argv)
    values: dict[str, Any] = run_settings(args.out or (recipe(args.recipe).get("out") if args.recipe else None))
    if args.recipe:
        values.update(recipe(args.recipe))
    overrides = dict(values.pop("overrides", {}))
    if args.recipe and args.preset and overrides:  # the recipe's overrides shape the recipe's preset, not this one
        said = " ".join(f"{k}={v}" for k, v in overrides.items())
        print(
            f"attnlab train: --preset {args.preset} replaces recipe {args.recipe}'s model ({said} dropped)",
            file=sys.stderr,
        )
        overrides = {}
    names = ["recipe", *(f.name for f in dataclasses.fields(TrainConfig) if f.name != "overrides")]
    overrides.update(parse_overrides(rest, ["--" + name.replace("_", "-") for name in names]))
    for key, value in vars(args).items():
        if key != "recipe" and value is not None:
            values[key] = value
    if not values.get("data") or not values.get("out"):
        raise ConfigError("--data and --out are required (or --recipe NAME; --out alone resumes a run)")
    saved = values["data"] if args.data is None and not args.recipe else None
    if saved and not os.path.isabs(saved) and not os.path.isdir(saved):  # (runs saved it as typed until 2026-12)
        raise DataError(f"the run's data, {saved}, was named from the directory it began in; give --data DIR")
    return TrainConfig(**values, overrides=overrides)


def check_recipe_data(argv: list[str], cfg: TrainConfig) -> None:
    """A recipe run on its own data directory that is not prepared yet: the recipe's own
    `attnlab data prepare` command, not a bare "run `attnlab data prepare`" that leaves the user
    to guess the corpus, pair, vocabulary size and directory."""
    name = build_parser().parse_known_args(argv)[0].recipe
    same = name and os.path.abspath(RECIPES[name]["data"]) == cfg.data  # (`TrainConfig` holds it absolute)
    if same and not (Path(cfg.data) / "meta.json").is_file():
        raise DataError(f"recipe {name}: {cfg.data} is not prepared yet; prepare it with: {RECIPES[name]['prepare']}")


def cli(argv: list[str]) -> int:
    cfg = config_from_args(argv)
    check_recipe_data(argv, cfg)
    trainer = Trainer(cfg)
    if trainer.step >= cfg.max_steps:
        if trainer.rank == 0:
            print(
                f"attnlab train: the run is at step {trainer.step}, --max-steps {cfg.max_steps}: nothing to do",
                file=sys.stderr,
            )
        return 0
    try:
        last = trainer.run()
    except RuntimeError as error:
        # the newest on disk: rank 0 publishes a checkpoint before the others pass the barrier
        # after it, and a survivor of rank 0 would name the one before (where the same run dir is
        # shared; a rank of another machine without it names what it knows)
        saved = max((step for step, _ in step_dirs(trainer.out)), default=trainer.saved_step)
        lost = lost_rank(error, trainer.rank, saved) if trainer.world > 1 else None
        if lost is None:
            raise
        if trainer.rank != 0:  # rank 0's progress bar died with it, mid-line: the error starts its own
            print(file=sys.stderr)
        raise lost from None
    said = {
        signal.SIGTERM: "by SIGTERM",
        signal.SIGINT: "by Ctrl-C",
        "time": f"after --max-minutes {cfg.max_minutes:g}",
    }
    if trainer.rank == 0:
        if last is not None:
            print(f"last checkpoint: {last}", file=sys.stderr)
        if trainer.stopped_by is not None:
            print(
                f"attnlab train: stopped {said[trainer.stopped_by]} at step {trainer.step} of {cfg.max_steps}; "
                "run the same command to resume",
                file=sys.stderr,
            )
    if isinstance(trainer.stopped_by, signal.Signals):
        return 128 + trainer.stopped_by  # what a shell reports for a process the signal ended
    return 0
