"""What a run does when training goes wrong: the one-line error it stops with, and SIGTERM
deferred until a checkpoint write is done.

The promise (tests/test_faults.py): whatever happens (a full disk, SIGTERM, a non-finite loss, a
killed log write, cut-short data), every checkpoint already published stays valid,
RUN_DIR/metrics.jsonl stays one JSON object per line, and the same command resumes the run.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

from attnlab.errors import AttnlabError


class TrainingError(AttnlabError):
    """A run that cannot go on as asked, e.g. a non-finite loss; its message names the step."""


class DeferredSigterm:
    """Turns SIGTERM into a request that the loop reads between updates.

    Schedulers and `torchrun` send SIGTERM before they kill. Taken at once, it could land in the
    middle of a checkpoint write; deferred, the write finishes, the loop saves the current step
    and stops. Installed only in the main thread (the only one Python delivers signals to); the
    previous handler comes back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: signal.Handlers | int | None = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def __enter__(self) -> DeferredSigterm:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
