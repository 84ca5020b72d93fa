"""The Compare tab: a second model -- another checkpoint from the picker, or this one with the
heads chosen in the Head ablation tab switched off -- decodes the same input; both outputs are
shown with a word diff, and the open kind / layer / head of each side by side with their
difference (`attnlab.decode.compare`, `attnlab.viz.compare_figures`); with its first box ticked,
the attention rollouts of both up to the open layer and their difference too
(`attnlab.viz.compare_rollouts`), with its second both logit lenses (`attnlab.record.lens`), and with
its third every head's importance in both (`attnlab.record.importance`), and with its fourth where
the change typed in the Head ablation tab lives in each (`attnlab.record.residual`: the restricted
model moves a changed word onto its neighbours, the global one keeps it in place), and with its fifth who wrote a chosen output piece in each
(`attnlab.record.logit_attribution`, in `explorer.compare_attribution`), and with its sixth both
models' circuits for the change typed in the Head ablation tab (in `explorer.compare_circuit`),
and with its seventh which inputs each output piece depends on in each, by its gradient (in
`explorer.compare_saliency`).
The second model's maps are recorded while it reads the first one's output, so that the two line
up cell by cell.

Models of different sizes compare (each shows the heads it has); a translator and a parser, or two
vocabularies, do not, and the tab says so in one line; that notice also says why a box's reading
was refused (no changed sentence, one that changes nothing), each line once. The tab decodes
when it is drawn after a new run (the page draws it only while it is open), when another second
model is chosen, and on its button; a new head selection only redraws the maps.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.checkpoints import open_model, same_directory
from attnlab.app.explorer.ablation import _heads as ablated_heads  # the ablation tab's labels, read back
from attnlab.app.explorer.compare_attribution import CompareAttribution
from attnlab.app.explorer.compare_circuit import CompareCircuit
from attnlab.app.explorer.compare_saliency import CompareSaliency
from attnlab.app.explorer.output import CSS, PROSE
from attnlab.app.explorer.patching import PatchingBox
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import sentences, task_name, text
from attnlab.app.patching_text import compared_residual
from attnlab.app.words import WeighedAlike, compared_lens_title
from attnlab.decode.compare import compare, mismatch
from attnlab.decode.deadline import time_limit
from attnlab.errors import AttnlabError
from attnlab.record.lens import logit_lens

log = logging.getLogger("attnlab.explorer")

LENS_FIGURES = ("compare-lens-first", "compare-lens-second")  # the figures' Bokeh names, which tests find
IMPORTANCE_FIGURES = ("compare-importance-first", "compare-importance-second")
PATCHING_FIGURES = ("compare-patching-first", "compare-patching-second")
NONE, ABLATED = "", "\0ablated"  # the picker's values besides checkpoint names (never empty, never hold NUL)


class CompareTab(pn.viewable.Viewer):
    """This model and a second one on the same input: both outputs, and the open head of each."""

    def __init__(
        self,
        store: Store,
        checkpoints: dict[str, str],
        ablated: Callable[[], list[str]] = list,
        patching: PatchingBox | None = None,
    ) -> None:
        """`checkpoints`: the page's picker ({name: server path}, read again at each draw, so
        that directories opened by path are offered too); `ablated`: the head labels chosen in
        the Head ablation tab; `patching`: its patching box, whose changed sentence (and how to
        patch it) the fourth box patches both models on, redrawn when it changes."""
        super().__init__()
        self.store, self.checkpoints, self.ablated = store, checkpoints, ablated
        self.changed: Callable[[], tuple[str, dict[str, str]]] = patching.asked if patching else lambda: ("", {})
        lang = self.lang
        self.second = pn.widgets.Select(
            label=text("compare.second", lang), options=self._options(), width=420, css_classes=["attn-compare-second"]
        )
        self.go = pn.widgets.Button(
            label=text("compare.go", lang), width=110, align="end", css_classes=["attn-compare-go"]
        )
        self.notice = pn.pane.Alert(
            "", alert_type="warning", visible=False, **PROSE, css_classes=["attn-compare-notice"]
        )
        self.outputs = pn.pane.HTML("", **PROSE, stylesheets=[CSS], css_classes=["attn-compare-outputs"])
        self.panes = [pn.pane.Bokeh(None, css_classes=[f"attn-compare-{role}"]) for role in ("first", "second", "diff")]
        self.rollouts = pn.widgets.Checkbox(label=text("compare.rollouts", lang), css_classes=["attn-compare-rollouts"])
        self.rollout_panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-rollout-{role}"]) for role in ("first", "second", "diff")
        ]
        self.lenses = pn.widgets.Checkbox(label=text("compare.lenses", lang), css_classes=["attn-compare-lenses"])
        self.lens_panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-lens-{role}"]) for role in ("first", "second")
        ]
        self.importances = pn.widgets.Checkbox(
            label=text("compare.importances", lang), css_classes=["attn-compare-importances"]
        )
        self.importance_panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-importance-{role}"]) for role in ("first", "second")
        ]
        self.patchings = pn.widgets.Checkbox(
            label=text("compare.patchings", lang), css_classes=["attn-compare-patchings"]
        )
        self.patching_panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-patching-{role}"]) for role in ("first", "second")
        ]
        self.attributions = CompareAttribution(store, say=self._said)
        self.circuits = CompareCircuit(store, self.changed, say=self._said)
        self.saliency = CompareSaliency(store, say=self._said)
        self.layout = pn.Column(
            pn.Row(self.second, self.go),
            self.notice,
            self.outputs,
            pn.FlexBox(*self.panes),
            self.rollouts,
            pn.FlexBox(*self.rollout_panes),
            self.lenses,
            pn.FlexBox(*self.lens_panes),
            self.importances,
            pn.FlexBox(*self.importance_panes),
            self.patchings,
            pn.FlexBox(*self.patching_panes),
            self.attributions,
            self.circuits,
            self.saliency,
        )
        self.comparison: Any = None  # attnlab.decode.compare.Comparison, or None
        self.second_model: Any = None  # the model that made its second side (for the lens, the importance)
        self.names = ("A", "B")
        self.refused = {"lens": "", "importance": "", "patching": ""}  # what each reading's box was refused
        self._key: tuple | None = None  # (run, second model, ablated heads) the comparison was made for
        self._say(text("compare.hint", lang), hint=True)
        self.second.param.watch(lambda _event: self.draw(), "value")
        self.rollouts.param.watch(lambda _event: self.draw(), "value")
        self.lenses.param.watch(lambda _event: self._draw_readings(), "value")
        self.importances.param.watch(lambda _event: self._draw_readings(), "value")
        self.patchings.param.watch(lambda _event: self._draw_readings(), "value")
        for asked in (patching.corrupted, patching.direction, patching.method) if patching else ():
            asked.param.watch(lambda _event: self._draw_readings(only_patching=True), "value")  # never stale
        for asked in (patching.corrupted, patching.direction) if patching else ():
            asked.param.watch(lambda _event: self.circuits.draw(), "value")
        self.go.on_click(lambda _event: self.draw(again=True))

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    @property
    def lang(self) -> str:
        """The page's language (the store's)."""
        return self.store.lang

    @property
    def title(self) -> str:
        return text("compare.tab", self.lang)

    # -- drawing ------------------------------------------------------------------------------------
    def draw(self, again: bool = False) -> None:
        """Compare on the store's last run (decoding again only when the run, the second model or
        its ablated heads changed, or `again`), then draw the open head of both."""
        self._sync_options()
        store, choice = self.store, self.second.value
        if store.result is None or store.model is None:
            return
        if not choice:
            self._clear(text("compare.hint", self.lang), hint=True)
            return
        labels = tuple(self.ablated()) if choice == ABLATED else ()
        key = (store.run, choice, labels)
        if again or key != self._key:
            self._key = key
            self._compare(choice, labels)
            self._draw_readings()  # the run's, not the open head's: drawn once per comparison
            self.attributions.compare(self._sides(), self.names)
            self.circuits.compare(self._sides(), self.names)
            self.saliency.compare(self._sides(), self.names)
        if self.comparison is not None:
            self._draw_maps()

    def _compare(self, choice: str, labels: tuple[str, ...]) -> None:
        store, lang = self.store, self.lang
        first_name = store.checkpoint_name
        if choice == ABLATED:
            if not labels:
                self._clear(text("compare.no_heads", lang))
                return
            second, second_name, heads_off = store.model, first_name, ablated_heads(list(labels))
            names = (text("compare.all_heads", lang), text("compare.heads_off", lang, count=len(labels)))
        else:
            path = self.checkpoints.get(choice)
            if path is None:  # not a picker entry (a crafted request): nothing to open
                self._clear(text("compare.hint", lang))
                return
            try:
                second = open_model(path)
            except AttnlabError as error:
                self._clear(text("compare.cannot_open", lang, name=choice, reason=store.explain(error, {path: choice})))
                return
            except Exception as error:  # a bug, but the session must survive it
                log.exception("opening %s to compare", path)
                self._clear(text("compare.internal", lang, error=type(error).__name__))
                return
            why = mismatch(store.model, second)
            if why:
                message = text(
                    "compare.other_task" if why == "task" else "compare.other_vocabulary",
                    lang,
                    first=first_name,
                    second=choice,
                    a=task_name(store.model.task, lang),
                    b=task_name(second.task, lang),
                )
                self._clear(message)
                return
            second_name, heads_off, names = choice, {}, ("A", "B")
        try:
            with time_limit(store.time_limit):  # the server's bound on one request, as for Translate
                self.comparison = compare(
                    store.model,
                    second,
                    store.result.source,
                    beam=store.beam_size,
                    heads_off=heads_off,
                    alpha=store.alpha_value,
                )
        except AttnlabError as error:
            names = {store.checkpoint: first_name} | ({} if choice == ABLATED else {self.checkpoints[choice]: choice})
            self._clear(store.explain(error, names))
            return
        except Exception as error:
            log.exception("comparing on %r", store.result.source[:80])
            self._clear(text("compare.internal", lang, error=type(error).__name__))
            return
        self.names, self.second_model = names, second
        self.notice.visible = False
        self.outputs.object = self._html(first_name, second_name)

    def _html(self, first_name: str, second_name: str) -> str:
        c, (a, b), lang = self.comparison, self.names, self.lang
        verdict = text("compare.same", lang) if c.same_output else text("compare.different", lang, first=a, second=b)
        # A and B, or the model with all heads and with some off: "the maps of 1 head off" said nothing
        read_on = text("compare.read_on_ablated" if c.heads_off else "compare.read_on", lang, first=a, second=b)
        return (
            f"<div class='attn-compare-result' data-run='{self.store.run}'>"
            f"<div class='attn-muted'>{html.escape(a)} · {html.escape(first_name)}</div>"
            f"<div class='attn-output attn-compare-first-text'>{html.escape(c.first.text)}</div>"
            f"<div class='attn-muted'>{html.escape(b)} · {html.escape(second_name)}</div>"
            f"<div class='attn-output attn-compare-second-text'>{viz.word_diff(c.first.text, c.second.text)}</div>"
            f"<div class='attn-muted'>{html.escape(sentences([verdict, read_on], lang))}</div></div>"
        )

    def _draw_maps(self) -> None:
        store, c = self.store, self.comparison
        figures = viz.compare_figures(  # in the page's language: titles, notes, the maps' hover
            c.first.trace,
            c.second_on_first.trace,
            store.kind,
            store.layer,
            store.head,
            names=self.names,
            mask=store.mask,
            vmax=store.vmax,
            words=store.words,
        )
        for pane, figure in zip(self.panes, figures, strict=True):
            pane.object = figure
        rollouts = [None] * 3
        if self.rollouts.value:  # the receptive field of each model, layer by layer up to the open one
            rollouts = viz.compare_rollouts(
                c.first.trace, c.second_on_first.trace, store.kind, store.layer, names=self.names, words=store.words
            )
        for pane, figure in zip(self.rollout_panes, rollouts, strict=True):
            pane.object = figure

    def _draw_readings(self, only_patching: bool = False) -> None:
        """What each model's reading of the same output shows (the second read teacher-forced on
        the first's, its heads off kept off), for each box that is ticked: the logit lenses,
        every head's importance (with heads off in the second, how the others' importance shifts),
        and the residual stream patched against the changed sentence (`only_patching`: that one,
        as the sentence changed). A reading a model refuses (no changed sentence, one that changes
        nothing) leaves its panes empty and says why in the tab's notice (`_say_refused`)."""
        c, store, lang = self.comparison, self.store, self.lang

        def lens(model: Any, trace: Any, name: str, figure_name: str) -> Any:
            title = compared_lens_title(name, self.names[0], lang)
            return viz.lens_figure(logit_lens(model, trace), title=title, name=figure_name, words=store.words)

        weighed = WeighedAlike(self._sides)

        def importance(model: Any, trace: Any, name: str, figure_name: str) -> Any:
            title = text("compare.importance_title", lang, name=name)
            found, high = weighed(IMPORTANCE_FIGURES.index(figure_name))
            return viz.importance_figure(found, title=title, name=figure_name, words=store.words, high=high)

        def patching(model: Any, trace: Any, name: str, figure_name: str) -> Any:
            return compared_residual(model, trace, *self.changed(), name, lang, store.words, name=figure_name)

        readings = (
            ("lens", self.lenses, self.lens_panes, lens, LENS_FIGURES),
            ("importance", self.importances, self.importance_panes, importance, IMPORTANCE_FIGURES),
            ("patching", self.patchings, self.patching_panes, patching, PATCHING_FIGURES),
        )[2 if only_patching else 0 :]
        if only_patching and not self.patchings.value:
            return
        for reading, box, panes, figure_of, names in readings:
            figures, self.refused[reading] = [None, None], ""
            if box.value and c is not None:
                try:
                    figures = viz.one_width(
                        [
                            figure_of(model, trace, name, figure_name)
                            for (model, trace), name, figure_name in zip(self._sides(), self.names, names, strict=True)
                        ]
                    )
                except AttnlabError as error:
                    figures, self.refused[reading] = [None, None], store.explain(error)
            for pane, figure in zip(panes, figures, strict=True):
                pane.object = figure
        self._say_refused()

    # -- helpers ------------------------------------------------------------------------------------
    def _sides(self) -> tuple[tuple[Any, Any], ...]:
        """((model, trace), (model, trace)): each model's reading of the first one's output; () with
        no comparison."""
        c = self.comparison
        if c is None:
            return ()
        return (self.store.model, c.first.trace), (self.second_model, c.second_on_first.trace)

    def _options(self) -> dict[str, str]:
        """{label: value}: none yet, this model with heads off, then every other checkpoint by name
        (the open one against itself would show two copies of one output and maps of zeros)."""
        lang, store = self.lang, self.store
        return {text("compare.pick", lang): NONE, text("compare.ablated", lang): ABLATED} | {
            name: name
            for name, path in self.checkpoints.items()
            if store.model is None or not same_directory(path, store.checkpoint)
        }

    def _sync_options(self) -> None:
        options = self._options()
        if options != self.second.options:
            self.second.options = options
            if self.second.value not in options.values():  # (the model chosen is the one open now)
                self.second.value = NONE

    def _said(self, _line: str) -> None:
        """The fifth, sixth or seventh box's refusal changed (`_line`, also its `refused`): the notice again."""
        self._say_refused()

    def _say_refused(self) -> None:
        """Every refusal that holds in the tab's boxes, in its one notice, each line once: the
        fourth and sixth boxes refuse the same changed sentence in the same words. None: no notice.
        With no comparison the notice says why there is none instead, and stays."""
        if self.comparison is None:
            return
        said = (*self.refused.values(), self.attributions.refused, self.circuits.refused, self.saliency.refused)
        self._say(" ".join(dict.fromkeys(line for line in said if line)))

    def _say(self, message: str, hint: bool = False) -> None:
        self.notice.object = f"<span class='attn-compare-notice-text'>{html.escape(message)}</span>"
        self.notice.alert_type = "info" if hint else "warning"
        self.notice.visible = bool(message)

    def _clear(self, message: str, hint: bool = False) -> None:
        """No comparison to show: say why in one line, and draw no stale maps."""
        self.comparison = None
        self.outputs.object = ""
        for pane in (*self.panes, *self.rollout_panes, *self.lens_panes, *self.importance_panes, *self.patching_panes):
            pane.object = None
        self.attributions.compare((), self.names)
        self.circuits.compare((), self.names)
        self.saliency.compare((), self.names)
        self._say(message, hint)
