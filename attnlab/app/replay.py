"""A training run in a notebook: the probe sentences `attnlab train --probes N` recorded at each
checkpoint, replayed step by step (`replay`), for the head a `HeadPicker` opens: its map at the
chosen step, its difference to the last step, every head's entropy across the steps, and (for a
run that weighed them) every head's importance on the dev pairs across the steps.

Part of the notebook widgets (`attnlab.widgets` exports `replay` and `Timeline`); like them it
speaks `lang` ("en", "es", "zh"), figures included (`attnlab.app.words`).
"""

from __future__ import annotations

import numbers
from pathlib import Path

import ipywidgets as w
import numpy as np
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app import i18n
from attnlab.app.checkpoints import importance_curves, importance_snapshots, probe_snapshots
from attnlab.app.notebook import BokehPane, ErrorBox, HeadPicker, reporting, trace_caption
from attnlab.app.words import figure_words
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.model.checkpoint import user_path
from attnlab.record.stats import head_stats
from attnlab.record.trace import KINDS, AttentionTrace


class Timeline(w.VBox):
    """One probe sentence across a training run: the selected head at each saved step, its
    difference to the last step, every head's entropy across steps, and with `importance`
    ({step: (kinds, layers, heads)}, as `attnlab.app.checkpoints.importance_snapshots` reads a
    run's) every head's importance across steps."""

    def __init__(
        self,
        snapshots: list[tuple[int, AttentionTrace]],
        lang: str = i18n.DEFAULT,
        importance: dict[int, np.ndarray] | None = None,
    ) -> None:
        self.lang = i18n.checked(lang)
        snapshots = _checked_snapshots(snapshots, lang)
        self.importance = _checked_importance(importance, lang)
        self.steps = [step for step, _ in snapshots]
        self.traces = dict(snapshots)
        self.final = self.traces[self.steps[-1]]
        self._entropy = {  # step -> (kind, layer, head) -> mean row entropy
            step: {(r["kind"], r["layer"], r["head"]): r["entropy"] for r in head_stats(trace)}
            for step, trace in snapshots
        }
        self.step = w.SelectionSlider(
            options=self.steps,
            value=self.steps[-1],
            description=i18n.text("widgets.step", lang),
            continuous_update=False,
        )
        self.step.observe(lambda _change: self.redraw(), "value")
        self.picker = HeadPicker(self.redraw, lang)
        self.heatmap = BokehPane()
        self.diff = BokehPane()
        self.curve = BokehPane()
        self.importance_curve = BokehPane()
        self.errors = ErrorBox(lang)
        figures = w.HBox([self.heatmap, self.diff], layout=w.Layout(flex_flow="row wrap"))
        header = w.HTML(trace_caption(self.final, lang))
        super().__init__([header, self.picker, self.step, self.errors, figures, self.curve, self.importance_curve])
        self.picker.configure(self.final)
        self.redraw()

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {
            "heatmap": self.heatmap.figure,
            "diff": self.diff.figure,
            "curve": self.curve.figure,
            "importance_curve": self.importance_curve.figure,
        }

    def redraw(self) -> None:
        self.errors.clear()
        with reporting(self.errors):
            kind, layer, head = self.picker.value
            step, lang = self.step.value, self.lang
            words, trace = figure_words(lang), self.traces[step]
            full = i18n.kind_title(kind, lang)
            title = i18n.text("widgets.step_title", lang, step=step, kind=full, layer=layer, head=head)
            self.heatmap.update(viz.heatmap(trace, kind, layer, head, title=title, budget=420, words=words))
            self.diff.update(viz.diff_figure(trace, self.final, kind, layer, head, words=words))
            heads = self.final.heads or list(range(self.final.n_heads))
            curves = {
                i18n.text("timeline.curve", lang, head=h): [self._entropy[s][(kind, layer, h)] for s in self.steps]
                for h in heads
            }
            stat = i18n.text("timeline.entropy", lang, kind=i18n.kind_name(kind, lang), layer=layer)
            self.curve.update(viz.timeline_curve(self.steps, curves, current=step, stat=stat, words=words))
            found = importance_curves(self.importance, kind, layer, lang)
            stat = i18n.text("timeline.importance", lang, kind=i18n.kind_name(kind, lang), layer=layer)
            self.importance_curve.update(None if found is None else viz.timeline_curve(*found, step, stat, words))


def _checked_snapshots(snapshots: object, lang: str) -> list[tuple[int, AttentionTrace]]:
    """(step, trace) pairs of one probe, steps increasing; else one line in `lang`: none was an
    IndexError, a step given twice dropped a trace without a word, and a trace of other heads (or
    another sentence) a KeyError, or a difference map of two sentences, at the first redraw."""
    pairs = list(snapshots) if isinstance(snapshots, list | tuple) else []
    if not pairs:
        raise AttnlabError(i18n.text("widgets.snapshots", lang, got=repr(snapshots)[:40]))
    for pair in pairs:
        a_pair = isinstance(pair, tuple | list) and len(pair) == 2
        if not (a_pair and isinstance(pair[1], AttentionTrace)):
            got = f"({type(pair[0]).__name__}, {type(pair[1]).__name__})" if a_pair else type(pair).__name__
            raise AttnlabError(i18n.text("widgets.snapshots", lang, got=f"[..., {got}, ...]"))
    steps = [step for step, _ in pairs]
    whole = all(isinstance(step, numbers.Integral) and not isinstance(step, bool) for step in steps)
    if not whole or steps != sorted(set(steps)):
        raise AttnlabError(i18n.text("widgets.snapshot_steps", lang, steps=", ".join(map(repr, steps))))
    last_step, last = pairs[-1]
    for step, trace in pairs:
        if _probe(trace) != _probe(last):
            raise AttnlabError(i18n.text("widgets.snapshot_other", lang, step=step, last=last_step))
    return [(int(step), trace) for step, trace in pairs]


def _checked_importance(importance: object, lang: str) -> dict[int, np.ndarray]:
    """{step: (kinds, layers, heads) importance}, as `importance_snapshots` reads a run's; else one
    line in `lang` (a list of lists was an AttributeError in the error box, a table of two kinds
    an IndexError, each with a traceback)."""
    if importance is None:
        return {}
    if not isinstance(importance, dict):
        raise AttnlabError(i18n.text("widgets.importance_tables", lang, got=type(importance).__name__))
    tables = {}
    for step, table in importance.items():
        try:
            found = np.asarray(table) if isinstance(table, np.ndarray | list | tuple) else None
        except ValueError:  # ragged lists
            found = None
        numeric = found is not None and found.dtype.kind in "iuf"
        if not (numeric and found.ndim == 3 and found.shape[0] == len(KINDS) and isinstance(step, numbers.Integral)):
            got = f"{step!r}: {type(table).__name__}" + (f" of shape {found.shape}" if found is not None else "")
            raise AttnlabError(i18n.text("widgets.importance_tables", lang, got=got[:80]))
        tables[int(step)] = found.astype(float)
    return tables


def _probe(trace: AttentionTrace) -> tuple:
    """What the views of a Timeline read alike at every step: the sentence pair, kinds, layers, heads."""
    return trace.src_tokens, trace.tgt_tokens, trace.layers, trace.heads or list(range(trace.n_heads))


def replay(run_or_checkpoint: str | Path, probe: int = 0, lang: str = i18n.DEFAULT) -> Timeline:
    """Replay probe sentence `probe` over the checkpoints a run saved (`attnlab train --probes N`);
    `~` is the home directory, as a shell (and `attnlab.load`) reads it."""
    lang = i18n.checked(lang)
    if not isinstance(run_or_checkpoint, str | Path):
        raise AttnlabError(i18n.text("widgets.replay_path", lang, got=type(run_or_checkpoint).__name__))
    directory = user_path(run_or_checkpoint)  # "~/runs/x" and a misspelt path said "train with --probes N"
    if directory.exists() and not directory.is_dir():  # (a trace file was "no such directory")
        raise CheckpointError(i18n.text("widgets.run_is_file", lang, run=run_or_checkpoint))
    if not directory.is_dir():
        raise CheckpointError(i18n.text("widgets.no_run", lang, run=run_or_checkpoint))
    snapshots = probe_snapshots(directory)
    if not snapshots:
        raise AttnlabError(i18n.text("widgets.no_probes", lang, run=run_or_checkpoint))
    recorded = min(len(files) for _, files in snapshots)  # every step must hold the probe
    # a bool, a float or a negative number is no probe (-1 once opened the last one silently)
    if isinstance(probe, bool) or not isinstance(probe, numbers.Integral) or not 0 <= probe < recorded:
        shown = probe if isinstance(probe, numbers.Real) else repr(probe)  # "0" read "probe 0 was not recorded"
        raise AttnlabError(i18n.text("widgets.probe_missing", lang, probe=shown, count=recorded))
    chosen = [(step, AttentionTrace.load(files[int(probe)])) for step, files in snapshots]
    return Timeline(chosen, lang, importance_snapshots(directory))
