"""What a resumed run checks against the run it continues, in one line each: the model and the
vocabulary must be the run's (else every weight or id would mean something else), the update
rule may change but is said to, and what a killed run left half done is cleaned or redone.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from attnlab.data.tokenizer import same_vocabulary
from attnlab.errors import CheckpointError, json_loads
from attnlab.model.checkpoint import latest_valid, step_dirs
from attnlab.model.config import ModelConfig

UPDATE_RULE = ("warmup", "lr_scale", "clip_norm", "skip_nonfinite", "precision")


def resumable(run: Path) -> Path | None:
    """The newest checkpoint of `run` that verifies (`latest_valid`), None for a run without any
    yet. A run with checkpoints none of which verifies is not a run to start over: it once began
    again at step 0 after a warning per checkpoint, emptied its log and overwrote them (what was
    left to salvage); the run directory is the user's to repair, move or remove."""
    latest = latest_valid(run)
    if latest is None and step_dirs(run):
        raise CheckpointError(
            f"{run}: all {len(step_dirs(run))} checkpoints are damaged (see the warnings above); refusing to start "
            "the run over on top of them: move or remove them, or the run directory"
        )
    return latest


def check_same_model(checkpoint: Path, saved: ModelConfig, mine: ModelConfig, spm: Path) -> None:
    """The run's model and vocabulary, or a one-line error naming what differs. Another corpus
    prepared with as many pieces (another language pair, a re-run of `data prepare`) fits the
    same config, and its ids would mean other pieces to the model. Only the fields that make the
    model's identity are named (those `==` compares): `paper`, the published numbers kept for
    comparison, differs between a preset and its overrides and is no difference of the model."""
    if saved != mine:
        a, b = dataclasses.asdict(saved), dataclasses.asdict(mine)
        identity = [f.name for f in dataclasses.fields(ModelConfig) if f.compare]
        differ = ", ".join(f"{k} {b[k]!r} (the run: {a[k]!r})" for k in identity if a[k] != b[k])
        raise CheckpointError(f"{checkpoint}: another model than the run's ({differ}); use another --out")
    if not same_vocabulary(checkpoint / "spm.model", spm):
        raise CheckpointError(
            f"{checkpoint}: the run was trained with another vocabulary than {spm}; "
            "resume it with the data it was trained on, or use another --out"
        )


def changed_update_rule(info: dict[str, Any], mine: dict[str, Any]) -> str:
    """The update rule's settings that differ from the run's (the batches' own are checked by
    the sampler): allowed, a user may mean it, but never silently (a bf16 run resumed
    without --dtype bf16 would go on in fp32)."""
    saved = {**info.get("train_config", {}), **({"precision": info["precision"]} if "precision" in info else {})}
    return ", ".join(f"{n}={mine[n]} (the run had {saved[n]})" for n in UPDATE_RULE if saved.get(n, mine[n]) != mine[n])


def tidy(run_dir: Path, metrics: Any, step: int) -> None:
    """What a killed run left past `step`, its resumed checkpoint (0: none, a run that starts over)
    swept up: the log's lines after it (`MetricsLog.repair`) and the temporary directory of a
    checkpoint it was writing (the published ones are whole), hundreds of MB each for base, never
    read again (a run killed while writing its first one kept it forever: only a resume swept)."""
    metrics.repair(step)
    for stale in (run_dir / "checkpoints").glob(".step_*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def has_dev_record(metrics: Path, step: int) -> bool:
    """Whether the log holds the dev report of `step` (a run killed while evaluating the
    checkpoint it had just published has none, and no later run would write it)."""
    if not metrics.is_file():
        return False
    for line in metrics.read_text(encoding="utf-8").splitlines():
        record = json_loads(line)
        if record.get("step") == step and any(key.startswith("dev_") for key in record):
            return True
    return False
