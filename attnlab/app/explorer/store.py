"""One browser session's state: the loaded checkpoint, the input, the decoding settings, the
current result and its `AttentionTrace`, and the head every view shows. Views read it and never
compute a selection of their own, so that all tabs always show the same head of the same trace.
"""

from __future__ import annotations

import logging
import time

import param

from attnlab.app.checkpoints import open_model
from attnlab.data.tokenizer import unknown_characters
from attnlab.errors import AttnlabError
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace

log = logging.getLogger("attnlab.explorer")


class Store(param.Parameterized):
    """One session's state. Views read it; only its methods change it."""

    checkpoint = param.String(default="", doc="path of the loaded checkpoint")
    model = param.Parameter(default=None, doc="attnlab.api.Model, or None while none is loaded")
    text = param.String(default="")
    reference = param.String(default="", doc="optional target: teacher-forced attention of this output")
    greedy = param.Boolean(default=False)
    beam = param.Integer(default=4, bounds=(1, 50))
    alpha = param.Number(default=0.6, bounds=(0.0, 5.0))
    result = param.Parameter(default=None, doc="attnlab.api.Result of the model's own decoding")
    scored = param.Parameter(default=None, doc="attnlab.api.Result of the reference, when one is given")
    trace = param.Parameter(default=None, doc="the AttentionTrace every view shows")
    stats = param.List(default=[])
    kind = param.Selector(default="cross", objects=["encoder", "decoder", "cross"])  # alignments first
    layer = param.Selector(default=-1, objects=[-1])  # -1: the top layer once a trace is in
    head = param.Selector(default=0, objects=[0])
    query = param.Selector(default=0, objects=[0])
    mask = param.Boolean(default=True, doc="hatch the cells a mask forbade")
    scale_to_max = param.Boolean(default=False, doc="colour scale 0..max instead of 0..1")
    error = param.String(default="")
    notices = param.List(default=[])
    run = param.Integer(default=0, doc="increments each time a new trace is in")
    timing = param.Dict(default={})

    @property
    def beam_size(self) -> int:
        """The beam the model decodes with: greedy decoding is a beam of one."""
        return 1 if self.greedy else int(self.beam)

    @property
    def vmax(self) -> float | None:
        """The top of the colour scale: 1.0, or None to scale each map to its own maximum."""
        return None if self.scale_to_max else 1.0

    # -- checkpoint -------------------------------------------------------------------------------
    def open(self, path: str) -> bool:
        """Load a checkpoint (or run) directory; on failure keep the previous model and say why."""
        try:
            model = open_model(path)
        except AttnlabError as error:
            self.error = sentence(str(error))
            return False
        except Exception as error:  # a bug, but the session must survive it
            log.exception("opening %s", path)
            self.error = f"cannot open {path}: {type(error).__name__}: {error}"
            return False
        defaults = {"translate": (4, 0.6), "parse": (21, 0.3)}.get(model.task, (4, 0.6))
        self.param.update(model=model, checkpoint=str(path), error="", beam=defaults[0], alpha=defaults[1])
        return True

    # -- decoding ---------------------------------------------------------------------------------
    def submit(self) -> bool:
        """Decode the text (and score the reference); on bad input keep the old views and say why."""
        if self.model is None:
            self.error = "no checkpoint is loaded: pick one above"
            return False
        notices = []
        started = time.perf_counter()
        try:
            model = self.model
            beam = self.beam_size
            result = model.translate(
                self.text, beam=beam, alpha=float(self.alpha), record=True, n_best=beam, truncate=True
            )
            decoded = time.perf_counter()
            scored = None
            if self.reference.strip():
                scored = model.score(self.text, self.reference, record=True, truncate=True)
        except AttnlabError as error:
            self.error = sentence(str(error))
            return False
        except Exception as error:
            log.exception("decoding %r", self.text[:80])
            self.error = f"internal error ({type(error).__name__}: {error}); the app is still running"
            return False
        if result.truncated:
            pieces = len(model.tokenizer.encode(self.text))
            notices.append(
                f"The input was truncated: it has {pieces:,} pieces ({len(self.text):,} characters) and this model "
                f"reads at most {model.config.max_len - 1}; only the first {len(result.src_tokens) - 1} are used."
            )
        missing = unknown_characters(model.tokenizer, self.text[:5000])
        if missing:
            shown = " ".join(missing[:12]) + (" …" if len(missing) > 12 else "")
            notices.append(
                f"{len(missing)} character(s) are not in the vocabulary and are spelled as UTF-8 byte pieces: {shown}"
            )
        trace = (scored or result).trace
        self._set_trace(trace)
        self.param.update(
            result=result,
            scored=scored,
            stats=head_stats(trace),
            error="",
            notices=notices,
            timing={"decode_ms": 1000 * (decoded - started), "total_ms": 1000 * (time.perf_counter() - started)},
        )
        self.run += 1
        return True

    def _set_trace(self, trace: AttentionTrace) -> None:
        kinds = trace.kinds
        kind = self.kind if self.kind in kinds else kinds[0]
        self.param.kind.objects = kinds
        self._set_choices(trace, kind)
        self.param.update(trace=trace, kind=kind)

    def _set_choices(self, trace: AttentionTrace, kind: str) -> None:
        layers, heads = trace.layers[kind], list(range(trace.n_heads))
        queries = list(range(len(trace.labels(kind)[0])))
        # Decide first: widgets following these selectors jump to their first option when theirs goes.
        chosen = {
            "layer": self.layer if self.layer in layers else layers[-1],
            "head": self.head if self.head in heads else 0,
            "query": self.query if self.query in queries else 0,
        }
        self.param.layer.objects, self.param.head.objects, self.param.query.objects = layers, heads, queries
        self.param.update(**chosen)

    def select(self, kind: str | None = None, layer: int | None = None, head: int | None = None) -> None:
        """Open one head (from the grid, the dashboard, or code)."""
        if self.trace is None:
            return
        kind = kind or self.kind
        if kind != self.kind:
            self._set_choices(self.trace, kind)
        self.param.update(
            kind=kind, layer=self.layer if layer is None else layer, head=self.head if head is None else head
        )


def sentence(message: str) -> str:
    """An error's one-line message as the app shows it: capitalised, ending with a full stop."""
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
