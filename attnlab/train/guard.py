"""What a run does when training goes wrong: the one-line error it stops with, and SIGTERM or
Ctrl-C deferred until a checkpoint write is done.

The promise (tests/test_faults.py): whatever happens (a full disk, SIGTERM, a non-finite loss, a
killed log write, cut-short data), every checkpoint already published stays valid,
RUN_DIR/metrics.jsonl stays one JSON object per line, and the same command resumes the run.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

import torch.distributed

from attnlab.errors import AttnlabError

# --skip-nonfinite stops a run after this many skipped updates in a row: weights that give nan on
# every batch skipped forever, the step counter still and nothing logged.
SKIPS_IN_A_ROW = 100


class TrainingError(AttnlabError):
    """A run that cannot go on as asked, e.g. a non-finite loss; its message names the step."""


def lost_rank(error: RuntimeError, rank: int, saved_step: int | None) -> TrainingError | None:
    """The one line for a collective that failed because another rank died (killed, out of
    memory), which gloo and NCCL report to the survivors as a RuntimeError with their source
    location; None for any other RuntimeError, which stays a traceback (a bug)."""
    text = str(error)
    if not (isinstance(error, torch.distributed.DistError) or "gloo" in text or "NCCL" in text):
        return None
    reason = text.split("] ", 1)[-1].split(". ")[0]  # gloo: "[…/pair.cc:537] Read error …: Connection reset by peer."
    where = f"the last checkpoint is step_{saved_step}" if saved_step is not None else "no checkpoint was written yet"
    return TrainingError(
        f"rank {rank} lost another rank of the run ({reason}); {where}; run the same command to resume"
    )


class DeferredStop:
    """Turns SIGTERM and a first Ctrl-C (SIGINT) into a request that the loop reads between
    updates; `requested` is the signal's number (0: none).

    Schedulers and `torchrun` send SIGTERM before they kill, and a user stops a run with Ctrl-C.
    Taken at once, either could land in the middle of a checkpoint write (Ctrl-C once deleted
    the one being written, and lost every update since the last); deferred, the write finishes,
    the loop saves the current step and stops. A second Ctrl-C stops at once, as a user who
    presses it twice means. Installed only in the main thread (the only one Python delivers
    signals to); the previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.requested = 0
        self._previous: dict[int, signal.Handlers | int | None] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.requested == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signum

    def __enter__(self) -> DeferredStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
