"""Checkpoint averaging (§6.1: the last 5 checkpoints for base models, 20 for big) and
`attnlab average RUN_DIR --last K --out DIR`, which also ships a run's probe snapshots inside
the averaged checkpoint for the explorer's training timeline.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from attnlab.data.tokenizer import same_vocabulary
from attnlab.errors import ArgumentParser, CheckpointError, ConfigError, warn
from attnlab.model.checkpoint import (
    MANIFEST,
    STEP_DIR,
    load_model,
    read_config,
    read_safetensors,
    refuse_existing,
    save_checkpoint,
    step_dirs,
    verify,
)
from attnlab.train.commands import run_settings


def average(directories: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the checkpoints' weights (§6.1), in fp64 then back to fp32."""
    if not directories:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    gone = [directory for directory in directories if not directory.is_dir()]
    if gone:  # listed, then pruned by a run still saving (`--keep-last`): not a damaged checkpoint
        raise CheckpointError(f"{gone[0]} was removed while averaging; is the run still saving? average once it stops")
    first, first_manifest = directories[0], verify(directories[0])
    for directory in directories:
        _check_same_model(first, first_manifest, directory, first_manifest if directory == first else verify(directory))
        for name, tensor in read_safetensors(directory / "model.safetensors").items():
            if name in total and total[name].shape != tensor.shape:
                raise CheckpointError(f"{directory}: {name} has another shape; checkpoints of different models")
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (tensor / len(directories)).float() for name, tensor in total.items()}


NOT_TOKENIZERS = {"model.safetensors", "config.json", "trainer.safetensors", "trainer.json", MANIFEST}


def _check_same_model(first: Path, first_manifest: dict, other: Path, manifest: dict) -> None:
    """Weights of equal shapes can still belong to different models (global and restricted
    attention, another activation, another vocabulary of as many pieces): their mean is no
    model, and the averaged checkpoint would carry only the last one's config."""
    if read_config(other)[0] != read_config(first)[0]:
        raise CheckpointError(f"{other} and {first} are different models (their configs differ); average one run's")
    tokenizers = [
        {n: f.get("sha256") for n, f in m.get("files", {}).items() if n not in NOT_TOKENIZERS}
        for m in (first_manifest, manifest)
    ]
    same = tokenizers[0].keys() == tokenizers[1].keys() and all(
        digest == tokenizers[1][name] or same_vocabulary(first / name, other / name)  # (a run resumed on
        for name, digest in tokenizers[0].items()  # its data prepared again: a model file of other bytes)
    )
    if not same:
        raise CheckpointError(f"{other} and {first} use different vocabularies; average one run's checkpoints")


def average_run(
    run_dir: str | os.PathLike,
    last: int,
    out: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    snapshots: int = 0,
    force: bool = False,
) -> Path:
    """Average the last `last` checkpoints of a run into a new checkpoint directory (never into
    the run itself: one of its checkpoints replaced by the average would resume another run);
    an existing `out` is replaced only with `force`."""
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ConfigError(f"--last must be a whole number ≥ 1, got {last!r}")
    run, target = Path(run_dir).resolve(), Path(out).resolve()
    if target == run:
        raise CheckpointError(f"{out} is the run {run_dir} itself; write the average elsewhere")
    if run in target.parents and (run / "checkpoints") in (target, *target.parents):
        raise CheckpointError(f"{out} is inside the run {run_dir}'s checkpoints; write the average elsewhere")
    refuse_existing(Path(out), force)  # before the averaging, not after it
    listed = step_dirs(run_dir)[-last:]
    steps, chosen = [step for step, _ in listed], [path for _, path in listed]
    if len(chosen) < last:
        warn(f"{run_dir} has only {len(chosen)} checkpoints; averaging those")
    if len({b - a for a, b in zip(steps, steps[1:], strict=False)}) > 1:  # a stop's own save, a last step off the grid
        spaced = ", ".join(map(str, steps))
        warn(
            f"the checkpoints averaged are unevenly spaced (steps {spaced}); §6.1 averages ones written at equal intervals"
        )
    model, meta = load_model(chosen[-1])
    model.load_state_dict(average(chosen))
    meta = dict(meta, averaged=[p.name for p in chosen])
    out = save_checkpoint(out, model, chosen[-1] / "spm.model", meta=meta, dtype=dtype)
    copy_probes(run_dir, out, snapshots)
    return out


def copy_probes(run_dir: str | os.PathLike, out: Path, snapshots: int) -> None:
    """Ship up to `snapshots` of the run's probe snapshots (evenly spaced, the last included)
    inside the checkpoint, so the explorer's training timeline works without the run, and the
    AER tables of every step."""
    root = Path(run_dir) / "probes"
    steps = sorted((int(m.group(1)), p) for p in root.glob("step_*") if (m := STEP_DIR.match(p.name)))
    if not steps or snapshots <= 0:
        return
    stride = max(1, -(-len(steps) // snapshots))
    chosen = steps[::-1][::stride][::-1]
    for _, path in chosen:
        shutil.copytree(path, out / "probes" / path.name, dirs_exist_ok=True)
    for _, path in steps:  # every step's AER table (a few kB): the alignment timeline keeps its resolution
        if (path / "alignment.json").is_file():
            (out / "probes" / path.name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path / "alignment.json", out / "probes" / path.name / "alignment.json")


def cli(argv: list[str]) -> int:
    """`attnlab average RUN_DIR --last K --out DIR`."""
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab average", description=average_run.__doc__)
    parser.add_argument("run_dir", help="a run directory of `attnlab train` (its checkpoints/step_N)")
    parser.add_argument(
        "--last",
        type=int,
        help="how many of the newest checkpoints (default: the run's --keep-last, which is what the paper "
        "averages for its preset, 5 base and 20 big; 5 where the run kept every one)",
    )
    parser.add_argument("--out", required=True, help="the averaged checkpoint's directory")
    parser.add_argument("--bf16", action="store_true", help="store the weights in bfloat16 (half the size)")
    parser.add_argument(
        "--probes", type=int, default=0, metavar="N", help="also copy N probe snapshots of the run (default 0)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace --out if it is an attnlab checkpoint (not one holding files no checkpoint writes: a model card)",
    )
    args = parser.parse_args(argv)
    if args.probes < 0:  # (it copied none without a word; `train --probes -1` is refused too)
        raise ConfigError(f"--probes must be ≥ 0, got {args.probes}")
    if not step_dirs(args.run_dir):  # (a mistyped path was said to hold no checkpoints)
        why = "no checkpoints/step_N directories" if os.path.isdir(args.run_dir) else "no such directory"
        raise CheckpointError(f"{args.run_dir}: {why}")
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    last = args.last if args.last is not None else run_settings(args.run_dir).get("keep_last") or 5  # (big: 20)
    path = average_run(args.run_dir, last, args.out, dtype, args.probes, args.force)
    print(f"averaged checkpoints written to {path} ({', '.join(read_config(path)[1]['averaged'])})")
    return 0
