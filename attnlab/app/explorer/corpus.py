"""The Corpus tab: a profile written by `attnlab heads profile` (per-sentence, per-head
statistics of a whole test set), each statistic as a layers × heads grid per kind of attention;
a click on a head lists the sentences where it is most extreme, a click on a sentence opens it
in the usual views (the page decodes it, with its reference when the profile read references).
From the keyboard (the grids and the table take clicks only), a button lists the sentences of the
head open in the page's selection bar (the arrow keys walk it), and a menu opens one of them;
the table is one stop of the Tab key and takes no key (`explorer.keys`): Tab through its cells
selected each row, and opened its sentence over the text typed.
A sentence opens only with the model the profile was recorded with (the checkpoint its metadata
names, and the same layers and heads): with another, the same head would be another head.

A profile is opened by a path under the server's checkpoint roots only, as checkpoints are
(`attnlab.app.roots`): anything else gets one refusal after the same delay, and the tab names
files relative to a root, never by their server path.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import panel as pn
from bokeh.models import ColumnDataSource, DataTable, NumberFormatter, TableColumn

from attnlab import viz
from attnlab.app.explorer.screen import picked_row
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import kind_title, text
from attnlab.app.roots import MAX_REQUEST_CHARS, REFUSAL_SECONDS, CheckpointRoots, askable
from attnlab.decode.profile import Profile, read_profile
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.model.checkpoint import weights_digest

MAX_PROFILE_MB = 512  # test2016 is ~1 MB; this is room for corpora 100x larger, not for any file
N_EXTREMES = 12
FIGURE_NAME = "profile-{kind}"  # the grids' bokeh names (what tests and exports find them by)
NONE = -1  # the sentence menu's "—": no sentence (not None, which a browser shows as "None")


def resolve_profile(roots: CheckpointRoots, request: str) -> Path:
    """The real `.parquet` file a typed request names, when it lies under an allowed root (its
    folder resolved as `CheckpointRoots.resolve` resolves a checkpoint, then the file itself
    once more, so that a symlink out of a root does not count); otherwise
    `CheckpointError(roots.refusal)`, after the same delay whatever the reason."""
    started = time.perf_counter()
    request = (request or "").strip()
    found = None
    if askable(request):
        folder, name = os.path.split(request)
        if name.endswith(".parquet") and name != ".parquet":
            try:
                folders = [roots.resolve(folder)] if folder else [Path(root.real) for root in roots.roots]
            except CheckpointError:
                folders = []
            for candidate in folders:
                real = os.path.realpath(candidate / name)
                if roots.allows(real) and os.path.isfile(real):
                    found = Path(real)
                    break
    if found is None:
        time.sleep(max(0.0, started + REFUSAL_SECONDS - time.perf_counter()))
        raise CheckpointError(roots.refusal)
    return found


class CorpusTab(pn.viewable.Viewer):
    """A corpus profile: every head by one statistic, and a head's most extreme sentences."""

    def __init__(self, store: Store, open_sentence: Callable[[str, str, tuple[str, int, int]], None]) -> None:
        """`open_sentence(source, reference, (kind, layer, head))` shows a sentence in the
        usual views (the page decodes it); the reference is '' for a profile of translations."""
        super().__init__()
        self.store = store
        self.open_sentence = open_sentence
        self.profile: Profile | None = None
        self.profile_name = ""
        self.selected: tuple[str, int, int] | None = None
        self.rows: list[dict] = []
        lang = store.lang
        roots = ", ".join(root.name + "/" for root in store.roots.roots)
        self.path_input = pn.widgets.TextInput(
            css_classes=["attn-profile-path"],
            label=text("corpus.profile", lang),
            placeholder=text("corpus.profile_hint", lang, roots=roots)[:60],
            width=320,
            max_length=MAX_REQUEST_CHARS,
        )
        self.open_button = pn.widgets.Button(
            label=text("corpus.open", lang), width=90, align="end", css_classes=["attn-profile-open"]
        )
        self.stat = pn.widgets.Select(
            label=text("corpus.statistic", lang), options=[], width=130, css_classes=["attn-profile-stat"]
        )
        self.order = pn.widgets.RadioButtonGroup(
            label=text("corpus.order", lang),  # (not shown: a refused crafted choice names it)
            options={text("corpus.largest", lang): "largest", text("corpus.smallest", lang): "smallest"},
            value="largest",
            align="end",
        )
        self.info = pn.pane.HTML(
            f"<span class='attn-profile-info'>{html.escape(text('corpus.hint', lang))}</span>",
            css_classes=["attn-muted"],
        )
        self.grids = pn.FlexBox(css_classes=["attn-profile-grids"], align_items="flex-end")  # cells line up
        self.caption = pn.pane.HTML("", css_classes=["attn-profile-caption", "attn-muted"])
        self.table = pn.pane.Bokeh(None, css_classes=["attn-profile-sentences"])
        self.open_head = pn.widgets.Button(
            label=text("corpus.open_head", lang), align="end", disabled=True, css_classes=["attn-profile-open-head"]
        )
        self.sentence = pn.widgets.Select(  # a choice opens it: no key chooses on it closed (`keys.ACTING`)
            label=text("corpus.open_sentence", lang), options={}, width=420, css_classes=["attn-profile-sentence"]
        )
        self.sentence.visible = False
        self.layout = pn.Column(
            pn.FlexBox(self.path_input, self.open_button, self.stat, self.order, align_items="flex-end"),  # wraps
            self.info,
            self.grids,
            self.open_head,
            self.caption,
            self.sentence,
            self.table,
        )
        self.open_head.on_click(lambda _event: self.pick(store.kind, store.layer, store.head))
        self.sentence.param.watch(lambda event: event.new != NONE and self._clicked("", [], [event.new]), "value")
        self.open_button.on_click(lambda _event: self.open(self.path_input.value_input or self.path_input.value))
        self.path_input.param.watch(lambda _event: self.open(self.path_input.value), "enter_pressed")  # as "Open"
        self.stat.param.watch(lambda _event: self.draw(), "value")
        self.order.param.watch(lambda _event: self.list_sentences(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    # -- actions ------------------------------------------------------------------------------------
    def open(self, request: str) -> bool:
        """Open what was typed: a profile under one of the server's roots; on failure the error
        box says why while this tab is open (no server path in it) and the tab keeps what it showed."""
        store, lang = self.store, self.store.lang
        if not (request or "").strip():
            store.view_error("corpus", text("corpus.no_profile", lang))
            return False
        try:
            path = resolve_profile(store.roots, request)
        except AttnlabError:
            roots = ", ".join(f"{root.name}/" for root in store.roots.roots) or "—"
            store.view_error("corpus", text("corpus.refused", lang, roots=roots))
            return False
        name = store.roots.display(path)
        size_mb = path.stat().st_size / 2**20
        if size_mb > MAX_PROFILE_MB:
            said = text("corpus.too_big", lang, name=name, size=f"{size_mb:,.0f}", most=MAX_PROFILE_MB)
            store.view_error("corpus", said)
            return False
        try:
            profile = read_profile(path)
        except AttnlabError as error:
            store.view_error("corpus", store.explain(error, {str(path): name}))
            return False
        self.profile, self.profile_name, self.selected, self.rows = profile, name, None, []
        store.view_error("corpus", "")
        mode = text(
            "corpus.mode_reference" if profile.meta.get("mode") == "reference" else "corpus.mode_translate", lang
        )
        said = text(
            "corpus.info",
            lang,
            name=name,
            sentences=profile.n_sentences,
            mode=mode,
            checkpoint=str(profile.meta.get("checkpoint", "?")),
        )
        self.info.object = (
            f"<span class='attn-profile-info' data-sentences='{profile.n_sentences}'>{html.escape(said)}</span>"
        )
        stats = profile.stats
        default = "eos" if "eos" in stats else stats[0]
        unchanged = self.stat.value == default
        self.stat.options = {viz.stat_name(stat, store.words): stat for stat in stats}
        self.stat.value = default  # draws when the value changes (also when the new options moved it)
        if unchanged:
            self.draw()
        self.table.object = None
        self.caption.object = ""
        self.sentence.visible, self.open_head.disabled = False, False
        return True

    def pick(self, kind: str, layer: int, head: int) -> None:
        """A click on a grid, or the open head's button: frame that head and list its most
        extreme sentences; a head the profile lacks (the page's model may be another) is a line."""
        profile, lang = self.profile, self.store.lang
        if profile is None or not self.stat.value:
            return
        layers, values = profile.grid(self.stat.value, kind) if kind in profile.kinds else ([], None)
        if layer not in layers or not 0 <= head < values.shape[1]:
            name = f"{kind_title(kind, lang)} · L{layer} H{head}"
            self.store.view_error("corpus", text("corpus.no_head", lang, name=self.profile_name, head=name))
            return
        self.store.view_error("corpus", "")
        self.selected = (kind, layer, head)
        self.draw()
        self.list_sentences()

    # -- views ----------------------------------------------------------------------------------------
    def draw(self) -> None:
        """One layers × heads grid per kind for the chosen statistic."""
        profile, stat, lang, words = self.profile, self.stat.value, self.store.lang, self.store.words
        if profile is None or not stat:
            return
        figures, grids = [], {kind: profile.grid(stat, kind) for kind in profile.kinds}
        limits = viz.shared_limits([values for _, values in grids.values()])  # one colour, one value
        for kind, (layers, values) in grids.items():
            chosen = self.selected[1:] if self.selected and self.selected[0] == kind else None
            title = text("corpus.grid_title", lang, kind=kind_title(kind, lang), stat=viz.stat_name(stat, words))
            figure = viz.profile_grid(
                layers,
                values,
                title=title,
                selected=chosen,
                on_select=partial(self.pick, kind),
                name=FIGURE_NAME.format(kind=kind),
                words=words,
                limits=limits,
            )
            figures.append(pn.pane.Bokeh(figure))
        self.grids.objects = figures
        if self.selected is not None:
            self.list_sentences()

    def list_sentences(self) -> None:
        """The open head's most extreme sentences by the chosen statistic, as a table; a click
        on a row opens that sentence."""
        if self.profile is None or self.selected is None or not self.stat.value:
            return
        kind, layer, head = self.selected
        stat, lang, largest = self.stat.value, self.store.lang, self.order.value == "largest"
        self.rows = self.profile.extremes(stat, kind, layer, head, N_EXTREMES, largest)
        named = viz.stat_name(stat, self.store.words)
        caption = text(
            "corpus.extremes_largest" if largest else "corpus.extremes_smallest",
            lang,
            kind=kind_title(kind, lang),
            layer=layer,
            head=head,
            stat=named,
        )
        self.caption.object = (
            f"<span class='attn-profile-head' data-head='{kind}-{layer}-{head}'>{html.escape(caption)}</span>"
        )
        source = ColumnDataSource(
            {name: [row[name] for row in self.rows] for name in ("sentence", "value", "source", "output")}
        )
        source.selected.on_change("indices", self._clicked)
        columns = [
            TableColumn(field="sentence", title=html.escape(text("corpus.sentence", lang)), width=60),
            # headers are HTML in BokehJS: "</s>" (the eos statistic in Spanish) is a tag
            TableColumn(field="value", title=html.escape(named), formatter=NumberFormatter(format="0.000"), width=70),
            TableColumn(field="source", title=html.escape(text("corpus.source", lang)), width=420),
            TableColumn(field="output", title=html.escape(text("corpus.output", lang)), width=420),
        ]
        # as wide as the window allows, up to 980 px; narrower, it scrolls inside its own box (a fixed
        # 980 px ran 316 px past a 1024 px window)
        table = DataTable(source=source, columns=columns, width=980, height=min(40 + 28 * len(self.rows), 380),
                          sizing_mode="stretch_width", max_width=980, min_width=240, autosize_mode="none",
                          index_position=None, selectable=True, sortable=False, name="profile-sentences")  # fmt: skip
        self.table.object = viz.use_fonts(table)
        rows = {f"{i + 1} · {row['value']:.3f} · {row['source'][:70]}": i for i, row in enumerate(self.rows)}
        self.sentence.options, self.sentence.value = {"—": NONE, **rows}, NONE
        self.sentence.visible = bool(self.rows)

    def _clicked(self, _attr: str, _old: list[int], new: list[int]) -> None:
        if self.profile is None or self.selected is None:
            return
        index = picked_row(self.store, text("corpus.tab", self.store.lang), new, len(self.rows))
        if index is None:
            return
        refusal = self._other_model()
        self.store.view_error("corpus", refusal)  # ('' when it may open)
        if refusal:
            return
        picked = self.rows[index]
        self.sentence.value = NONE  # (the same sentence chosen again opens it again)
        reference = picked["output"] if self.profile.meta.get("mode") == "reference" else ""
        self.open_sentence(picked["source"], reference, self.selected)

    def _other_model(self) -> str:
        """Why the loaded model cannot open this profile's sentences, or '' when it can: the
        profile names another checkpoint (as `attnlab heads profile` names it: the directory's
        name), or its heads are not the model's (a profile records every head of its model)."""
        store, profile, lang = self.store, self.profile, self.store.lang
        model = store.model
        if model is None or profile is None:  # no model: the page says so when it decodes
            return ""
        recorded = str(profile.meta.get("checkpoint") or "")
        loaded = {os.path.basename(os.path.normpath(p)) for p in (store.checkpoint, model.path) if p}
        if recorded and recorded not in loaded:
            return text(
                "corpus.other_model", lang, name=self.profile_name, checkpoint=recorded, loaded=store.checkpoint_name
            )
        digest = profile.meta.get("model_sha256")  # (profiles before it was recorded: the name only)
        if digest and weights_digest(model.path) not in (digest, None):
            return text("corpus.other_weights", lang, name=self.profile_name, loaded=store.checkpoint_name)
        layers, heads = list(range(model.config.n_layers)), model.config.n_heads
        for kind in profile.kinds:
            rows, values = profile.grid(self.stat.value, kind)
            if rows != layers or values.shape[1] != heads:
                return text(
                    "corpus.other_heads",
                    lang,
                    name=self.profile_name,
                    loaded=store.checkpoint_name,
                    layers=len(layers),
                    heads=heads,
                )
        return ""
