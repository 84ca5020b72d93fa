"""How a circuit is drawn (`viz.circuit_figure`) on the bundled EN→DE model: a node no edge above
the threshold touches (a sender whose paths all fell under it) is not drawn, and with no edge
the output is drawn alone; the labels of a crowded circuit do not overlap one another or any dot,
by their boxes estimated from their text (0.7 em a column, 1.2 em high) and the figure's size.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from bokeh.models import Text

from attnlab.app.words import figure_words
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.record.circuit import OUTPUT, trace_circuit
from attnlab.viz.circuit import _places, circuit_figure
from attnlab.viz.labels import display_width

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
CLEAN, CORRUPTED = "A man is sleeping on a bench.", "A woman is sleeping on a bench."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def trace(model: Model) -> object:
    return model.translate(CLEAN, record=True).trace


def drawn(fig: object, name: str) -> dict[str, list]:
    return fig.select_one({"name": name}).data_source.data


def test_a_sender_no_path_above_the_threshold_touches_is_not_drawn(model: Model, trace: object) -> None:
    circuit = trace_circuit(model, trace, CORRUPTED, senders=4, threshold=0.1)  # (the menus' choices)
    touched = {node for start, end, _ in circuit.edges for node in (start, end)}
    orphans = [sender for sender in circuit.senders if sender not in touched]
    assert orphans, "this pair at 0.1 has a sender whose paths all fell under it"  # ("cross", 1, 2)
    assert all(orphan in circuit.shares for orphan in orphans)  # (followed: its shares are known)
    assert set(circuit.nodes) == touched | {OUTPUT} and circuit.nodes[-1] == OUTPUT
    nodes = drawn(circuit_figure(circuit), "nodes")
    assert len(nodes["x"]) == len(touched | {OUTPUT})
    _, layers, heads = circuit.total.share.shape
    drawn_at, place = set(zip(nodes["x"], nodes["y"], strict=True)), _places(layers, heads)
    assert {place[node] for node in touched | {OUTPUT}} == drawn_at
    assert not {place[orphan] for orphan in orphans} & drawn_at  # (its faint skeleton dot alone)


def test_a_circuit_with_no_edge_is_the_output_alone(model: Model, trace: object) -> None:
    circuit = trace_circuit(model, trace, CORRUPTED, senders=2, threshold=0.99)
    assert circuit.edges == [] and circuit.nodes == [OUTPUT]
    fig = circuit_figure(circuit)
    assert drawn(fig, "paths")["xs"] == [] and len(drawn(fig, "nodes")["x"]) == 1
    # and says why: a bare skeleton read as a figure still drawing
    said = " ".join(fig.select_one({"name": "empty"}).text.split())
    assert said == "no path carries 0.99 of the change or more: lower the smallest path", said
    assert circuit_figure(trace_circuit(model, trace, CORRUPTED, senders=2)).select_one({"name": "empty"}) is None


def boxes(fig: object) -> tuple[list[tuple[str, tuple]], list[tuple]]:
    """Each node label's estimated box and each node dot's, in screen pixels (y down)."""
    across = (fig.width - 10) / (fig.x_range.end - fig.x_range.start)
    lines = fig.title.text.count("\n") + 1
    up = (fig.height - 10 - 17 * lines - 4) / (fig.y_range.end - fig.y_range.start)
    (renderer,) = [r for r in fig.renderers if isinstance(r.glyph, Text)]  # (the node labels)
    glyph, data = renderer.glyph, renderer.data_source.data
    size = glyph.text_font_size
    font = float((size if isinstance(size, str) else size["value"]).removesuffix("px"))

    def each(spec: object, i: int, default: object) -> object:
        """A glyph property at row i: a column's value, or the one value (the old scalar offsets)."""
        field = spec.get("field") if isinstance(spec, dict) else getattr(spec, "field", spec)
        if isinstance(field, str) and field in data:
            return data[field][i]
        value = spec.get("value") if isinstance(spec, dict) else getattr(spec, "value", spec)
        return default if value is None else value

    labels = []
    for i, text in enumerate(data["label"]):
        sx = (data["x"][i] - fig.x_range.start) * across + each(glyph.x_offset, i, 0)
        sy = (fig.y_range.end - data["y"][i]) * up + each(glyph.y_offset, i, 0)
        width, height = 0.7 * font * display_width(text), 1.2 * font
        left = sx - {"left": 0, "center": width / 2, "right": width}[each(glyph.text_align, i, "left")]
        top = sy - {"top": 0, "middle": height / 2, "bottom": height}[each(glyph.text_baseline, i, "bottom")]
        labels.append((text, (left, top, left + width, top + height)))
    nodes = drawn(fig, "nodes")
    dots = []
    for x, y, size in zip(nodes["x"], nodes["y"], nodes["size"], strict=True):
        sx, sy = (x - fig.x_range.start) * across, (fig.y_range.end - y) * up
        dots.append((sx - size / 2, sy - size / 2, sx + size / 2, sy + size / 2))
    return labels, dots


def meet(a: tuple, b: tuple) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


@pytest.mark.parametrize("lang", ["en", "es", "zh"])
def test_the_labels_of_a_crowded_circuit_do_not_overlap(model: Model, trace: object, lang: str) -> None:
    circuit = trace_circuit(model, trace, CORRUPTED, senders=8, threshold=0.02)  # the menus' most
    assert len(circuit.nodes) >= 20  # (crowded: both towers, several nodes a row, big dots at the output)
    labels, dots = boxes(circuit_figure(circuit, words=figure_words(lang)))
    clashes = [(a, b) for (a, box_a), (b, box_b) in combinations(labels, 2) if meet(box_a, box_b)]
    assert not clashes, clashes
    on_dots = [(text, i) for text, box in labels for i, dot in enumerate(dots) if meet(box, dot)]
    assert not on_dots, on_dots


def test_curves_pass_under_the_names_and_a_path_is_said_in_the_pages_language(model: Model, trace: object) -> None:
    """The long encoder→decoder curves struck through the decoder's row names ("masked self-attn
    L2") and ran over node labels: both stand on a white ground now. A path's hover wrote "→ 输出:
    +0.222" with an ASCII colon where the node's wrote "：总效应"."""
    from bokeh.models import Label

    circuit = trace_circuit(model, trace, CORRUPTED, senders=8, threshold=0.02)
    fig = circuit_figure(circuit, words=figure_words("zh"))
    rows = [label for label in fig.select(Label) if label.text_color == "#888888"]
    labels = fig.select_one({"name": "labels"}).glyph
    assert rows and all(label.background_fill_color == "white" for label in rows)
    assert labels.background_fill_color == "white"
    tips = drawn(fig, "paths")["tip"]
    assert tips and all("：" in tip and ": " not in tip for tip in tips), tips[:3]
