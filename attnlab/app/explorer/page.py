"""The explorer's page: the inputs on the left (checkpoint, text, reference, decoding settings),
the output, the head selection, the export bar and the tabs on the right, and the two actions
(open a checkpoint, translate). It decides when views redraw: a view on a hidden tab is only
marked stale and drawn when its tab opens, so one sentence costs only the views one looks at.

Checkpoints are opened by name (the picker) or by a path relative to one of the server's roots
(the path box, checked by the `Store`); the page shows names only, never a server path.
"""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from typing import Any

import panel as pn
import torch

from attnlab.app.checkpoints import BUNDLED, find_checkpoints, same_directory
from attnlab.app.explorer.ablation import AblationTab
from attnlab.app.explorer.access import Accessible
from attnlab.app.explorer.alerts import Alerts
from attnlab.app.explorer.boxes import AlphaInput, BeamInput, number_box
from attnlab.app.explorer.busy import working
from attnlab.app.explorer.compare import CompareTab
from attnlab.app.explorer.corpus import CorpusTab
from attnlab.app.explorer.dashboard import DashboardTab
from attnlab.app.explorer.equation import EquationTab
from attnlab.app.explorer.export import ExportBar
from attnlab.app.explorer.heads import HeadsTab, bokeh_edit
from attnlab.app.explorer.keys import ArrowKeys
from attnlab.app.explorer.language import language_switch, session_language, set_page_language
from attnlab.app.explorer.layout import TABS_CSS, focus_ring, page_row
from attnlab.app.explorer.lens import LensTab
from attnlab.app.explorer.link import Address, carried, follow, linked_search, open_view
from attnlab.app.explorer.output import Output
from attnlab.app.explorer.rollout import RolloutTab
from attnlab.app.explorer.screen import screen
from attnlab.app.explorer.selection import Selection
from attnlab.app.explorer.startup import arguments
from attnlab.app.explorer.store import MAX_BEAM, Store
from attnlab.app.explorer.tables import TabTables
from attnlab.app.explorer.timeline import TimelineTab
from attnlab.app.i18n import DEFAULT, task_name, text
from attnlab.app.roots import CheckpointRoots
from attnlab.errors import AttnlabError

EXAMPLES = {
    "translate": "A little girl in a pink dress is climbing into a wooden playhouse.",
    "parse": "The old man saw the dog with a telescope .",
}


class Explorer(pn.viewable.Viewer):
    """The views: inputs on the left, output and attention on the right."""

    def __init__(
        self, checkpoints: dict[str, str], roots: CheckpointRoots | None = None, lang: str = DEFAULT, **params: Any
    ) -> None:
        """`checkpoints`: the picker's {name: server path}; `roots`: where the path box may open
        (default: the bundled checkpoints and the listed ones); `lang`: the page's language
        (`en`, `es`, `zh`; the store's `lang`, which every view reads)."""
        super().__init__(**params)
        roots = roots if roots is not None else CheckpointRoots([BUNDLED, *checkpoints.values()])
        self.store = store = Store(roots=roots, lang=lang)
        self.lang = lang = store.lang
        self.checkpoints = dict(checkpoints)
        self._stale: set[str] = set()
        self._opening = False
        self.link_search = False  # the session's link names the search: applied to the first model opened

        # inputs
        self.language = language_switch(lang)
        self.checkpoint_select = pn.widgets.Select(
            label=text("page.checkpoint", lang),
            options=list(self.checkpoints),
            width=320,
            css_classes=["attn-checkpoint"],
        )
        self.path_input = pn.widgets.TextInput(
            css_classes=["attn-path"],
            label=text("page.open_dir", lang),
            placeholder=text("page.open_dir_hint", lang, roots=", ".join(r.name + "/" for r in roots.roots))[:60],
            width=240,
            max_length=4096,
        )
        self.open_button = pn.widgets.Button(label=text("page.open", lang), width=70, align="end")
        self.model_info = pn.pane.HTML("", width=320, css_classes=["attn-muted"])
        box = {"width": 320, "max_length": 200_000}
        self.text_input = pn.widgets.TextAreaInput(
            css_classes=["attn-source"], label=text("page.source", lang), height=110, **box
        )
        self.reference_input = pn.widgets.TextAreaInput(
            css_classes=["attn-reference"], label=text("page.reference", lang), height=60, **box
        )
        self.mode = pn.widgets.RadioButtonGroup(
            label=text("page.decoding", lang),
            options={text("decoding.beam", lang): "beam", text("decoding.greedy", lang): "greedy"},
            value="beam",
            width=130,
            align="end",
        )
        self.beam_input = number_box(  # a value the store refuses (inf, NaN) never reaches param: a notice says so
            BeamInput,
            store,
            "beam",
            label=text("page.beam_size", lang),
            description=text("page.beam_help", lang, most=MAX_BEAM),
            # no start/end: the store cuts a typed 99 to MAX_BEAM and says so (the widget reset it, mute)
            width=75,
            css_classes=["attn-beam"],
        )
        self.alpha_input = number_box(
            AlphaInput,
            store,
            "alpha",
            label=text("page.alpha", lang),
            description=text("page.alpha_help", lang),
            step=0.1,
            width=75,
        )
        self.go = pn.widgets.Button(
            label=text("page.translate", lang), color="primary", width=320, css_classes=["attn-go"]
        )
        self.alerts = Alerts(store)
        self.error, self.notice = self.alerts.error, self.alerts.notice
        self.status = pn.pane.HTML("", css_classes=["attn-status"], width=600)
        self.address = Address()  # the browser's address names what the page shows (`link`)

        # views
        self.selection = Selection(store)
        self.output = Output(store)
        self.heads = HeadsTab(
            store, redraw=lambda: (self._refresh(["grid", "head"]), self._keep_address(), self.export.name_files())
        )
        self.equation = EquationTab(store)
        self.dashboard = DashboardTab(store, redraw=lambda: self._refresh(["stats"]))
        self.timeline = TimelineTab(store, redraw=lambda: self._refresh(["timeline"]))
        self.ablation = AblationTab(store)
        self.compare = CompareTab(store, self.checkpoints, self.ablation.picks, self.ablation.patching)
        self.corpus = CorpusTab(store, open_sentence=self.open_sentence)
        self.rollout = RolloutTab(store)
        self.lens = LensTab(store, open_cell=self.open_lens_cell)
        self.export = ExportBar(store, self.heads)
        self.keys = ArrowKeys(store)  # (it also tells the browser when a tab opened is drawn)
        self.titles = [text("tab.heads", lang), text("tab.equation", lang), text("tab.dashboard", lang)]
        self.titles += [text("tab.timeline", lang), text("tab.ablation", lang), self.compare.title]
        self.titles += [text("corpus.tab", lang), text("tab.rollout", lang), text("tab.lens", lang)]
        views = (self.heads, self.equation, self.dashboard, self.timeline, self.ablation)
        views += (self.compare, self.corpus, self.rollout, self.lens)
        self.tabs = pn.Tabs(
            *zip(self.titles, views, strict=True),  # in `link.VIEWS`'s order
            stylesheets=[TABS_CSS],
            dynamic=True,  # only the open tab is in the page: BokehJS broke hidden tabs' figures (laid out at 0 px)
        )
        self.tables = TabTables(self.tabs)  # the closed tabs' tables out of the page, else BokehJS blanks them
        # (tab, draw) of each view drawn from the trace; the ablation tab draws only on its button
        self._views: dict[str, tuple[int, Callable[[], None]]] = {
            "head": (0, self.heads.draw_heatmap),
            "grid": (0, self.heads.draw_grid),
            "mask": (1, self.equation.draw_mask),
            "eq1": (1, self.equation.draw_eq1),
            "stats": (2, self.dashboard.draw),
            "setup": (3, self.timeline.setup),  # a new model's snapshots: before its first draw, after an open only
            "timeline": (3, self.timeline.draw),
            "ablation": (4, lambda: self.ablation.reset(self.store.trace)),
            "compare": (5, self.compare.draw),  # decodes with the second model only when the run is new
            "rollout": (7, self.rollout.draw),
            "lens": (8, self.lens.draw),  # the run only: no kind, layer or head in it
        }
        self.alerts.follow(self.tabs, {name: tab for name, (tab, _draw) in self._views.items()} | {"corpus": 6})
        heading = pn.pane.HTML(f"<h2 style='margin:4px 0'>{html.escape(text('page.title', lang))}</h2>", width=220)
        model = (pn.Row(heading, self.language), self.checkpoint_select, pn.Row(self.path_input, self.open_button))
        decoding = pn.Row(self.mode, self.beam_input, self.alpha_input)
        inputs = (self.text_input, self.reference_input, decoding, self.go, self.error, self.notice, self.address.box)
        self.layout = page_row(
            (pn.Column(*model, self.model_info), pn.Column(*inputs)),
            pn.Column(self.status, self.output, self.selection, self.export, self.tabs, self.keys, Accessible()),
        )
        screen(self.layout, store)  # a menu or button row takes only a choice it offers: a crafted one is a notice
        focus_ring(self.layout)

        # wiring
        for box in (self.text_input, self.reference_input):  # code that sets `value` must win over stale typing
            box.param.watch(lambda event: setattr(event.obj, "value_input", event.new), "value")
        self.go.on_click(lambda _event: self.translate())
        self.open_button.on_click(lambda _event: self.open(self.path_input.value_input or self.path_input.value))
        self.path_input.param.watch(lambda _event: self.open(self.path_input.value), "enter_pressed")  # as "Open"
        self.checkpoint_select.param.watch(lambda event: self.open_listed(event.new), "value")
        self.mode.param.watch(self._on_mode, "value")
        store.param.watch(self._on_selection, ["kind", "layer", "head", "mask", "scale_to_max"])
        store.param.watch(lambda _event: self._refresh(["eq1"]), "query")
        self.tabs.param.watch(lambda _e: (self._refresh_stale(), self._keep_address(), self.keys.tab_drawn()), "active")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    # -- actions ------------------------------------------------------------------------------------
    def open(self, request: str) -> None:
        """Open what was typed in the path box: a directory under one of the server's roots."""
        request = (request or "").strip()
        if self._opening:
            return
        if not request:
            self.store.error = text("page.no_directory", self.lang)
            return
        previous = self.store.model
        self._after_open(previous, self.store.open_request(request))

    def open_listed(self, name: str) -> None:
        """Open a picker entry (the server chose its path; a request can only name it)."""
        if self._opening or name not in self.checkpoints:
            return
        previous = self.store.model
        self._after_open(previous, self.store.open(self.checkpoints[name], name))

    def _after_open(self, previous: Any, opened: bool) -> None:
        """Show what is loaded now; when it is another model than before, decode the text with it."""
        store = self.store
        name = next(
            (n for n, p in self.checkpoints.items() if store.model and same_directory(p, store.checkpoint)), None
        )
        if not opened:
            if previous is not None and name is not None:  # the picker shows the model that is really loaded
                self._pick(name)
            return
        model = store.model
        if name is None:  # opened by path: add it to the picker, under its root-relative name
            name = store.checkpoint_name
            self.checkpoints[name] = store.checkpoint
            self.checkpoint_select.options = list(self.checkpoints)
        store.checkpoint_name = name  # a listed model opened by path is named as the picker names it
        self._pick(name)
        config, lang, parse = model.config, self.lang, model.task == "parse"
        sizes = dict(layers=config.n_layers, heads=config.n_heads, d_model=config.d_model, vocab=config.vocab_size)
        info = text("page.model_info", lang, task=f"<b>{html.escape(task_name(model.task, lang))}</b>", **sizes)
        self.model_info.object = f"<span class='attn-model-info'>{html.escape(store.checkpoint_name)}<br>{info}</span>"
        self.go.label = text("page.parse" if parse else "page.translate", lang)
        self.mode.value = "greedy" if self.link_search and linked_search(store) else "beam"
        self.link_search = False
        if previous is not None and previous.task != model.task:
            self.reference_input.value = ""  # a reference translation is no reference tree
        if _typed(self.text_input).strip() in ("", *EXAMPLES.values()):
            self.text_input.value = self.text_input.value_input = EXAMPLES.get(model.task, EXAMPLES["translate"])
        self._stale.add("setup")  # when its tab opens: Panel restyled a hidden tab's widgets from its CDN
        self._refresh_stale()
        if model is not previous:
            self.translate()

    def open_lens_cell(self, layer: int, position: int) -> None:
        """A tap on the logit lens: that decoder layer's encoder–decoder attention, at that position's
        query of Eq. (1) (what the layer read from the source there)."""
        self.store.select(kind="cross", layer=layer)
        self.store.query = position
        self.tabs.active = 1

    def open_sentence(self, source: str, reference: str, head: tuple[str, int, int]) -> None:
        """A sentence picked in the Corpus tab: decode it (with its reference when the profile
        read references) and show `head` of it in the Heads tab."""
        self.text_input.value, self.reference_input.value = source, reference
        self.tabs.active = 0
        self.translate()
        if self.store.trace is not None:
            self.store.select(*head)

    def _pick(self, name: str) -> None:
        """Show `name` in the picker without opening it again."""
        self._opening = True
        try:
            self.checkpoint_select.value = name
        finally:
            self._opening = False

    def translate(self) -> None:
        """Decode what the boxes show and redraw the views; on bad input the old views stay."""
        store = self.store
        source, reference = _typed(self.text_input), _typed(self.reference_input)
        started = time.perf_counter()
        store.param.update(text=source or "", reference=reference or "")
        working(self.go, self.status, self.lang)
        try:
            if not store.submit():
                said = text("status.not_decoded", self.lang, run=store.run)
                self.status.object = (
                    f"<span class='attn-run attn-muted' data-run='{store.run}'>{html.escape(said)}</span>"
                )
                return
            self._update_after_run()
        finally:
            self.go.loading = False
        bokeh_edit(self._set_status, started)  # after the figure edits that are queued

    def _set_status(self, started: float) -> None:
        store = self.store
        views_ms = 1000 * (time.perf_counter() - started)
        store.timing = dict(store.timing, views_ms=views_ms)
        said = text("status.done", self.lang, run=store.run, decode_ms=store.timing["decode_ms"], views_ms=views_ms)
        self.status.object = f"<span class='attn-run attn-muted' data-run='{store.run}'>{html.escape(said)}</span>"
        self._keep_address()

    def _keep_address(self) -> None:
        """Name what the page shows in the browser's address (`link`): after each run, and each
        change of head or tab since."""
        if self.store.trace is not None:
            self.address.keep(self.checkpoint_select.value, self.store, self.tabs.active, self.heads.weigh.value)

    def _update_after_run(self) -> None:
        self.output.show()
        self.export.enable()
        self.export.name_files()
        self._refresh([name for name in self._views if name != "setup"])

    def _on_mode(self, event: Any) -> None:  # greedy search has no beam and no length penalty: greyed out
        self.store.greedy = self.beam_input.disabled = self.alpha_input.disabled = event.new == "greedy"

    def _on_selection(self, *events: Any) -> None:
        if self.store.trace is not None:
            self.export.name_files()
            rollout = ["rollout"] if {event.name for event in events} & {"kind", "layer"} else []  # no head in it
            self._refresh(["head", "grid", "mask", "eq1", "timeline", "compare", *rollout])
            self._keep_address()

    # -- refreshing views ---------------------------------------------------------------------------
    def _refresh(self, names: list[str]) -> None:
        """Redraw the named views on the visible tab now, and the others when their tab opens."""
        if self.store.trace is None:
            return
        for name in names:
            if self._views[name][0] == self.tabs.active:
                self._draw(name)
                self._stale.discard(name)
            else:
                self._stale.add(name)

    def _refresh_stale(self) -> None:
        visible = [name for name in self._views if name in self._stale and self._views[name][0] == self.tabs.active]
        self._stale.difference_update(visible)
        for name in visible:
            self._draw(name)

    def _draw(self, name: str) -> None:
        """Draw one view; a trace it cannot show is said in the error box while its tab is open,
        the others still draw."""
        try:
            self._views[name][1]()
        except AttnlabError as error:
            self.store.view_error(name, self.store.explain(error))
        else:
            self.store.view_error(name, "")


def _typed(widget: pn.widgets.TextAreaInput) -> str:
    """What the box shows: `value_input` follows each keystroke, `value` only blur and code."""
    return widget.value_input or widget.value or ""


def app(argv: list[str] | None = None) -> Explorer:
    """One session's explorer, on the bundled checkpoints plus those given as arguments; the
    path box opens directories under the bundled `checkpoints/`, each `--checkpoint` and each
    `--checkpoint-root` only (`attnlab.app.roots`). Its language is the request's `?lang=`, else
    the browser's preferred one, else English (`attnlab.app.explorer.language`).

    Decoding runs on `--threads` torch threads (default 1): one sentence's small matrix products
    gain little from more, and on shared cores (a training run beside the app) extra threads
    made decoding 5-50× slower in our measurements (docs/BENCHMARKS.md, Explorer)."""
    pn.extension(notifications=False)  # per session (`panel serve` keeps config per document), before any widget
    args = arguments(sys.argv[1:] if argv is None else argv)
    if torch.get_num_threads() != args.threads:
        torch.set_num_threads(max(1, args.threads))
    roots = CheckpointRoots([BUNDLED, *args.checkpoint_root, *args.checkpoint])
    lang = session_language()  # ?lang=, else the browser's Accept-Language, else English
    set_page_language(lang)  # <html lang="...">: browsers choose CJK fonts by it
    listed = find_checkpoints(args.checkpoint, roots=args.checkpoint_root, lang=lang)  # named in the page's language
    explorer = Explorer(listed, roots, lang=lang)
    explorer.store.time_limit = args.time_limit
    if explorer.checkpoints:  # open the first checkpoint given on the command line, else the first listed one
        given = [n for path in args.checkpoint[:1] for n, p in explorer.checkpoints.items() if same_directory(p, path)]
        named, typed, reference, path = carried(explorer.checkpoints)  # over a switch of language, or in a link
        first = (named + given + list(explorer.checkpoints))[0]
        explorer.text_input.value = explorer.text_input.value_input = typed  # "": the example
        explorer.reference_input.value = explorer.reference_input.value_input = reference
        open_view(explorer.store, explorer.tabs, explorer.heads.weigh)
        explorer.link_search = True

        def start() -> None:
            if path:  # a model the page had opened by path (under a root), as its address says
                explorer.open(path)
            if explorer.store.model is None:
                explorer.open_listed(first)
            follow(explorer.store, explorer.tabs, explorer.titles)  # what the link named that is not here

        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.onload(start)
        else:
            start()
    return explorer
