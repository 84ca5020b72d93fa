"""attnlab explorer: type a sentence, read the translation (or parse tree), open every head.

    panel serve apps/explorer.py [--args --checkpoint DIR ...]      (or: attnlab explore)

Structure (Panel's recommended split): a `Store` per browser session holds the state (the
loaded checkpoint, the input, the decoding settings, the current result and its
`AttentionTrace`, the selected kind/layer/head); the `Explorer` views only read from it and
draw with `attnlab.viz`, the same functions the notebook widgets use. Models are loaded once per
server and shared read-only by all sessions (`attnlab.explore.open_model`). Everything (bokeh,
Panel) is served by this server: no CDN, it works offline.
"""

from __future__ import annotations

import argparse
import difflib
import html
import io
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import panel as pn
import param

from attnlab import explore, viz
from attnlab.errors import AttnlabError
from attnlab.stats import head_stats
from attnlab.trace import AttentionTrace

pn.extension(notifications=False)
log = logging.getLogger("attnlab.explorer")

EXAMPLES = {
    "translate": "A little girl in a pink dress is climbing into a wooden playhouse.",
    "parse": "The old man saw the dog with a telescope .",
}
CSS = """
.attn-output { font-size: 1.35em; line-height: 1.4; margin: 4px 0 8px 0; overflow-wrap: anywhere; }
table.attn-hyps td:last-child { overflow-wrap: anywhere; }
table.attn-hyps td { white-space: nowrap; } table.attn-hyps td:last-child { white-space: normal; }
.attn-muted { color: #666; font-size: 0.9em; }
table.attn-hyps { border-collapse: collapse; font-size: 0.9em; }
table.attn-hyps td, table.attn-hyps th { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
del { background: #fdd; } ins { background: #dfd; text-decoration: none; }
"""


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

    # -- checkpoint -------------------------------------------------------------------------------
    def open(self, path: str) -> bool:
        """Load a checkpoint (or run) directory; on failure keep the previous model and say why."""
        try:
            model = explore.open_model(path)
        except AttnlabError as error:
            self.error = _sentence(str(error))
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
            beam = 1 if self.greedy else int(self.beam)
            result = model.translate(
                self.text, beam=beam, alpha=float(self.alpha), record=True, n_best=beam, truncate=True
            )
            decoded = time.perf_counter()
            scored = None
            if self.reference.strip():
                scored = model.score(self.text, self.reference, record=True, truncate=True)
        except AttnlabError as error:
            self.error = _sentence(str(error))
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
        missing = explore.unknown_characters(model, self.text[:5000])
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


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


class Explorer(pn.viewable.Viewer):
    """The views: inputs on the left, output and attention on the right."""

    def __init__(self, checkpoints: dict[str, str], **params: Any) -> None:
        super().__init__(**params)
        self.store = store = Store()
        self.checkpoints = dict(checkpoints)
        self._probe_cache: dict[str, AttentionTrace] = {}
        self._stale: set[str] = set()
        self._opening = False

        # inputs
        self.checkpoint_select = pn.widgets.Select(
            label="Checkpoint", options=list(self.checkpoints), width=320, css_classes=["attn-checkpoint"]
        )
        self.path_input = pn.widgets.TextInput(
            css_classes=["attn-path"], label="…or open a directory", placeholder="/path/to/checkpoint or run", width=240
        )
        self.open_button = pn.widgets.Button(label="Open", width=70, align="end")
        self.model_info = pn.pane.HTML("", width=320, css_classes=["attn-muted"])
        self.text_input = pn.widgets.TextAreaInput(
            css_classes=["attn-source"], label="Source text", height=110, width=320, max_length=200_000
        )
        self.reference_input = pn.widgets.TextAreaInput(
            css_classes=["attn-reference"],
            label="Reference (optional; its teacher-forced attention is shown)",
            height=60,
            width=320,
            max_length=200_000,
        )
        self.mode = pn.widgets.RadioButtonGroup(
            label="decoding", options=["beam", "greedy"], value="beam", width=130, align="end"
        )
        self.beam_input = pn.widgets.IntInput.from_param(store.param.beam, label="beam size", width=75)
        self.alpha_input = pn.widgets.FloatInput.from_param(store.param.alpha, label="α", step=0.1, width=75)
        self.go = pn.widgets.Button(label="Translate", color="primary", width=320, css_classes=["attn-go"])
        self.error = pn.pane.Alert("", alert_type="danger", visible=False, width=320, css_classes=["attn-error"])
        self.notice = pn.pane.Alert("", alert_type="warning", visible=False, width=320, css_classes=["attn-notice"])
        self.status = pn.pane.HTML("", css_classes=["attn-status"], width=600)

        # selection
        self.kind_select = pn.widgets.RadioButtonGroup.from_param(store.param.kind, label="kind", width=270)
        self.layer_select = pn.widgets.Select.from_param(
            store.param.layer, label="layer", width=80, css_classes=["attn-layer"]
        )
        self.head_select = pn.widgets.Select.from_param(
            store.param.head, label="head", width=80, css_classes=["attn-head-select"]
        )
        self.mask_toggle = pn.widgets.Checkbox.from_param(
            store.param.mask, label="mask overlay", align="end", css_classes=["attn-mask-toggle"]
        )
        self.scale_toggle = pn.widgets.Checkbox.from_param(
            store.param.scale_to_max, label="scale to max", align="end", css_classes=["attn-scale-toggle"]
        )

        # views
        self.output = pn.pane.HTML("", width=900, css_classes=["attn-output-pane"], stylesheets=[CSS])
        self.tree = pn.pane.Bokeh(None)
        self.tree_box = pn.Column(self.tree, visible=False)  # (the Bokeh pane syncs its own `visible` from the figure)
        self.head_view = pn.pane.Bokeh(None, css_classes=["attn-head"])
        self.head_caption = pn.pane.HTML("", css_classes=["attn-head-caption", "attn-muted"])
        self.grid_view = pn.pane.Bokeh(None, css_classes=["attn-grid"])
        self.mask_view = pn.pane.Bokeh(None, css_classes=["attn-mask"])
        self.query_select = pn.widgets.Select.from_param(store.param.query, label="query position (Eq. 1)", width=260)
        self.eq1_view = pn.pane.Bokeh(None, css_classes=["attn-eq1"])
        self.stats_x = pn.widgets.Select(label="x", options=list(viz.STAT_COLUMNS), value="entropy", width=110)
        self.stats_y = pn.widgets.Select(label="y", options=list(viz.STAT_COLUMNS), value="distance", width=110)
        self.stats_view = pn.Row(css_classes=["attn-stats"])
        self.timeline_note = pn.pane.HTML("", css_classes=["attn-muted"])
        self.timeline_step = pn.widgets.DiscreteSlider(label="training step", options=[0], width=420, visible=False)
        self.timeline_probe = pn.widgets.Select(label="probe sentence", options={}, width=420, visible=False)
        self.timeline_view = pn.Column(css_classes=["attn-timeline"])
        self.ablate_choice = pn.widgets.MultiChoice(label="heads to switch off", options=[], width=520)
        self.ablate_add = pn.widgets.Button(label="add the open head", width=150, align="end")
        self.ablate_go = pn.widgets.Button(label="Re-decode without them", color="warning", width=200, align="end")
        self.ablate_view = pn.Column(css_classes=["attn-ablation"])

        # export
        self.export_png = pn.widgets.FileDownload(
            callback=self._png, filename="head.png", label="PNG", color="light", width=90, disabled=True
        )
        self.export_svg = pn.widgets.FileDownload(
            callback=self._svg, filename="head.svg", label="SVG", color="light", width=90, disabled=True
        )
        self.export_trace = pn.widgets.FileDownload(
            callback=self._trace_file,
            filename="attention.trace",
            label="trace",
            color="light",
            width=90,
            disabled=True,
        )
        self.export_html = pn.widgets.FileDownload(
            callback=self._html,
            filename="attention.html",
            label="HTML page",
            color="light",
            width=110,
            disabled=True,
        )

        self.tabs = pn.Tabs(
            ("Heads", pn.Column(self.head_caption, pn.FlexBox(self.grid_view, self.head_view))),
            ("Masks & Eq. (1)", pn.Column(pn.Row(self.mask_view, pn.Column(self.query_select, self.eq1_view)))),
            ("Heads dashboard", pn.Column(pn.Row(self.stats_x, self.stats_y), self.stats_view)),
            (
                "Training timeline",
                pn.Column(self.timeline_note, self.timeline_step, self.timeline_probe, self.timeline_view),
            ),
            ("Head ablation", pn.Column(pn.Row(self.ablate_choice, self.ablate_add, self.ablate_go), self.ablate_view)),
            dynamic=False,
        )
        self.layout = pn.Row(
            pn.Column(
                pn.pane.HTML("<h2 style='margin:4px 0'>attnlab explorer</h2>"),
                self.checkpoint_select,
                pn.Row(self.path_input, self.open_button),
                self.model_info,
                self.text_input,
                self.reference_input,
                pn.Row(self.mode, self.beam_input, self.alpha_input),
                self.go,
                self.error,
                self.notice,
                width=350,
            ),
            pn.Column(
                self.status,
                self.output,
                self.tree_box,
                pn.Row(self.kind_select, self.layer_select, self.head_select, self.mask_toggle, self.scale_toggle),
                pn.Row(
                    pn.pane.HTML("<b>Export</b>", align="center"),
                    self.export_png,
                    self.export_svg,
                    self.export_trace,
                    self.export_html,
                ),
                self.tabs,
            ),
        )

        # wiring
        for box in (self.text_input, self.reference_input):  # code that sets `value` must win over stale typing
            box.param.watch(lambda event: setattr(event.obj, "value_input", event.new), "value")
        self.go.on_click(lambda _event: self.translate())
        self.open_button.on_click(lambda _event: self.open(self.path_input.value_input or self.path_input.value))
        self.checkpoint_select.param.watch(lambda event: self.open(self.checkpoints[event.new]), "value")
        self.mode.param.watch(lambda event: store.param.update(greedy=event.new == "greedy"), "value")
        store.param.watch(self._on_selection, ["kind", "layer", "head", "mask", "scale_to_max"])
        store.param.watch(lambda _event: self._refresh(["eq1"]), "query")
        store.param.watch(self._on_error, ["error", "notices"])
        self.tabs.param.watch(lambda _event: self._refresh_stale(), "active")
        self.stats_x.param.watch(lambda _event: self._refresh(["stats"]), "value")
        self.stats_y.param.watch(lambda _event: self._refresh(["stats"]), "value")
        self.timeline_step.param.watch(lambda _event: self._refresh(["timeline"]), "value")
        self.timeline_probe.param.watch(lambda _event: self._refresh(["timeline"]), "value")
        self.ablate_add.on_click(lambda _event: self._add_open_head())
        self.ablate_go.on_click(lambda _event: self._ablate())

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    # -- actions ------------------------------------------------------------------------------------
    def open(self, path: str) -> None:
        """Load a checkpoint and, when it is another model than before, decode the text with it."""
        path = (path or "").strip()
        if self._opening:
            return
        if not path:
            self.store.error = "Give a directory to open."
            return
        previous = self.store.model
        if not self.store.open(path):
            current = next((n for n, p in self.checkpoints.items() if previous and p == self.store.checkpoint), None)
            if current is not None:  # the picker shows the model that is really loaded
                self._opening = True
                try:
                    self.checkpoint_select.value = current
                finally:
                    self._opening = False
            return
        model = self.store.model
        name = next((n for n, p in self.checkpoints.items() if p == path), None)
        self._opening = True
        try:
            if name is None:  # opened by path: add it to the picker
                name = Path(path).name or path
                self.checkpoints[name] = path
                self.checkpoint_select.options = list(self.checkpoints)
            self.checkpoint_select.value = name
        finally:
            self._opening = False
        config = model.config
        self.model_info.object = (
            f"{html.escape(str(model.path))}<br>task: <b>{model.task}</b> · {config.n_layers} layers · "
            f"{config.n_heads} heads · d_model {config.d_model} · vocab {config.vocab_size}"
        )
        self.go.label = "Parse" if model.task == "parse" else "Translate"
        self.mode.value = "beam"
        if previous is not None and previous.task != model.task:
            self.reference_input.value = ""  # a reference translation is no reference tree
        if _typed(self.text_input).strip() in ("", *EXAMPLES.values()):
            self.text_input.value = self.text_input.value_input = EXAMPLES.get(model.task, EXAMPLES["translate"])
        self._setup_timeline()
        self.error.visible = False
        if model is not previous:
            self.translate()

    def translate(self) -> None:
        store = self.store
        text, reference = _typed(self.text_input), _typed(self.reference_input)
        started = time.perf_counter()
        store.param.update(text=text or "", reference=reference or "")
        self.go.loading = True
        try:
            if not store.submit():
                self.status.object = (
                    f"<span class='attn-run attn-muted'>run {store.run} · last input not decoded</span>"
                )
                return
            self._update_after_run()
        finally:
            self.go.loading = False
        self._bokeh_edit(self._set_status, started)  # after the figure edits that are queued

    def _set_status(self, started: float) -> None:
        store = self.store
        views_ms = 1000 * (time.perf_counter() - started)
        store.timing = dict(store.timing, views_ms=views_ms)
        self.status.object = (
            f"<span class='attn-run attn-muted' data-run='{store.run}'>run {store.run} · decoded in "
            f"{store.timing['decode_ms']:.0f} ms · all views in {views_ms:.0f} ms</span>"
        )

    def _update_after_run(self) -> None:
        store = self.store
        trace = store.trace
        self.output.object = self._output_html()
        if store.model.task == "parse":
            try:
                self.tree.object = viz.tree_figure((store.scored or store.result).text)
                self.tree_box.visible = True
            except AttnlabError:
                self.tree_box.visible = False
        else:
            self.tree_box.visible = False
        self.ablate_choice.options = [
            f"{kind} L{layer} H{head}"
            for kind in trace.kinds
            for layer in trace.layers[kind]
            for head in range(trace.n_heads)
        ]
        self.ablate_choice.value = [v for v in self.ablate_choice.value if v in self.ablate_choice.options]
        self.ablate_view.objects = []
        for button in (self.export_png, self.export_svg, self.export_trace, self.export_html):
            button.disabled = False
        self._set_filenames()
        self._refresh(["head", "grid", "mask", "eq1", "stats", "timeline"])

    def _on_selection(self, *_events: Any) -> None:
        if self.store.trace is not None:
            self._set_filenames()
            self._refresh(["head", "grid", "mask", "eq1", "timeline"])

    def _on_error(self, *_events: Any) -> None:
        self.error.object = f"<span class='attn-error-text'>{html.escape(self.store.error)}</span>"
        self.error.visible = bool(self.store.error)
        notices = "<br>".join(html.escape(n) for n in self.store.notices)
        self.notice.object = f"<span class='attn-notice-text'>{notices}</span>"
        self.notice.visible = bool(self.store.notices)

    # -- refreshing views ---------------------------------------------------------------------------
    TAB_OF = {"head": 0, "grid": 0, "mask": 1, "eq1": 1, "stats": 2, "timeline": 3}

    def _refresh(self, names: list[str]) -> None:
        """Redraw the named views on the visible tab now, and the others when their tab opens."""
        if self.store.trace is None:
            return
        for name in names:
            if self.TAB_OF[name] == self.tabs.active:
                self._draw(name)
                self._stale.discard(name)
            else:
                self._stale.add(name)

    def _refresh_stale(self) -> None:
        visible = [name for name in self._stale if self.TAB_OF[name] == self.tabs.active]
        self._stale.difference_update(visible)
        for name in visible:
            self._draw(name)

    def _draw(self, name: str) -> None:
        store, trace = self.store, self.store.trace
        vmax = None if store.scale_to_max else 1.0
        try:
            if name == "head":  # the head and the grid are updated in place: only new data travels
                self._bokeh_edit(self._show_head, trace, vmax)
            elif name == "grid":
                options = {"selected": (store.layer, store.head), "mask": store.mask, "vmax": vmax}
                if self.grid_view.object is None:
                    self.grid_view.object = viz.grid(trace, store.kind, on_select=self._picked, **options)
                else:
                    self._bokeh_edit(viz.update_grid, self.grid_view.object, trace, store.kind, **options)
            elif name == "mask":
                self.mask_view.object = viz.mask_figure(trace, store.kind)
            elif name == "eq1":
                q_labels, k_labels = trace.labels(store.kind)
                self.query_select.options = {f"{i}: {t}": i for i, t in enumerate(q_labels)}
                parts = explore.attention_parts(store.model, trace, store.kind, store.layer, store.head)
                query = min(store.query, len(q_labels) - 1)
                title = f"{store.kind} L{store.layer} H{store.head}"
                self.eq1_view.object = viz.computation_figure(parts, query, q_labels, k_labels, title=title)
            elif name == "stats":
                self._draw_stats()
            elif name == "timeline":
                self._draw_timeline()
        except AttnlabError as error:
            store.error = _sentence(str(error))

    def _show_head(self, trace: AttentionTrace, vmax: float | None) -> None:
        store = self.store
        selection = (trace, store.kind, store.layer, store.head)
        if self.head_view.object is None:
            self.head_view.object = viz.heatmap(*selection, mask=store.mask, vmax=vmax)
        else:
            viz.update_heatmap(self.head_view.object, *selection, mask=store.mask, vmax=vmax)
        q_len, k_len = trace.attention(store.kind, store.layer).shape[1:]
        self.head_caption.object = (
            f"<span class='attn-caption'>showing {store.kind} · layer {store.layer} · head {store.head} · "
            f"{q_len}×{k_len} · mask overlay {'on' if store.mask else 'off'} · colours "
            f"{'0..max' if store.scale_to_max else '0..1'}</span>"
        )

    def _bokeh_edit(self, edit: Any, *args: Any, **kwargs: Any) -> None:
        """Change bokeh models directly (in place), in a next-tick callback when in a server session:
        there bokeh holds the document lock and sends the changes itself, in order."""
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(lambda: edit(*args, **kwargs))
        else:
            edit(*args, **kwargs)

    def _picked(self, layer: int, head: int) -> None:
        self.store.select(layer=layer, head=head)

    def _draw_stats(self) -> None:
        source = viz.stats_source(self.store.stats)

        def selected(_attr: str, _old: list[int], new: list[int]) -> None:
            if new:
                row = self.store.stats[new[0]]
                self.store.select(row["kind"], row["layer"], row["head"])

        source.selected.on_change("indices", selected)
        self.stats_view.objects = [
            pn.pane.Bokeh(viz.stats_table(source)),
            pn.pane.Bokeh(viz.stats_scatter(source, self.stats_x.value, self.stats_y.value)),
        ]

    # -- training timeline --------------------------------------------------------------------------
    def _setup_timeline(self) -> None:
        snapshots = explore.probe_snapshots(self.store.checkpoint)
        self._snapshots = {step: files for step, files in snapshots}
        if not snapshots:
            self.timeline_note.object = (
                "This checkpoint has no probe traces (a training run records them at each checkpoint in "
                "<code>probes/step_N/</code>; <code>attnlab train --probes K</code>)."
            )
            self.timeline_step.visible = self.timeline_probe.visible = False
            self.timeline_view.objects = []
            return
        steps = [step for step, _ in snapshots]
        self.timeline_note.object = (
            f"{len(steps)} snapshots (steps {steps[0]:,}–{steps[-1]:,}); the differences are to step {steps[-1]:,}."
        )
        self.timeline_step.options = steps
        self.timeline_step.value = steps[0]
        self.timeline_probe.options = {
            f"{i}: {self._probe(path).meta.get('text', path.stem)[:60]}": i for i, path in enumerate(snapshots[-1][1])
        }
        self.timeline_step.visible = self.timeline_probe.visible = True

    def _probe(self, path: Path) -> AttentionTrace:
        key = str(path)
        if key not in self._probe_cache:
            self._probe_cache[key] = AttentionTrace.load(path)
        return self._probe_cache[key]

    def _draw_timeline(self) -> None:
        if not getattr(self, "_snapshots", None):
            return
        store = self.store
        index = self.timeline_probe.value or 0
        steps = [s for s in sorted(self._snapshots) if index < len(self._snapshots[s])]  # probe `index` recorded
        step = self.timeline_step.value if self.timeline_step.value in steps else steps[0]
        now = self._probe(self._snapshots[step][index])
        final = self._probe(self._snapshots[steps[-1]][index])
        kind = store.kind if store.kind in now.kinds else now.kinds[0]
        layer = store.layer if store.layer in now.layers[kind] else now.layers[kind][-1]
        head = min(store.head, now.n_heads - 1)
        entropy = {}  # (step, head) -> mean entropy of that head in the chosen kind and layer
        for s in steps:
            for row in head_stats(self._probe(self._snapshots[s][index])):
                if (row["kind"], row["layer"]) == (kind, layer):
                    entropy[(s, row["head"])] = row["entropy"]
        curves = {f"head {h}": [entropy[(s, h)] for s in steps] for h in range(now.n_heads)}
        self.timeline_view.objects = [
            pn.pane.HTML(f"<span class='attn-muted'>probe: {html.escape(str(now.meta.get('text', '')))}</span>"),
            pn.Row(
                pn.pane.Bokeh(
                    viz.heatmap(
                        now,
                        kind,
                        layer,
                        head,
                        mask=store.mask,
                        title=f"step {step:,} · {kind} L{layer} H{head}",
                        name="timeline-heatmap",
                        budget=380,
                    )
                ),
                pn.pane.Bokeh(viz.diff_figure(now, final, kind, layer, head, budget=380)),
            ),
            pn.pane.Bokeh(viz.timeline_curve(steps, curves, current=step, stat=f"entropy ({kind} layer {layer})")),
        ]

    # -- ablation -----------------------------------------------------------------------------------
    def _add_open_head(self) -> None:
        label = f"{self.store.kind} L{self.store.layer} H{self.store.head}"
        if label not in self.ablate_choice.value:
            self.ablate_choice.value = [*self.ablate_choice.value, label]

    def _ablate(self) -> None:
        store = self.store
        if store.trace is None or not self.ablate_choice.value:
            store.error = "Choose heads to switch off first."
            return
        heads: dict[tuple[str, int], list[int]] = {}
        for label in self.ablate_choice.value:
            kind, layer, head = label.split()
            heads.setdefault((kind, int(layer[1:])), []).append(int(head[1:]))
        try:
            beam = 1 if store.greedy else int(store.beam)
            effect = explore.ablation(store.model, store.trace, heads, beam=beam, alpha=float(store.alpha))
        except AttnlabError as error:
            store.error = _sentence(str(error))
            return
        original = (store.scored or store.result).text
        diff = _word_diff(original, effect.text)
        changed = "unchanged" if effect.text == original else "changed"
        self.ablate_view.objects = [
            pn.pane.HTML(
                f"<div class='attn-ablation-result'><p>With {len(self.ablate_choice.value)} head(s) off the output is "
                f"<b>{changed}</b>:</p><p class='attn-output'>{diff}</p>"
                f"<p>log P(original output): {sum(effect.before):.3f} with all heads → {sum(effect.after):.3f} "
                f"with the heads off (Δ = <b>{effect.logprob_change:+.3f}</b>)</p></div>",
                stylesheets=[CSS],
            ),
            pn.pane.Bokeh(viz.token_delta_figure(effect.original_tokens, effect.before, effect.after)),
        ]

    # -- output -------------------------------------------------------------------------------------
    def _output_html(self) -> str:
        store = self.store
        result, scored = store.result, store.scored
        label = "Parse" if store.model.task == "parse" else "Translation"
        parts = [
            f"<div class='attn-result'><div class='attn-muted'>{label}</div><div class='attn-output'>{html.escape(result.text)}</div>"
        ]
        if scored is not None:
            parts.append(
                f"<div class='attn-muted'>Reference (the attention below is teacher-forced on it): "
                f"log P = {scored.logprob:.3f}, per token {scored.score:.3f}</div><div class='attn-output'>{html.escape(scored.text)}</div>"
            )
        rows = "".join(
            f"<tr><td>{rank + 1}</td><td>{h.score:.3f}</td><td>{h.logprob:.3f}</td><td>{html.escape(h.text)}</td></tr>"
            for rank, h in enumerate(result.hypotheses)
        )
        decoding = "greedy" if store.greedy else f"beam {store.beam}, α {store.alpha:g}"
        parts.append(
            f"<details {'open' if len(result.hypotheses) > 1 else ''}><summary class='attn-muted'>{len(result.hypotheses)} finished "
            f"hypotheses ({decoding})</summary><table class='attn-hyps'><tr><th>#</th><th>score</th><th>log P</th>"
            f"<th>output</th></tr>{rows}</table></details></div>"
        )
        return "".join(parts)

    # -- export -------------------------------------------------------------------------------------
    def _set_filenames(self) -> None:
        store = self.store
        stem = f"{store.kind}-L{store.layer}-H{store.head}"
        self.export_png.filename, self.export_svg.filename = f"{stem}.png", f"{stem}.svg"
        self.export_trace.filename = f"attention-run{store.run}.trace"
        self.export_html.filename = f"attention-run{store.run}.html"

    def _png(self) -> io.BytesIO | None:
        store = self.store
        if store.trace is None:
            return None
        vmax = None if store.scale_to_max else 1.0
        return io.BytesIO(viz.heatmap_png(store.trace, store.kind, store.layer, store.head, mask=store.mask, vmax=vmax))

    def _svg(self) -> io.StringIO | None:
        store = self.store
        if store.trace is None:
            return None
        vmax = None if store.scale_to_max else 1.0
        return io.StringIO(
            viz.heatmap_svg(store.trace, store.kind, store.layer, store.head, mask=store.mask, vmax=vmax)
        )

    def _trace_file(self) -> io.BytesIO | None:
        if self.store.trace is None:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            path = self.store.trace.save(Path(tmp) / "attention.trace")
            return io.BytesIO(path.read_bytes())

    def _html(self) -> io.StringIO | None:
        """The current views as one self-contained page (bokeh inlined, opens offline)."""
        from bokeh.layouts import column, row

        store, trace = self.store, self.store.trace
        if trace is None:
            return None
        vmax = None if store.scale_to_max else 1.0
        source = viz.stats_source(store.stats)
        q_labels, k_labels = trace.labels(store.kind)
        parts = explore.attention_parts(store.model, trace, store.kind, store.layer, store.head)
        layout = column(
            viz.summary_div(trace),
            row(viz.grid(trace, store.kind, selected=(store.layer, store.head), mask=store.mask, vmax=vmax),
                viz.heatmap(trace, store.kind, store.layer, store.head, mask=store.mask, vmax=vmax)),
            row(viz.mask_figure(trace, store.kind), viz.computation_figure(parts, min(store.query, len(q_labels) - 1), q_labels, k_labels)),
            row(viz.stats_table(source), viz.stats_scatter(source)),
        )  # fmt: skip
        return io.StringIO(viz.standalone_html(layout, title=f"attnlab: {trace.meta.get('text', '')[:60]}"))


def _typed(widget: pn.widgets.TextAreaInput) -> str:
    """What the box shows: `value_input` follows each keystroke, `value` only blur and code."""
    return widget.value_input or widget.value or ""


def _word_diff(old: str, new: str) -> str:
    a, b = old.split(), new.split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes():
        if op == "equal":
            out.append(html.escape(" ".join(a[i1:i2])))
        if op in ("delete", "replace"):
            out.append(f"<del>{html.escape(' '.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{html.escape(' '.join(b[j1:j2]))}</ins>")
    return " ".join(out)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="explorer.py")
    parser.add_argument("--checkpoint", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1)
    known, _ = parser.parse_known_args(argv)
    return known


def app(argv: list[str] | None = None) -> Explorer:
    """One session's explorer, on the bundled checkpoints plus those given as arguments.

    Decoding runs on `--threads` torch threads (default 1): one sentence's small matrix products
    gain little from more, and on shared cores (a training run beside the app) extra threads
    made decoding 5-50× slower in our measurements (docs/BENCHMARKS.md, Explorer)."""
    import torch

    args = arguments(sys.argv[1:] if argv is None else argv)
    if torch.get_num_threads() != args.threads:
        torch.set_num_threads(max(1, args.threads))
    explorer = Explorer(explore.find_checkpoints(args.checkpoint))
    if explorer.checkpoints:  # open the first checkpoint given on the command line, else the first bundled one
        given = [str(Path(path).expanduser()) for path in args.checkpoint]
        first = given[0] if given else next(iter(explorer.checkpoints.values()))

        def start() -> None:
            explorer.open(first)

        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.onload(start)
        else:
            start()
    return explorer


if __name__.startswith("bokeh"):  # `panel serve` runs this file once per browser session
    app().servable(title="attnlab explorer")
