"""The building blocks of the notebook widgets: BokehJS put into the page once per kernel (no
CDN), a live bokeh figure as an ipywidget, the checks of what a widget is given (a trace, a
model, a text, two names: one line each), a box that shows a callback's error next to its control, and the
kind / layer / head picker. The last three speak `lang` (`attnlab.app.i18n`).
"""

from __future__ import annotations

import html
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ipywidgets as w
from bokeh.io import output_notebook
from bokeh.models import LayoutDOM, Row
from bokeh.resources import Resources
from IPython import get_ipython
from jupyter_bokeh import BokehModel

from attnlab import viz
from attnlab.app.checkpoints import open_model
from attnlab.app.i18n import DEFAULT, error_message, kind_name, kind_title, text
from attnlab.errors import AttnlabError, ConfigError, ModelInputError
from attnlab.record.trace import AttentionTrace
from attnlab.viz import head_ids, selection

EXAMPLES = {  # the first sentence a widget decodes: written for attnlab, not taken from a corpus
    "translate": "A man in a blue shirt is playing the guitar on the street.",
    "parse": "The old man saw the dog with a telescope .",
}
# A model trained on Tatoeba learned short everyday sentences (a median of six words): the caption
# above came out "Un hombre en una camisa azul está tocando la calle." (the guitar gone) in both
# bundled Tatoeba models, so such a model opens on an everyday sentence instead.
EVERYDAY = "My friend bought a new bicycle yesterday."


def example(model: Any) -> str:
    """The sentence a widget opens `model` on: EXAMPLES by task, the everyday one for a translator
    trained on Tatoeba."""
    data = model.meta.get("data", {}) if isinstance(model.meta, dict) else {}
    if model.task != "parse" and isinstance(data, dict) and data.get("corpus") == "tatoeba":
        return EVERYDAY
    return EXAMPLES.get(model.task, EXAMPLES["translate"])


BOKEHJS = ["bokeh", "bokeh-gl", "bokeh-widgets", "bokeh-tables"]  # what viz uses; MathJax (1.8 MB) is not
_bokehjs_loaded = False


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (where display output reaches a page), False in plain Python."""
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def setup(force: bool = False) -> bool:
    """Load BokehJS into the notebook page from the installed bokeh package (inline, ~2 MB).

    Once per kernel; `force=True` loads it again (after reloading the browser page without
    restarting the kernel). Also makes `bokeh.io.show` render inline. Returns whether it loaded."""
    global _bokehjs_loaded
    if (_bokehjs_loaded and not force) or not _in_kernel():
        return False
    output_notebook(Resources(mode="inline", components=BOKEHJS), hide_banner=True)
    _bokehjs_loaded = True
    return True


class BokehPane(w.Box):
    """One bokeh figure (or layout) as a live widget; `update` swaps in another one."""

    def __init__(self, figure: LayoutDOM | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        setup()
        self.figure: LayoutDOM | None = None
        self.bokeh: BokehModel | None = None
        self.update(figure)

    def update(self, figure: LayoutDOM | None) -> None:
        """Show `figure` (None: show nothing). Reuses the `BokehModel`, whose view re-renders."""
        self.figure = figure
        if figure is None:
            self.children = ()
            return
        if self.bokeh is None:
            self.bokeh = BokehModel(figure)
        else:
            self.bokeh.update_from_model(figure)
        # a figure that narrows with the window (`cells.fit_window`) takes the row's width: in a box
        # of no width it collapsed to its 660 px least, columns hidden where 1,070 px were free
        stretches = getattr(figure, "sizing_mode", None) == "stretch_width"
        self.layout.width = self.bokeh.layout.width = "100%" if stretches else None
        # and one of a fixed width keeps it: in a row that wraps, a box shrunk 14 px under its figure
        self.layout.flex = None if stretches else "0 0 auto"
        self.children = (self.bokeh,)


def checkbox(description: str, value: bool = False) -> w.Checkbox:
    """A checkbox whose label is shown whole: ipywidgets lays a checkbox out 300 px wide and cuts a
    longer label with an ellipsis ("show the logit lens (what each decoder l…")."""
    return w.Checkbox(
        value=value, description=description, indent=False, layout=w.Layout(width="auto", margin="2px 18px 2px 0")
    )


def button(description: str, style: str = "") -> w.Button:
    """A button whose label is shown whole: ipywidgets' is 148 px wide, and cut "Sustituir cabeza
    a cabeza" in a Spanish notebook; as wide as that at least, as its label at most."""
    return w.Button(description=description, button_style=style, layout=w.Layout(width="auto", min_width="148px"))


def plot(figure: LayoutDOM) -> BokehPane:
    """Any `attnlab.viz` figure (or a bokeh layout of them) as a live notebook widget; anything
    else is one line (a bare AssertionError from jupyter_bokeh before). A `row` of figures
    wraps: the figures stand side by side where the cell has room, else under each other (three
    masks ran 380 px past a 1,280 px notebook, a rollout beside its heatmap out of sight)."""
    if not isinstance(figure, LayoutDOM):
        raise AttnlabError(text("widgets.not_a_figure", DEFAULT, got=type(figure).__name__))
    if isinstance(figure, Row):
        figure.update(sizing_mode="stretch_width", styles={**figure.styles, "flex-wrap": "wrap"})
    return BokehPane(figure)


def checked_trace(trace: Any, caller: str, lang: str = DEFAULT) -> AttentionTrace:
    """A trace, or one loaded from a file; else one line (a `Result` was an AttributeError)."""
    if isinstance(trace, (str, Path)):
        return AttentionTrace.load(trace)
    if not isinstance(trace, AttentionTrace):
        raise AttnlabError(text("widgets.not_a_trace", lang, caller=caller, got=type(trace).__name__))
    return trace


@contextmanager
def said_in(lang: str) -> Iterator[None]:
    """The library's English one-line errors raised inside, with the catalogue's lead line in
    `lang` before them (`i18n.error_message`), as the widgets' error boxes say them: a missing
    checkpoint given to `explore(..., lang="es")` was English alone, a bad beam Spanish."""
    try:
        yield
    except AttnlabError as error:
        if lang == DEFAULT:
            raise
        raise type(error)(error_message(error, lang)) from None


def checked_model(checkpoint_or_model: Any, caller: str, lang: str = DEFAULT) -> Any:
    """A checkpoint directory (loaded once per kernel) or a model from `attnlab.load`."""
    model = checkpoint_or_model
    if isinstance(model, (str, Path)):
        with said_in(lang):
            model = open_model(model)
    if not hasattr(model, "translate") or not hasattr(model, "task"):
        raise AttnlabError(text("widgets.not_a_model", lang, caller=caller, got=type(model).__name__))
    return model


def checked_text(value: Any, lang: str = DEFAULT) -> str:
    """The text a widget decodes: a string, else one line (the text box's TraitError before;
    bytes, which the box decoded, are refused as `translate` refuses them)."""
    if not isinstance(value, str):
        raise ModelInputError(text("widgets.not_a_text", lang, got=type(value).__name__))
    return value


def checked_names(names: Any, lang: str = DEFAULT) -> tuple[str, str]:
    """What `Compare` calls its two models: two strings, else one line (a ValueError or an
    AttributeError in its error box, after both models had decoded)."""
    if not viz.two_names(names):
        raise ConfigError(text("widgets.bad_names", lang, got=repr(names)))
    return names[0], names[1]


class ErrorBox(w.HTML):
    """Where a widget reports what went wrong; `message` is the last error ('' when cleared): an
    `AttnlabError`'s own message, after a lead line in `lang` when that is not English."""

    def __init__(self, lang: str = DEFAULT) -> None:
        super().__init__()
        self.message = ""
        self.lang = lang

    def clear(self) -> None:
        self.message = ""
        self.value = ""

    def act(self, action: Callable[[], None]) -> None:
        """A reader's own action (a box ticked, a menu or head chosen): `action`, after the last
        action's error goes (it stayed under the new view), its own error said here. A part of a
        larger action (a reading drawn as a hypothesis opens, a run) is called directly instead:
        clearing there would wipe the error of a part before it."""
        self.clear()
        with reporting(self):
            action()

    def report(self, error: BaseException) -> None:
        lang = self.lang
        if isinstance(error, AttnlabError):
            self.message = error_message(error, lang)
            details = ""
        else:  # a bug: keep the traceback, folded
            self.message = f"{type(error).__name__}: {error}"
            trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            details = f"<details><summary>{text('widgets.traceback', lang)}</summary><pre>{html.escape(trace)}</pre></details>"
        self.value = (
            '<div class="attnlab-error" style="color:#a50f15;background:#fee0d2;padding:4px 8px;border-radius:4px">'
            f"<b>{text('widgets.error', lang)}</b> {html.escape(self.message)}{details}</div>"  # (zh: "错误：")
        )


def trace_caption(trace: AttentionTrace, lang: str = DEFAULT) -> str:
    """What a trace read and wrote, as HTML above its figures."""
    source = trace.meta.get("text") or " ".join(trace.src_tokens)
    output = trace.meta.get("output") or " ".join(trace.tgt_tokens)
    said, wrote = text("widgets.input", lang), text("widgets.output", lang)
    return f"<b>{said}</b>: {html.escape(str(source))}<br><b>{wrote}</b>: {html.escape(str(output))}"


@contextmanager
def reporting(errors: ErrorBox) -> Iterator[None]:
    """Run a callback's body; an exception goes into `errors` instead of the log console."""
    try:
        yield
    except Exception as error:
        errors.report(error)


class HeadPicker(w.HBox):
    """Kind / layer / head selectors for a trace; calls `on_change()` once per user change. The
    heads offered are the model's ids (a trace may hold a subset), and so is `value`'s head."""

    def __init__(self, on_change: Callable[[], None], lang: str = DEFAULT) -> None:
        self.lang = lang
        self.kind = w.ToggleButtons(style={"button_width": "auto"})
        self.layer = w.Dropdown(description=text("selection.layer", lang), layout=w.Layout(width="150px"))
        self.head = w.Dropdown(description=text("selection.head", lang), layout=w.Layout(width="150px"))
        kind = w.Label(text("selection.kind", lang))
        super().__init__([kind, self.kind, self.layer, self.head], layout=w.Layout(flex_flow="row wrap"))
        self.trace: AttentionTrace | None = None
        self._on_change = on_change
        self._quiet = False
        self.kind.observe(self._kind_changed, "value")
        self.layer.observe(self._changed, "value")
        self.head.observe(self._changed, "value")

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Set several selectors without a redraw for each."""
        previous, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = previous

    def configure(self, trace: AttentionTrace) -> None:
        """Offer what `trace` holds, keeping the current selection where it still exists."""
        self.trace = trace
        kinds = trace.kinds
        wanted = self.kind.value or ("cross" if "cross" in kinds else kinds[0])
        with self.quiet():
            self.kind.options = [(kind_name(k, self.lang), k) for k in kinds]
            self.kind.tooltips = [kind_title(k, self.lang) for k in kinds]
            self.kind.value = wanted if wanted in kinds else kinds[0]
            heads, current = head_ids(trace), self.head.value
            self.head.options = [(str(h), h) for h in heads]
            self.head.value = current if current in heads else heads[0]
            self._offer_layers()

    def _offer_layers(self) -> None:
        layers = self.trace.layers[self.kind.value]
        current = self.layer.value
        self.layer.options = [(str(layer), layer) for layer in layers]
        self.layer.value = current if current in layers else layers[0]

    def select(self, kind: str | None = None, layer: int | None = None, head: int | None = None) -> None:
        """Change the selection from code (one redraw): the model's layer and head, a negative one
        counting from the model's last; one the trace lacks is a one-line error (`viz.selection`),
        and so is a selection before any trace is shown (an AttributeError of None before)."""
        if self.trace is None:
            raise AttnlabError(text("widgets.no_trace", self.lang))
        kind, layer, head = selection(self.trace, self.kind.value if kind is None else kind, layer, head)
        with self.quiet():  # everything checked first: a refused selection changes nothing
            self.kind.value = kind
            self._offer_layers()
            if layer is not None:
                self.layer.value = layer
            if head is not None:
                self.head.value = head
        self._on_change()

    @property
    def value(self) -> tuple[str, int, int]:
        return self.kind.value, self.layer.value, self.head.value

    def _kind_changed(self, change: dict) -> None:
        if self._quiet or self.trace is None:
            return
        if change["new"] not in self.trace.kinds:  # (None, no button pressed: a KeyError out of the view)
            with self.quiet():
                self.kind.value = change["old"]
            return
        with self.quiet():
            self._offer_layers()
        self._on_change()

    def _changed(self, _change: dict) -> None:
        if not self._quiet and self.trace is not None:
            self._on_change()
