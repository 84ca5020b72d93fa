"""One browser session's state: the loaded checkpoint, the input, the decoding settings, the
current result and its `AttentionTrace`, and the head every view shows. Views read it and never
compute a selection of their own, so that all tabs always show the same head of the same trace.

The store is also where a served explorer draws its limits, because every request from a
browser -- the widgets' or a crafted one -- ends up in its parameters: a typed path is opened
only under the server's checkpoint roots (`attnlab.app.roots`), the decoded text and reference
are cut to `MAX_INPUT_CHARS`, the beam to `MAX_BEAM`, each with a notice that says so, decoding
stops after `time_limit` seconds (the server decodes one request at a time: a 20,000-character
text at beam 32 took minutes and held up every session), and no server path reaches a message,
the model's name or an exported trace.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import param

from attnlab.app.checkpoints import BUNDLED, open_model
from attnlab.app.i18n import DEFAULT, LANGUAGES, error_message, grouped, kind_name, text
from attnlab.app.roots import CheckpointRoots
from attnlab.app.words import figure_words
from attnlab.data.tokenizer import read_as_bytes, shown_characters, unknown_characters
from attnlab.data.treebank import parse_tree
from attnlab.decode.api import DEFAULTS, Result
from attnlab.decode.deadline import time_limit
from attnlab.errors import AttnlabError
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace

log = logging.getLogger("attnlab.explorer")
T = TypeVar("T")

MAX_INPUT_CHARS = 20_000  # the models read at most a few hundred pieces; this is ~20x more, and tokenises in ms
MAX_BEAM = 32  # the parser's paper setting (21) fits; wider beams only cost the shared CPU
TIME_LIMIT = 30.0  # seconds of decoding a request may take (`attnlab explore --time-limit`)


class Store(param.Parameterized):
    """One session's state. Views read it; only its methods change it."""

    checkpoint = param.String(default="", doc="server path of the loaded checkpoint (never shown)")
    checkpoint_name = param.String(default="", doc="the loaded checkpoint as visitors see it: relative to a root")
    model = param.Parameter(default=None, doc="attnlab.api.Model, or None while none is loaded")
    text = param.String(default="")
    reference = param.String(default="", doc="optional target: teacher-forced attention of this output")
    greedy = param.Boolean(default=False)
    # None: a box the visitor emptied, which means the model's task's value (it was a ValueError
    # traceback on the server and the box snapped back without a word)
    beam = param.Integer(default=4, allow_None=True, doc="cut to 1..MAX_BEAM when decoding, with a notice")
    alpha = param.Number(default=0.6, bounds=(0.0, 5.0), allow_None=True)
    time_limit = param.Number(
        default=TIME_LIMIT, bounds=(0.0, None), doc="seconds of decoding a request may take; 0: none"
    )
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
    error = param.String(default="", doc="what went wrong opening a checkpoint or decoding: shown on every tab")
    # A Corpus error stayed in the error box over every other tab, and so did the ablation's and a
    # view's that could not draw the trace: each view's own is kept apart, for the page to show
    # while that view's tab is open.
    errors = param.Dict(default={}, doc="{view: what went wrong in it}, set by `view_error`")
    notices = param.List(default=[])
    run = param.Integer(default=0, doc="increments each time a new trace is in")
    timing = param.Dict(default={})
    lang = param.Selector(default=DEFAULT, objects=list(LANGUAGES), doc="the page's language: every view reads it")

    def __init__(self, roots: CheckpointRoots | None = None, **params: Any) -> None:
        """`roots`: the directories this server lets visitors open (default: the bundled ones);
        `lang`: the language of the session's messages and of every view's words."""
        super().__init__(**params)
        self.roots = roots if roots is not None else CheckpointRoots([BUNDLED])
        self._refused: tuple[str, ...] = ()  # the notices of the last values refused (`refuse`)
        self._preferred: dict[str, int] = {}  # the layer and head the next trace opens at (`prefer`)
        self.param.kind.objects = self._kinds(list(self.param.kind.objects))

    @param.depends("kind", watch=True)
    def _follow_kind(self) -> None:
        """Whatever set `kind` (the kind buttons are bound straight to it), offer the open kind's
        layers and queries before any view reads them: a view watching `kind` runs after this
        (param runs `depends` watchers first), and a query of another kind is no choice here."""
        if self.trace is not None:
            self._set_choices(self.trace, self.kind)

    def _kinds(self, kinds: list[str]) -> dict[str, str]:
        """The kinds of attention as the views offer them: {name in the page's language: kind}."""
        return {kind_name(kind, self.lang): kind for kind in kinds}

    def explain(self, error: AttnlabError, names: dict[str, str] | None = None) -> str:
        """One of attnlab's errors as this session shows it: no server path in it (those in
        `names`, {server path: name}, by their name), tidied into a sentence, and in another
        language than English after a lead line from the catalogue (`i18n.error_message`).
        It is made a sentence before the paths in it are named: a message that starts with a
        path keeps the name's own case (`root/profiles/p.parquet: ...`, not `Root/...`)."""
        return error_message(error, self.lang, self.roots.scrub(sentence(str(error)), names))

    def attempt(self, call: Callable[[], T], what: str) -> tuple[T | None, str]:
        """(`call()`, ""), or (None, the one line this session shows for what it raised): attnlab's
        refusals `explain`ed; anything else is a bug, named in the line and its traceback in the
        server's log under `what` (what the boxes that run the library on a visitor's sentence share)."""
        try:
            return call(), ""
        except AttnlabError as error:
            return None, self.explain(error)
        except Exception as error:
            log.exception(what)
            return None, text("error.internal", self.lang, error=type(error).__name__)

    @property
    def beam_size(self) -> int:
        """The beam the model decodes with: greedy decoding is a beam of one, and no beam is
        wider than `MAX_BEAM` whatever a request set."""
        beam = self._task_default("beam") if self.beam is None else self.beam
        return 1 if self.greedy else min(max(1, int(beam)), MAX_BEAM)

    @property
    def alpha_value(self) -> float:
        """The length penalty α the model decodes with: the box's, or the task's when it is empty."""
        return float(self._task_default("alpha") if self.alpha is None else self.alpha)

    def _task_default(self, name: str) -> float:
        """The loaded model's task's search setting (§6.1, §6.3), for a box left empty."""
        return DEFAULTS.get(getattr(self.model, "task", "translate"), DEFAULTS["translate"])[name]

    def takes(self, name: str, value: Any) -> bool:
        """Whether the number box of `name` ("beam" or "alpha") may set it to what a browser sent:
        None (an emptied box), or a finite number of the parameter's type within its bounds (the
        beam is cut to 1..MAX_BEAM when decoding). Anything else -- ±inf or NaN, which a crafted
        request can send, or 1e9 for α -- is refused with a notice and the setting stays as it
        was: it reached param, whose ValueError Panel logged as "Callback failed" with a
        traceback, while the box went on showing the value without a word."""
        parameter = self.param[name]
        if value is None and parameter.allow_None:
            return True
        low, high = parameter.bounds or (None, None)
        number = int if isinstance(parameter, param.Integer) else (int, float)
        if (
            isinstance(value, number)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (low is None or value >= low)
            and (high is None or value <= high)
        ):
            return True
        kept = self._task_default(name) if getattr(self, name) is None else getattr(self, name)
        said = text(
            "notice.beam_refused" if name == "beam" else "notice.alpha_refused",
            self.lang,
            asked=str(value)[:24],
            kept=kept,
            low=f"{low:g}" if low is not None else low,
            high=f"{high:g}" if high is not None else high,
        )
        self.refuse(said)
        return False

    def view_error(self, view: str, said: str) -> None:
        """Say what went wrong in one view (named as the page names it: "corpus", "ablation",
        "lens", ...), or ('') that its last action went right: its error stays until then, shown
        while the view's tab is open, and leaves `error` and the other views' as they are."""
        errors = {name: error for name, error in self.errors.items() if name != view}
        self.errors = {**errors, view: said} if said else errors

    def refuse(self, *said: str) -> None:
        """Say why a value a browser sent was refused (`takes`, `screen.screen`), or why each of
        the values a link named was (`link.follow`): beside the last decode's notices, in place of
        the last refusal's."""
        self.notices = [*(n for n in self.notices if n not in self._refused), *said]
        self._refused = said

    @property
    def words(self) -> Mapping[str, str]:
        """The figures' words (`attnlab.viz`'s templates: titles, axes, hover, headers) in the
        page's language: every view passes them as `words=`."""
        return figure_words(self.lang)

    @property
    def open_head(self) -> str:
        """The open head, named short ("cross L2 H0") in the page's language: the Eq. (1) titles."""
        return text("head.short", self.lang, kind=kind_name(self.kind, self.lang), layer=self.layer, head=self.head)

    @property
    def vmax(self) -> float | None:
        """The top of the colour scale: 1.0, or None to scale each map to its own maximum."""
        return None if self.scale_to_max else 1.0

    # -- checkpoint -------------------------------------------------------------------------------
    def open_request(self, request: str) -> bool:
        """Open what a visitor typed: only a directory under one of the server's roots; anything
        else gets the roots' one refusal, whether it exists or not."""
        try:
            path = self.roots.resolve(request)
        except AttnlabError:  # the roots' one refusal, in the page's language
            roots = ", ".join(f"{root.name}/" for root in self.roots.roots) or "—"
            self.error = text("error.refused", self.lang, roots=roots)
            return False
        return self.open(path, self.roots.display(path))

    def open(self, path: str | Path, name: str | None = None) -> bool:
        """Load a checkpoint (or run) directory the server chose (a picker entry, or a request
        `open_request` resolved); on failure keep the previous model and say why, naming the
        directory `name` (default: relative to a root), never by its server path."""
        name = name or self.roots.display(path)
        # Under a root (typed by a visitor, or found there by the picker): every file under the
        # roots too. A checkpoint the server was started with elsewhere is the operator's choice.
        if self.roots.allows(path) and not self.roots.holds_whole(path):
            roots = ", ".join(f"{root.name}/" for root in self.roots.roots) or "—"
            self.error = text("error.refused", self.lang, roots=roots)
            return False
        try:
            model = open_model(path)
        except AttnlabError as error:
            self.error = self.explain(error, {str(path): name})
            return False
        except Exception as error:  # a bug, but the session must survive it
            log.exception("opening %s", path)
            self.error = text("error.open_internal", self.lang, name=name, error=type(error).__name__)
            return False
        task = DEFAULTS.get(model.task, DEFAULTS["translate"])  # the boxes start at the task's settings
        self.param.update(
            model=model, checkpoint=str(path), checkpoint_name=name, error="", beam=task["beam"], alpha=task["alpha"]
        )
        return True

    # -- decoding ---------------------------------------------------------------------------------
    def submit(self) -> bool:
        """Decode the text (and score the reference); on bad input keep the old views and say why.

        What a request may ask for is capped here, not only in the widgets: the text and the
        reference are cut to `MAX_INPUT_CHARS` and the beam to 1..`MAX_BEAM`, each with a notice,
        and decoding longer than `time_limit` seconds stops with an error.
        The notices always describe the last request, decoded or not: a failed one does not
        leave the previous sentence's (its truncation, say) on screen."""
        if self.model is None:
            self.param.update(error=text("error.no_model", self.lang), notices=[])
            return False
        notices = self._limits()
        # a byte-order mark pasted with the text is not text (as the command line's reader drops it)
        source, reference = (box[:MAX_INPUT_CHARS].replace("\ufeff", "") for box in (self.text, self.reference))
        started = time.perf_counter()
        try:
            model = self.model
            beam = self.beam_size
            with time_limit(self.time_limit):
                result = model.translate(
                    source, beam=beam, alpha=self.alpha_value, record=True, n_best=beam, truncate=True
                )
            decoded = time.perf_counter()
            scored = self._score(source, reference) if reference.strip() else None
        except AttnlabError as error:
            self.param.update(error=self.explain(error, {self.checkpoint: self.checkpoint_name}), notices=notices)
            return False
        except Exception as error:
            log.exception("decoding %r", source[:80])
            self.param.update(error=text("error.internal", self.lang, error=type(error).__name__), notices=notices)
            return False
        if result.truncated:
            pieces, used = len(model.tokenizer.encode(source)), len(result.src_tokens) - 1
            most = model.config.max_len - 1
            notices.append(text("notice.truncated", self.lang, pieces=pieces, chars=len(source), most=most, used=used))
        if scored is not None and scored.truncated:  # its log P and maps are of the first pieces only
            pieces, most = len(model.target_tokenizer.encode(reference)), model.config.max_len - 1
            notices.append(text("notice.reference_truncated", self.lang, pieces=pieces, most=most, used=most))
        missing = unknown_characters(model.tokenizer, source[:5000])
        if missing:
            shown = shown_characters(missing)
            if read_as_bytes(model.tokenizer, missing[0]):
                notices.append(text("notice.unknown_characters", self.lang, count=len(missing), characters=shown))
            else:  # (Marian's tokenizer: no byte pieces)
                notices.append(text("notice.unknown_unk", self.lang, count=len(missing), characters=shown))
        for done in (result, scored):
            if done is not None and done.trace is not None:  # exports name the model as visitors know it
                done.trace.model = {**done.trace.model, "checkpoint": self.checkpoint_name}
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

    def _score(self, source: str, reference: str) -> Result:
        """The reference read teacher-forced (`Model.score`). A parser's reference is a bracketed
        tree: it is read here first under the name the visitor knows it by (the tree reader's
        errors start with the name of what they read, by default an internal "<string>")."""
        if self.model.task == "parse":
            parse_tree(reference, text("error.the_reference", self.lang))
        return self.model.score(source, reference, record=True, truncate=True)

    def _limits(self) -> list[str]:
        """Bring the request within the server's limits; one notice for each thing changed."""
        notices = []
        if len(self.text) > MAX_INPUT_CHARS:
            notices.append(text("notice.input_cut", self.lang, chars=len(self.text), most=MAX_INPUT_CHARS))
        if len(self.reference) > MAX_INPUT_CHARS:
            notices.append(text("notice.reference_cut", self.lang, chars=len(self.reference), most=MAX_INPUT_CHARS))
        if not self.greedy and self.beam is not None and not 1 <= self.beam <= MAX_BEAM:
            notices.append(
                text(
                    "notice.beam_cut", self.lang, asked=_count(self.beam, self.lang), most=MAX_BEAM, used=self.beam_size
                )
            )
            self.beam = self.beam_size
        return notices

    def _set_trace(self, trace: AttentionTrace) -> None:
        kinds = trace.kinds
        kind = self.kind if self.kind in kinds else kinds[0]
        self.param.kind.objects = self._kinds(kinds)
        self._set_choices(trace, kind)
        self.param.update(trace=trace, kind=kind)

    def _set_choices(self, trace: AttentionTrace, kind: str) -> None:
        layers, heads = trace.layers[kind], list(range(trace.n_heads))
        queries = list(range(len(trace.labels(kind)[0])))
        # Decide first: widgets following these selectors jump to their first option when theirs goes.
        preferred, self._preferred = self._preferred, {}

        def kept(name: str, offered: list[int], otherwise: int) -> int:  # a link's choice, else the open one
            return next((v for v in (preferred.get(name), getattr(self, name)) if v in offered), otherwise)

        chosen = {"layer": kept("layer", layers, layers[-1]), "head": kept("head", heads, 0)}
        chosen["query"] = self.query if self.query in queries else 0
        self.param.layer.objects, self.param.head.objects, self.param.query.objects = layers, heads, queries
        self.param.update(**chosen)

    def prefer(self, kind: str, layer: int | None, head: int | None) -> None:
        """Open `kind`, and `layer` and `head` where the next trace has them (a link's head, set
        before the page's first decode): the views then draw that head first. Selected after
        the first draw, its edits reached the browser before the figures they edit ("reference
        isn't known" in the console)."""
        if kind in self.param.kind.objects:
            self.kind = kind
        self._preferred = {name: value for name, value in (("layer", layer), ("head", head)) if value is not None}

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
    """An error's one-line message as the app shows it: capitalised, ending with a full stop.
    Give it the message before its paths are named (`Store.explain`): a server path starts
    with "/", which has no capital, so the name that replaces it keeps its own case."""
    return message[:1].upper() + message[1:] + ("" if message.endswith((".", "。", "!", "?", "！", "？")) else ".")


def _count(number: int, lang: str) -> str:
    """A whole number as a notice shows it: 1,000 with separators (`grouped`), but 1e+300 (which a
    crafted request can send as a beam size) in three digits, not three hundred."""
    return grouped(number, lang) if abs(number) < 10**12 else f"{float(number):.3g}"
