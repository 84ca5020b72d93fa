"""The Training timeline tab: the probe sentences a training run recorded at each checkpoint
(`attnlab train --probes K`), replayed. For the open head it shows the probe's attention at the
chosen step, how it differs from the last step, and every head's entropy over the steps: when a
head settled on what it does. A run trained with `align_gold` also recorded every cross-attention
head's alignment error rate at each checkpoint: its curves show when a head became an aligner.
A run recorded with probes also weighed every head on its dev pairs at each checkpoint
(`attnlab.record.importance`): those curves show when the model came to need a head.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

import panel as pn

from attnlab import viz
from attnlab.app.checkpoints import alignment_snapshots, importance_curves, importance_snapshots, probe_snapshots
from attnlab.app.explorer.screen import StepSlider
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import grouped, kind_name, text
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace

# The step's map and its difference side by side, the difference under the map when both do not
# fit (a plain Row ran 30 px past a 1400 px window). A FlexBox instead left both maps unpainted.
WRAP = ":host { flex-wrap: wrap; }"


class TimelineTab(pn.viewable.Viewer):
    """One probe sentence through training, for the open head."""

    def __init__(self, store: Store, redraw: Callable[[], None]) -> None:
        """`redraw` is called when the step or the probe changes (the page redraws when the tab shows)."""
        super().__init__()
        self.store = store
        lang = store.lang
        self.note = pn.pane.HTML("", css_classes=["attn-muted"])
        # a crafted position (±inf, NaN, 99, -1) is a notice and the step stays (`screen`)
        self.step = StepSlider(
            store, label=text("timeline.step", lang), options=[0], width=420, visible=False, css_classes=["attn-step"]
        )
        self.probe = pn.widgets.Select(label=text("timeline.probe", lang), options={}, width=420, visible=False)
        self.figures = pn.Column(css_classes=["attn-timeline"])
        self.layout = pn.Column(self.note, self.step, self.probe, self.figures)
        self._snapshots: dict[int, list[Path]] = {}  # step -> its probe trace files
        self._alignment: dict[int, dict] = {}  # step -> its AER table (`align_gold` runs)
        self._importance: dict = {}  # step -> every head's importance on the dev pairs, (kinds, layers, heads)
        self._traces: dict[str, AttentionTrace] = {}  # loaded once per session: redraws only re-plot
        for widget in (self.step, self.probe):
            widget.param.watch(lambda _event: redraw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def setup(self) -> None:
        """Find the probe snapshots of the checkpoint just opened and offer its steps and probes."""
        allows = self.store.roots.allows  # a run's probes/ above a root is not the server's to show
        snapshots = probe_snapshots(self.store.checkpoint, allows)
        self._snapshots = {step: files for step, files in snapshots}
        self._alignment = alignment_snapshots(self.store.checkpoint, allows)
        self._importance = importance_snapshots(self.store.checkpoint, allows)
        lang = self.store.lang
        if not snapshots:
            folder, command = "<code>probes/step_N/</code>", "<code>attnlab train --probes K</code>"
            self.note.object = text("timeline.none", lang, folder=folder, command=command)
            self.step.visible = self.probe.visible = False
            self.figures.objects = []
            return
        steps = [step for step, _ in snapshots]
        span = "–".join(dict.fromkeys(grouped(step, lang) for step in (steps[0], steps[-1])))  # "10–30"; one: "10"
        self.note.object = html.escape(text("timeline.snapshots", lang, count=len(steps), steps=span, last=steps[-1]))
        self.step.options = {grouped(step, lang): step for step in steps}  # as the titles and the note write it
        self.step.value = steps[0]
        probes = {
            f"{i}: {self._trace(path).meta.get('text', path.stem)[:60]}": i for i, path in enumerate(snapshots[-1][1])
        }
        self.probe.param.update(options=probes, value=0)  # (a menu given options keeps the value None)
        self.step.visible = self.probe.visible = True

    def _trace(self, path: Path) -> AttentionTrace:
        key = str(path)
        if key not in self._traces:
            self._traces[key] = AttentionTrace.load(path)
        return self._traces[key]

    def draw(self) -> None:
        if not self._snapshots:
            return
        store, lang = self.store, self.store.lang
        index = self.probe.value or 0
        steps = [s for s in sorted(self._snapshots) if index < len(self._snapshots[s])]  # probe `index` recorded
        step = self.step.value if self.step.value in steps else steps[0]
        now = self._trace(self._snapshots[step][index])
        final = self._trace(self._snapshots[steps[-1]][index])
        kind = store.kind if store.kind in now.kinds else now.kinds[0]
        layer = store.layer if store.layer in now.layers[kind] else now.layers[kind][-1]
        head = min(store.head, now.n_heads - 1)
        entropy = {}  # (step, head) -> mean entropy of that head in the chosen kind and layer
        for s in steps:
            for row in head_stats(self._trace(self._snapshots[s][index])):
                if (row["kind"], row["layer"]) == (kind, layer):
                    entropy[(s, row["head"])] = row["entropy"]
        curves = {text("timeline.curve", lang, head=h): [entropy[(s, h)] for s in steps] for h in range(now.n_heads)}
        probe = text("timeline.probe_text", lang, text=str(now.meta.get("text", "")))
        name = kind_name(kind, lang)
        title = text(
            "timeline.title", lang, step=step, head=text("head.short", lang, kind=name, layer=layer, head=head)
        )
        self.figures.objects = [
            pn.pane.HTML(f"<span class='attn-muted'>{html.escape(probe)}</span>"),
            pn.Row(  # wraps: the difference goes under the map when both do not fit (see WRAP)
                pn.pane.Bokeh(
                    viz.heatmap(
                        now,
                        kind,
                        layer,
                        head,
                        mask=store.mask,
                        title=title,
                        name="timeline-heatmap",
                        budget=380,
                        words=store.words,
                    )
                ),
                pn.pane.Bokeh(
                    viz.diff_figure(now, final, kind, layer, head, budget=380, words=store.words, mask=store.mask)
                ),
                stylesheets=[WRAP],
            ),
            pn.pane.Bokeh(
                viz.timeline_curve(
                    steps,
                    curves,
                    current=step,
                    stat=text("timeline.entropy", lang, kind=name, layer=layer),
                    words=store.words,
                )
            ),
            *self._importance_curve(kind, layer, step),
            *self._aer_curve(layer if kind == "cross" else None, step),
        ]

    def _importance_curve(self, kind: str, layer: int, step: int) -> list[pn.viewable.Viewable]:
        """Each head's importance on the dev pairs across the steps in the open kind and layer:
        empty for a run without importance tables, or with tables of another shape."""
        found = importance_curves(self._importance, kind, layer, self.store.lang)
        if found is None:
            return []
        stat = text("timeline.importance", self.store.lang, kind=kind_name(kind, self.store.lang), layer=layer)
        curve = viz.timeline_curve(*found, step, stat, self.store.words, name="timeline-importance")
        return [pn.pane.Bokeh(curve)]

    def _aer_curve(self, layer: int | None, step: int) -> list[pn.viewable.Viewable]:
        """Each head's AER across the steps in a cross-attention layer (the open one, else the
        best reading's), and the best reading's: empty without AER tables."""
        if not self._alignment:
            return []
        lang, steps = self.store.lang, list(self._alignment)
        tables = [{row["reading"]: row["aer"] for row in t["rows"]} for t in self._alignment.values()]
        last = self._alignment[steps[-1]]
        if layer is None:  # (`alignment_snapshots` checked each row's reading and aer only)
            layer = next((row["layer"] for row in last["rows"] if row.get("layer") is not None), 0)
        heads = sorted(
            {row.get("head") for row in last["rows"] if row.get("method") == "head" and row.get("layer") == layer}
            - {None}
        )
        curves = {
            text("timeline.curve", lang, head=h): [100 * t.get(f"head L{layer} H{h}", float("nan")) for t in tables]
            for h in heads
        }
        curves[text("timeline.aer_best", lang)] = [100 * min(t.values()) for t in tables]
        kind, named = kind_name("cross", lang), last.get("set") or ""  # a table may name no set: "AER % (…)"
        stat = text("timeline.aer" if named else "timeline.aer_unnamed", lang, set=named, kind=kind, layer=layer)
        return [pn.pane.Bokeh(viz.timeline_curve(steps, curves, step, stat, self.store.words, name="timeline-aer"))]
