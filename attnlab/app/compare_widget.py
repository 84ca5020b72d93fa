"""Two models in a notebook (`attnlab.widgets.compare_models`): both outputs with a word diff, and
the same kind / layer / head of each side by side with their difference, from the same
`attnlab.decode.compare` and `attnlab.viz.compare_figures` as the explorer's Compare tab; and, as
its boxes do, both attention rollouts up to the picked layer, both logit lenses, every head's
importance in both, where a change of the sentence lives in each (`patch`), who wrote a
chosen output piece in each (`attnlab.app.compare_attribution_widget`), both models' circuits
for the change (`attnlab.app.compare_circuit_widget`), and which inputs each output piece depends
on in each, by its gradient (`attnlab.app.compare_saliency_widget`).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app import i18n
from attnlab.app.compare_attribution_widget import CompareAttributionBox
from attnlab.app.compare_circuit_widget import CompareCircuitBox
from attnlab.app.compare_saliency_widget import CompareSaliencyBox
from attnlab.app.notebook import (
    BokehPane,
    ErrorBox,
    HeadPicker,
    button,
    checkbox,
    checked_model,
    checked_names,
    checked_text,
    example,
    reporting,
    said_in,
)
from attnlab.app.patching_text import compared_residual
from attnlab.app.words import WeighedAlike, compared_lens_title, figure_words
from attnlab.data.tokenizer import shown_characters, unknown_characters
from attnlab.decode.compare import compare
from attnlab.record.ablation import heads_off as checked_heads
from attnlab.record.lens import logit_lens


class Compare(w.VBox):
    """Two models (or one with heads switched off) on the same sentence: both outputs with a word
    diff, and the same kind / layer / head of each side by side with their difference (the
    second model read teacher-forced on the first one's output, so the maps line up)."""

    def __init__(
        self,
        first: Any,
        second: Any,
        text: str,
        heads_off: dict | None = None,
        names: tuple = ("A", "B"),
        lang: str = i18n.DEFAULT,
    ) -> None:
        self.lang = i18n.checked(lang)
        self.first, self.second = checked_model(first, "Compare", lang), checked_model(second, "Compare", lang)
        self.heads_off, self.names = heads_off or {}, checked_names(names, lang)
        self.text = w.Textarea(value=checked_text(text, lang), layout=w.Layout(width="95%", height="3.5em"))
        self.button = button(i18n.text("widgets.compare", lang), "primary")
        self.button.layout.align_self = "flex-start"  # as wide as its word, not the column (explore()'s is)
        self.button.on_click(lambda _button: self.run())
        self.output = w.HTML()
        self.picker = HeadPicker(lambda: self.errors.act(self.redraw), lang)
        self.panes = [BokehPane(), BokehPane(), BokehPane()]
        self.show_rollouts = checkbox(i18n.text("compare.rollouts", lang))
        self.rollout_panes = [BokehPane(), BokehPane(), BokehPane()]
        self.show_lenses = checkbox(i18n.text("compare.lenses", lang))
        self.lens_panes = [BokehPane(), BokehPane()]
        self.show_rollouts.observe(lambda _change: self.errors.act(self.redraw), "value")
        self.show_importances = checkbox(i18n.text("compare.importances", lang))
        self.importance_panes = [BokehPane(), BokehPane()]
        self.show_patchings = checkbox(i18n.text("widgets.compare_patchings", lang))
        self.changed = w.Text(  # Enter or leaving the box patches (typing each letter would)
            placeholder=i18n.text("widgets.patch_changed", lang), layout=w.Layout(width="95%"), continuous_update=False
        )
        self.changed.observe(lambda _change: self._patch_again(), "value")
        self.changed_hint = w.HTML()  # under the box, while a reading waits for its sentence
        self._running = False  # a new sentence is being compared: its emptied changed sentence draws nothing yet
        self.patching_panes, self.how = [BokehPane(), BokehPane()], {"direction": "denoise", "method": "activation"}
        for box in (self.show_lenses, self.show_importances, self.show_patchings):
            box.observe(lambda _change: self.errors.act(self._draw_readings), "value")
        self.errors = ErrorBox(lang)
        self.attributions = CompareAttributionBox(self.errors, self.lang)
        self.circuits = CompareCircuitBox(self.errors, self.lang, lambda: (self.changed.value.strip(), self.how))
        self.saliency = CompareSaliencyBox(self.errors, self.lang)
        for asked in (self.show_patchings, self.circuits.show, self.changed):
            asked.observe(lambda _change: self._hint(), "value")
        self.comparison: Any = None
        rows = [w.HBox(panes, layout=w.Layout(flex_flow="row wrap")) for panes in (self.panes, self.rollout_panes)]
        lenses, importances, patchings = (
            w.HBox(p, layout=w.Layout(flex_flow="row wrap"))
            for p in (self.lens_panes, self.importance_panes, self.patching_panes)
        )
        parts = [self.text, self.button, self.errors, self.output, self.picker, rows[0]]
        readings = [self.show_lenses, lenses, self.show_importances, importances]
        readings += [
            self.show_patchings,
            self.changed,
            self.changed_hint,
            patchings,
            self.attributions,
            self.circuits,
            self.saliency,
        ]
        super().__init__([*parts, self.show_rollouts, rows[1], *readings])
        self.run()

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        roles = ("first", "second", "difference")
        return {
            **{role: pane.figure for role, pane in zip(roles, self.panes, strict=True)},
            **{f"rollout_{role}": pane.figure for role, pane in zip(roles, self.rollout_panes, strict=True)},
            **{f"lens_{role}": pane.figure for role, pane in zip(roles[:2], self.lens_panes, strict=True)},
            **{f"importance_{role}": pane.figure for role, pane in zip(roles[:2], self.importance_panes, strict=True)},
            **{f"patching_{role}": pane.figure for role, pane in zip(roles[:2], self.patching_panes, strict=True)},
            **self.attributions.figures,
            **self.circuits.figures,
            **self.saliency.figures,
        }

    def run(self, text: str | None = None) -> Any:
        """Decode with both models; returns the `attnlab.decode.compare.Comparison`, or None on error."""
        if text is not None:
            self.text.value = checked_text(text, self.lang)
        if self.comparison is not None and self.comparison.text != self.text.value:
            self._running = True  # (the emptied box patches nothing)
            self.changed.value = ""  # a change typed for the last sentence is no change of this one
            self._running = False
        self.errors.clear()
        with reporting(self.errors):
            self.comparison = compare(self.first, self.second, self.text.value, heads_off=self.heads_off)
            c, (a, b), lang = self.comparison, self.names, self.lang
            verdict = i18n.text("widgets.same" if c.same_output else "widgets.different", lang)
            notes = [
                i18n.text(  # (with heads off: one model read two ways, not two models)
                    "widgets.read_on_ablated" if self.heads_off else "widgets.read_on",
                    lang,
                    verdict=verdict,
                    first=a,
                    second=b,
                )
            ]
            off = _heads_named(self.heads_off, lang)
            if off:
                notes.append(i18n.text("widgets.which_off", lang, name=b, count=len(off), heads=i18n.listed(off, lang)))
            elif self.second is self.first:
                notes.append(i18n.text("widgets.same_model", lang, first=a, second=b))
            missing = unknown_characters(self.first.tokenizer, self.text.value[:5000])  # as explore() notes
            if missing:
                notes.append(i18n.text("widgets.unknown", lang, characters=shown_characters(missing)))
            self.output.value = (
                f"<div><b>{html.escape(a)}</b>: {html.escape(c.first.text)}</div>"
                f"<div><b>{html.escape(b)}</b>: {viz.word_diff(c.first.text, c.second.text)}</div>"
                + "".join(f"<div style='color:#666'>{html.escape(note)}</div>" for note in notes)
            )
            self.picker.configure(c.first.trace)
            self.picker.layout.display = None
            self.redraw()
            self._draw_readings()
            sides = ((self.first, c.first.trace), (self.second, c.second_on_first.trace))
            self.attributions.compare(sides, self.names)
            self.circuits.compare(sides, self.names)
            self.saliency.compare(sides, self.names)
            return self.comparison
        # a failed run shows no output: the previous sentence's would read as this one's
        self.comparison, self.output.value, self.picker.layout.display = None, "", "none"
        for pane in (*self.panes, *self.rollout_panes, *self.lens_panes, *self.importance_panes, *self.patching_panes):
            pane.update(None)
        self.attributions.compare((), self.names)
        self.circuits.compare((), self.names)
        self.saliency.compare((), self.names)
        return None

    def patch(self, changed: str, direction: str = "denoise", method: str = "activation") -> None:
        """Patch both models' residual stream against `changed` (the sentence with a change), in
        `direction`, measured or estimated (`method`), and show both grids (ticks the box); both
        circuits too while their box is ticked."""
        self.how, changed = {"direction": direction, "method": method}, checked_text(changed, self.lang)
        if self.changed.value == changed:
            self._patch_again()
        self.changed.value = changed  # (another sentence: its observer patches)
        self.show_patchings.value = True

    def _hint(self) -> None:
        """Ask for the changed sentence while a box that needs it is ticked and it is empty (a red
        error for ticking a box sent the reader to the explorer's Head ablation tab)."""
        waiting = (self.show_patchings.value or self.circuits.show.value) and not self.changed.value.strip()
        hint = i18n.text("widgets.changed_hint", self.lang) if waiting else ""
        self.changed_hint.value = f"<span style='color:#666'>{html.escape(hint)}</span>" if hint else ""

    def _patch_again(self) -> None:
        """The changed sentence as the box holds it now, patched (grids while ticked, circuits)."""
        if self._running:
            return
        self.errors.clear()
        if self.show_patchings.value:
            self._draw_readings()
        self.circuits.draw()

    def redraw(self) -> None:
        if self.comparison is None:
            return
        with reporting(self.errors):
            c, (kind, layer, head) = self.comparison, self.picker.value
            traces, words = (c.first.trace, c.second_on_first.trace), figure_words(self.lang)
            figures = viz.compare_figures(*traces, kind, layer, head, self.names, words=words)
            rollouts = [None] * 3
            if self.show_rollouts.value:  # each model's flow up to the picked layer, and the difference
                rollouts = viz.compare_rollouts(*traces, kind, layer, self.names, words=words)
            for pane, figure in zip((*self.panes, *self.rollout_panes), [*figures, *rollouts], strict=True):
                pane.update(figure)

    def _draw_readings(self) -> None:
        """Each model's logit lens, every head's importance, and its residual stream patched against
        the changed sentence, on the same output while their boxes are ticked (they depend on the
        comparison only, not on the picked head)."""
        c, sides = self.comparison, ((self.first, "first"), (self.second, "second_on_first"))
        lang, words = self.lang, figure_words(self.lang)

        def lens(model: Any, trace: Any, name: str) -> Any:
            title = compared_lens_title(name, self.names[0], lang)
            return viz.lens_figure(logit_lens(model, trace), title=title, words=words)

        weighed = WeighedAlike(lambda: [(model, getattr(c, side).trace) for model, side in sides])

        def importance(model: Any, trace: Any, name: str) -> Any:
            title = i18n.text("compare.importance_title", lang, name=name)
            found, high = weighed(self.names.index(name))
            return viz.importance_figure(found, title=title, words=words, high=high)

        def patching(model: Any, trace: Any, name: str) -> Any:
            changed = self.changed.value.strip()  # (none yet: nothing drawn, the hint asks for it)
            return compared_residual(model, trace, changed, self.how, name, lang, words) if changed else None

        readings = (
            (self.show_lenses, self.lens_panes, lens),
            (self.show_importances, self.importance_panes, importance),
            (self.show_patchings, self.patching_panes, patching),
        )
        for box, panes, figure_of in readings:
            for pane in panes:
                pane.update(None)
            with reporting(self.errors):  # (a reading one model refuses leaves the others drawn)
                figures = [None, None]
                if box.value and c is not None:
                    figures = [
                        figure_of(model, getattr(c, side).trace, name)
                        for (model, side), name in zip(sides, self.names, strict=True)
                    ]
                for pane, figure in zip(panes, viz.one_width(figures), strict=True):
                    pane.update(figure)


def compare_models(
    first: Any,
    second: Any | None = None,
    text: str | None = None,
    heads_off: dict | None = None,
    lang: str = i18n.DEFAULT,
) -> Compare:
    """Two checkpoints (or models) on the same sentence (by default the one the first opens on);
    with no second model, the first one with `heads_off` ({(kind, layer): [head, ...]}) switched off."""
    first = checked_model(first, "compare_models", i18n.checked(lang))
    text = example(first) if text is None else text
    second = first if second is None else checked_model(second, "compare_models", lang)
    with said_in(lang):  # one line for a malformed dict, before it is named
        heads_off = checked_heads(second.config, heads_off or {})
    off = len(_heads_named(heads_off, lang))
    ablated = (i18n.text("widgets.all_heads", lang), i18n.text("widgets.heads_off", lang))
    names = ablated if second is first and off else ("A", "B")
    return Compare(first, second, text, heads_off, names, lang)


def _heads_named(heads_off: dict, lang: str) -> list[str]:
    """The heads of {(kind, layer): [head, ...]} as the explorer names them ("encoder L0 H1");
    anything else names none (`compare` refuses it in one line)."""
    if not isinstance(heads_off, dict):
        return []
    return [
        i18n.text("head.short", lang, kind=i18n.kind_name(kind, lang), layer=layer, head=head)
        for (kind, layer), heads in heads_off.items()
        for head in heads
    ]
