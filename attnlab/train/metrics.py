"""A run's log: RUN_DIR/metrics.jsonl, one JSON object per line (training intervals and dev
reports, each with its "step"), plus TensorBoard events when the tensorboard package is installed.

The log always matches the checkpoint a run resumes from: `repair` drops what a killed run wrote
after it, and a last line cut mid-write, before the resumed run appends again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from attnlab.errors import json_loads
from attnlab.train.guard import TrainingError


class MetricsLog:
    """Appends records to RUN_DIR/metrics.jsonl and mirrors their numbers to TensorBoard."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.tensorboard: Any = None  # a SummaryWriter once needed, False when unavailable

    def write(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        except OSError as error:  # a line cut short here is dropped by `repair` when the run resumes
            raise TrainingError(
                f"{self.path}: could not log step {record['step']} ({error.strerror}); run the same command to resume"
            ) from error
        if self.tensorboard is None:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional: tensorboard is not a dependency

                self.tensorboard = SummaryWriter(str(self.path.parent / "tensorboard"))
            except ImportError:
                self.tensorboard = False
        if self.tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key, value, record["step"])
            self.tensorboard.flush()

    def repair(self, step: int) -> None:
        """Keep the lines of steps up to `step` (the checkpoint resumed from; 0 for a fresh start).

        A killed run leaves lines past its last checkpoint, which the resumed run writes again,
        and possibly a last line cut mid-write, which would glue itself to the next record; both
        go. The repaired file replaces the old one by rename, so a kill during the repair loses
        no line.
        """
        if not self.path.exists():
            return
        kept, broken = [], 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json_loads(line)
                if record["step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                broken += 1
        if broken:
            print(
                f"attnlab train: {self.path}: dropped {broken} unreadable line(s), cut short by a kill", file=sys.stderr
            )
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)
