"""Attention in JupyterLab (and Jupyter Notebook 7, which runs the same extensions): live
widgets over `attnlab.viz`.

    from attnlab.widgets import explore, show
    explore("checkpoints/multi30k-en-de")          # type, translate (or parse), open any head
    show(result.trace)                              # a recorded or saved AttentionTrace
    replay("runs/my-run")                           # the probe traces of a training run, step by step

The figures are the explorer's own (`attnlab.viz`: the same functions draw the web app), shown
as live bokeh figures through jupyter_bokeh's `BokehModel`; the controls are ipywidgets. Changing
a control builds a new figure from the trace and swaps it into the same `BokehModel`, so what a
widget shows is always what `viz` draws for the current selection (`.figures` holds them).

No CDN: jupyter_bokeh's lab extension renders through `window.Bokeh` but does not ship BokehJS,
and bokeh's default would fetch it from cdn.bokeh.org. `setup()` puts the BokehJS of the installed
bokeh package into the page inline, once per kernel; every widget here calls it when created.

Errors in callbacks (an empty input, a bug) are shown in the widget, next to the control: in
JupyterLab an exception raised in a widget callback only reaches the log console, where nobody
looks. `AttnlabError`s show their one-line message; anything else also shows its traceback.

Every widget takes `lang="en"` ("es", "zh"): its labels, notes and errors come from the explorer's
catalogue (`attnlab.app.i18n`), and so do its figures' words (`attnlab.app.words`), so the notebook
and the web app say the same things the same way. The training timeline is in `replay.py`.
"""

from __future__ import annotations

import html
import numbers
import time
from pathlib import Path
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app import i18n
from attnlab.app.attribution_widget import AttributionBox
from attnlab.app.compare_widget import Compare, compare_models
from attnlab.app.notebook import (
    BokehPane,
    ErrorBox,
    HeadPicker,
    button,
    checkbox,
    checked_model,
    checked_text,
    checked_trace,
    example,
    plot,
    reporting,
    setup,
    trace_caption,
)
from attnlab.app.patching_widget import PatchingRow
from attnlab.app.replay import Timeline, replay
from attnlab.app.saliency_widget import SaliencyBox
from attnlab.app.words import figure_words
from attnlab.data.tokenizer import shown_characters, unknown_characters
from attnlab.decode.api import DEFAULTS
from attnlab.errors import AttnlabError, ConfigError
from attnlab.record.importance import trace_importance
from attnlab.record.lens import logit_lens
from attnlab.record.norms import norm_trace
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace
from attnlab.viz.table import STYLE

__all__ = ["Compare", "Explorer", "Timeline", "TraceView", "compare_models", "explore", "figure_words", "plot"]
__all__ += ["replay", "setup", "show"]
MAX_BEAM = 50  # the explorer's beam field goes up to this


# -- one trace ------------------------------------------------------------------------------------------
class TraceView(w.VBox):
    """Every head of one trace: the layers × heads grid (click a thumbnail to open it), the
    selected head's heatmap and its lines (bertviz's head view; or every head of its layer), and,
    on request, the mask that shaped the kind and the attention rollout up to the selected layer
    (`attnlab.record.rollout`)."""

    def __init__(self, trace: AttentionTrace | None = None, caption: bool = True, lang: str = i18n.DEFAULT) -> None:
        self.trace: AttentionTrace | None = None
        self.lang = i18n.checked(lang)
        self.picker = HeadPicker(self.redraw, lang)
        self.mask = checkbox(i18n.text("widgets.hatch", lang), True)
        self.scale = checkbox(i18n.text("widgets.scale", lang))
        self.show_mask = checkbox(i18n.text("widgets.show_mask", lang))
        self.show_rollout = checkbox(i18n.text("widgets.show_rollout", lang))
        self.every_head = checkbox(i18n.text("heads.lines_every", lang))  # the lines of the whole layer
        self.as_table = checkbox(i18n.text("widgets.tables", lang))  # (`viz.table`, as the explorer's tabs)
        self.table = w.HTML(layout=w.Layout(max_height="420px", overflow="auto"))
        for box in (self.mask, self.scale, self.show_mask, self.show_rollout, self.every_head, self.as_table):
            box.observe(lambda _change: self.redraw(), "value")
        self.caption = w.HTML(layout=w.Layout(display=None if caption else "none"))
        self.pattern = w.HTML()  # what the open head does on this sentence
        self._stats: list[dict] = []
        self.grid, self.head, self.lines = BokehPane(), BokehPane(), BokehPane()
        self.mask_figure, self.rollout = BokehPane(), BokehPane()
        self._panes = {"grid": self.grid, "head": self.head, "lines": self.lines}
        self._panes |= {"mask": self.mask_figure, "rollout": self.rollout}
        self.errors = ErrorBox(lang)
        # (wrapping: in Spanish the five boxes ran 45 px past a 1,280 px notebook)
        options = w.HBox(
            [self.mask, self.scale, self.show_mask, self.show_rollout, self.every_head, self.as_table],
            layout=w.Layout(flex_flow="row wrap"),
        )
        figures = w.HBox(list(self._panes.values()), layout=w.Layout(flex_flow="row wrap"))
        super().__init__([self.caption, self.picker, options, self.pattern, self.errors, figures, self.table])
        if trace is not None:
            self.set_trace(trace)

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        """The bokeh figures on show now, by role."""
        return {role: pane.figure for role, pane in self._panes.items()}

    def set_trace(self, trace: AttentionTrace | str | Path) -> None:
        """Show `trace` (or the .trace file at that path)."""
        trace = checked_trace(trace, "TraceView", self.lang)
        self.trace = trace
        self.picker.configure(trace)
        self.picker.layout.display = None
        self.caption.value = trace_caption(trace, self.lang)
        self._stats = head_stats(trace)
        self.redraw()

    def clear(self) -> None:
        """Show no trace (after a failed run: nothing of the previous sentence stays on show)."""
        self.trace, self._stats = None, []
        self.picker.trace = None  # (a selection from code then says there is no trace; it did nothing)
        self.caption.value = self.pattern.value = self.table.value = ""
        self.picker.layout.display = "none"
        for pane in self._panes.values():
            pane.update(None)

    def select(self, layer: int, head: int) -> None:
        """Open one head (what clicking its thumbnail in the grid does)."""
        with reporting(self.errors):
            self.picker.select(layer=layer, head=head)

    def redraw(self) -> None:
        if self.trace is None:
            return
        self.errors.clear()
        self.table.value = ""  # first: a table never stays beside another head's figures
        with reporting(self.errors):
            kind, layer, head = self.picker.value
            said = i18n.head_pattern_text(self._stats, kind, layer, head, self.lang)
            self.pattern.value = f"<span style='color:#555'>{html.escape(said)}</span>"
            vmax, mask, words = None if self.scale.value else 1.0, self.mask.value, figure_words(self.lang)
            chosen = {"selected": (layer, head), "on_select": self.select}
            self.grid.update(viz.grid(self.trace, kind, mask=mask, vmax=vmax, words=words, **chosen))
            self.head.update(viz.heatmap(self.trace, kind, layer, head, mask=mask, vmax=vmax, words=words))
            lines_head = None if self.every_head.value else head
            self.lines.update(viz.lines_figure(self.trace, kind, layer, lines_head, vmax=vmax, words=words))
            self.mask_figure.update(viz.mask_figure(self.trace, kind, words=words) if self.show_mask.value else None)
            if self.as_table.value:  # the open head's map (a map too long for one: the error box says so)
                self.table.value = (
                    f"<style>{STYLE}</style>{viz.weights_table(self.trace, kind, layer, head, mask=mask, words=words)}"
                )
            rolled = None
            try:  # a rollout refused (a trace of some layers) leaves none of another layer's shown
                rolled = viz.rollout_figure(self.trace, kind, layer, words=words) if self.show_rollout.value else None
            finally:
                self.rollout.update(rolled)
            if rolled is not None and self.as_table.value:  # and the rollout's under it
                self.table.value += viz.rollout_table(self.trace, kind, layer, words=words)


def show(
    trace: AttentionTrace | str | Path,
    kind: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    lang: str = i18n.DEFAULT,
) -> TraceView:
    """Explore one `AttentionTrace` (or a saved .trace file), optionally opening one head: the
    model's layer and head ids, a negative one counting from the model's last (-1: its top layer)."""
    view = TraceView(checked_trace(trace, "show", i18n.checked(lang)), lang=lang)
    if (kind, layer, head) != (None, None, None):
        view.picker.select(kind=kind, layer=layer, head=head)
    return view


# -- a model ---------------------------------------------------------------------------------------------
class Explorer(w.VBox):
    """Type a sentence, translate (or parse) it with the paper's beam search, read the beam's
    hypotheses, and open any head of any of them; boxes add the open hypothesis's logit lens, who
    wrote each of its pieces (`attribution`), which inputs each depends on (`saliency`) and every
    head's importance for it, and a changed version of the sentence, patched against it (`patch`),
    which heads and which layers at which positions carry the change."""

    def __init__(self, model: Any, text: str | None = None, beam: int | None = None, lang: str = i18n.DEFAULT) -> None:
        self.lang = i18n.checked(lang)
        self.model = model = checked_model(model, "Explorer", lang)  # a path too, as `explore` takes
        self.verb = i18n.text("page.parse" if model.task == "parse" else "page.translate", lang)
        self.text = w.Textarea(
            value=checked_text(text, lang) if text is not None else example(model),
            layout=w.Layout(width="95%", height="4.5em"),
        )
        if beam is None:
            beam = DEFAULTS.get(model.task, DEFAULTS["translate"])["beam"]
        elif isinstance(beam, bool) or not isinstance(beam, numbers.Integral) or not 1 <= beam <= MAX_BEAM:
            raise ConfigError(i18n.text("widgets.bad_beam", lang, most=MAX_BEAM, got=repr(beam)))
        size = w.Layout(width="150px")
        self.beam = w.BoundedIntText(
            value=int(beam), min=1, max=MAX_BEAM, description=i18n.text("widgets.beam", lang), layout=size
        )
        self.button = button(self.verb, "primary")
        self.button.on_click(lambda _button: self.run())
        self.status = w.HTML()
        self.output = w.HTML()
        self.tree = BokehPane()
        beams = i18n.text("widgets.hypotheses", lang)
        self.hypotheses = w.Select(description=beams, rows=4, layout=w.Layout(width="95%"))
        self.hypotheses.observe(self._hypothesis_chosen, "value")
        self.errors = ErrorBox(lang)
        self.weigh = checkbox(i18n.text("heads.weigh", lang))  # (`attnlab.record.norms`, as the explorer's Heads tab)
        self.weigh.observe(lambda _change: self.errors.act(self._show_heads), "value")
        self.view = TraceView(caption=False, lang=lang)
        self.show_lens = checkbox(i18n.text("widgets.show_lens", lang))
        self.show_lens.observe(lambda _change: self.errors.act(self._draw_lens), "value")
        self.lens = BokehPane()
        self.lens_table = w.HTML(layout=w.Layout(max_height="420px", overflow="auto"))  # with the maps' tables
        self.view.as_table.observe(lambda _change: self.errors.act(self._draw_lens), "value")
        self.attribution = AttributionBox(model, self.errors, lang)
        self.saliency = SaliencyBox(model, self.errors, lang)
        self.show_importance = checkbox(i18n.text("widgets.show_importance", lang))
        self.show_importance.observe(lambda _change: self.errors.act(self._draw_importance), "value")
        self.importance = BokehPane()
        self.patching_row = PatchingRow(model, self.errors, lang)
        row = self.patching_row  # (its parts keep the names they had here: `explore(...).changed`, ...)
        self.changed, self.direction, self.method = row.changed, row.direction, row.method
        self.patch_button, self.patched = row.button, row.patched
        self.patching, self.residual = row.patching, row.residual
        self.result: Any = None
        self._listing = False
        controls = w.HBox([self.button, self.beam, self.status])
        parts = [self.text, controls, self.errors, self.output, self.tree, self.hypotheses, self.weigh, self.view]
        readings = [self.show_lens, self.lens, self.lens_table, self.attribution, self.saliency]
        readings += [self.show_importance, self.importance]
        super().__init__([*parts, *readings, row])
        self.run()

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        extra = {"tree": self.tree.figure, "lens": self.lens.figure, "importance": self.importance.figure}
        extra |= self.patching_row.figures | self.attribution.figures | self.saliency.figures
        return {**self.view.figures, **extra}

    def run(self, text: str | None = None) -> Any:
        """Decode the text box (or `text`); returns the `attnlab.decode.api.Result`, or None on error."""
        if text is not None:
            self.text.value = checked_text(text, self.lang)
        self.errors.clear()
        self.button.disabled = True
        lang = self.lang
        working = i18n.text("widgets.parsing" if self.model.task == "parse" else "widgets.translating", lang)
        self.status.value = f"<i>{working}</i>"
        started = time.perf_counter()
        try:
            with reporting(self.errors):
                beam = int(self.beam.value)
                result = self.model.translate(
                    self.text.value, beam=beam, record=True, n_best=beam, record_hypotheses=True, truncate=True
                )
                seconds = time.perf_counter() - started
                self.result = result
                notes = [
                    i18n.text("widgets.seconds", lang, seconds=seconds),
                    i18n.text("widgets.pieces", lang, source=len(result.src_tokens), output=len(result.tokens)),
                ]
                if result.truncated:
                    notes.append(i18n.text("widgets.truncated", lang, most=self.model.config.max_len - 1))
                missing = unknown_characters(self.model.tokenizer, self.text.value[:5000])
                if missing:
                    notes.append(i18n.text("widgets.unknown", lang, characters=shown_characters(missing)))
                self.status.value = html.escape(" · ".join(notes))
                self._listing = True  # one redraw, below, not one per option change
                try:
                    ranked = enumerate(result.hypotheses)
                    self.hypotheses.options = [(f"{rank + 1}.  {h.score:+.3f}  {h.text}", rank) for rank, h in ranked]
                    self.hypotheses.value = 0
                finally:
                    self._listing = False
                self._show_hypothesis(0)
                return result
        finally:
            self.button.disabled = False
            if self.errors.message:
                self.status.value = ""
        self._clear()
        return None

    def _clear(self) -> None:
        """A failed run shows no output: the previous sentence's would read as this one's."""
        self.result = None
        self.output.value = ""
        self._listing = True
        try:
            self.hypotheses.options = []
        finally:
            self._listing = False
        self.tree.update(None)
        self.lens.update(None)
        self.attribution.set_trace(None)
        self.saliency.set_trace(None)
        self.importance.update(None)
        self.patching_row.set_trace(None)
        self.view.clear()

    def choose(self, rank: int) -> None:
        """Show the attention of the beam's `rank`-th hypothesis (0 = best)."""
        ranks = [value for _label, value in self.hypotheses.options]
        self.hypotheses.value = viz.pick(rank, ranks, "hypothesis", from_end=False)

    def _hypothesis_chosen(self, change: dict) -> None:
        if change["new"] is not None and self.result is not None and not self._listing:
            self.errors.act(lambda: self._show_hypothesis(change["new"]))

    def _show_hypothesis(self, rank: int) -> None:
        hyp, lang = self.result.hypotheses[rank], self.lang
        score = i18n.text("widgets.score", lang, score=hyp.score, logprob=hyp.logprob, count=len(hyp.tokens))
        which = i18n.text("widgets.hypothesis", lang, rank=rank + 1, count=len(self.result.hypotheses), score=score)
        self.output.value = (
            f'<div style="font-size:1.25em;margin:4px 0">{html.escape(hyp.text)}</div>'
            f'<div style="color:#666">{html.escape(which)}</div>'
        )
        title = i18n.text("widgets.tree", lang, rank=rank + 1)
        parse = self.model.task == "parse"
        self.tree.update(viz.tree_figure(hyp.text, title=title, words=figure_words(lang)) if parse else None)
        self._show_heads()
        self._draw_lens()
        self.attribution.set_trace(hyp.trace)
        self.saliency.set_trace(hyp.trace)
        self._draw_importance()
        self.patching_row.set_trace(hyp.trace)  # (what it showed read the hypothesis open before)

    def _show_heads(self) -> None:
        """The open hypothesis's heads, weighed by what each key writes while `weigh` is ticked."""
        rank = self.hypotheses.value
        if self.result is not None and rank is not None:
            trace = self.result.hypotheses[rank].trace
            self.view.set_trace(norm_trace(self.model, trace) if self.weigh.value else trace)

    def _draw_lens(self) -> None:
        """The open hypothesis's `attnlab.logit_lens` while its box is ticked; a table too with `view.as_table`."""
        words = figure_words(self.lang)
        self.lens_table.value = ""

        def figure_of(trace: AttentionTrace) -> LayoutDOM:
            lens = logit_lens(self.model, trace)
            try:  # (a lens too long for a table: one line in its place, and the figure drawn)
                table = viz.lens_table(lens, words=words) if self.view.as_table.value else ""
            except AttnlabError as error:
                table = f"<span style='color:#555'>{html.escape(str(error))}</span>"
            self.lens_table.value = f"<style>{STYLE}</style>{table}" if table else ""
            return viz.lens_figure(lens, words=words)

        self._draw_reading(self.show_lens, self.lens, figure_of)

    def _draw_importance(self) -> None:
        """Every head's importance for the open hypothesis (`attnlab.record.trace_importance`)."""
        words = figure_words(self.lang)
        self._draw_reading(
            self.show_importance,
            self.importance,
            lambda trace: viz.importance_figure(trace_importance(self.model, trace), words=words),
        )

    def patch(
        self, changed: str | None = None, direction: str | None = None, positions: Any = None, method: str | None = None
    ) -> Any:
        """Patch the open hypothesis against `changed` (or the box's): `PatchingRow.patch`."""
        return self.patching_row.patch(changed, direction, positions, method)

    def _draw_reading(self, box: w.Checkbox, pane: BokehPane, figure_of: Any) -> None:
        """What `figure_of(trace)` draws from the model's reading of the open hypothesis, in `pane`
        while `box` is ticked (each costs a pass through the model, so it is drawn only then)."""
        rank = self.hypotheses.value
        if not box.value or self.result is None or rank is None:
            pane.update(None)
            return
        with reporting(self.errors):
            pane.update(figure_of(self.result.hypotheses[rank].trace))


def explore(
    checkpoint_or_model: Any, text: str | None = None, beam: int | None = None, lang: str = i18n.DEFAULT
) -> Explorer:
    """The explorer in a notebook: a checkpoint directory or a model from `attnlab.load`, and
    optionally the first sentence; `lang`: "en", "es" or "zh"."""
    model = checked_model(checkpoint_or_model, "explore", i18n.checked(lang))
    return Explorer(model, text, beam, lang)
