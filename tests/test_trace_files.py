"""Trace files: `save` writes only what `load` reads back, and `load` refuses hand-edited or
damaged traces (non-finite weights or weights outside [0, 1], impossible layer indices) in one
line instead of handing the views something they crash on or draw as NaN."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load, save

from attnlab import preset
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.model.transformer import Transformer
from attnlab.record.recorder import model_info, record
from attnlab.record.trace import AttentionTrace


@pytest.fixture(scope="module")
def model() -> Transformer:
    return Transformer(preset("tiny", n_layers=3)).eval()


def _trace(model: Transformer, **selection) -> AttentionTrace:
    """A recorded trace of one 4-piece source and 3-piece target, as `translate` makes them."""
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    with torch.no_grad(), record(model, **selection) as rec:
        model(src, tgt)
    return rec.traces(src, tgt, [["a", "b", "c", "</s>"]], [["x", "y", "</s>"]], model_info(model, "ckpt"))[0]


def _rewrite(path: Path, tensors: Callable[[dict], dict] = dict, info: Callable[[dict], None] = lambda info: None):
    """Edit a saved trace by hand, as a user (or a bad disk) might: its arrays and its JSON."""
    raw = path.read_bytes()
    metadata = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
    edited = json.loads(metadata["info"])
    info(edited)
    path.write_bytes(save(tensors(load(raw)), metadata={**metadata, "info": json.dumps(edited)}))


def _refused(action: Callable[[], object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        action()
    assert "\n" not in str(info.value)


def test_the_weights_a_trace_hands_out_cannot_change_it(model: Transformer, tmp_path: Path) -> None:
    """`w = trace.attention("cross", 0); w[:, :, -1] = 0`, meant on a copy, changed the trace: its
    head statistics, every view, and the file `save` wrote (rows no longer summing to 1)."""
    trace = _trace(model)
    before = trace.attention("cross", 0).copy()
    with pytest.raises(ValueError, match="read-only"):
        trace.attention("cross", 0)[:, :, -1] = 0
    trace.save(tmp_path / "t.trace")
    assert np.array_equal(AttentionTrace.load(tmp_path / "t.trace").attention("cross", 0), before)
    copied = trace.attention("cross", 0).copy()  # what a caller edits
    copied[:, :, -1] = 0
    assert np.array_equal(trace.attention("cross", 0), before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_a_damaged_trace(model: Transformer, tmp_path: Path, bad: float) -> None:
    """They loaded, and then the views raised a numpy IndexError or drew NaN."""
    path = _trace(model).save(tmp_path / "t.trace")

    def poison(tensors: dict) -> dict:
        tensors["cross.1"][2, 1, 0] = bad
        return tensors

    _rewrite(path, tensors=poison)
    _refused(lambda: AttentionTrace.load(path), CheckpointError, "cross maps hold NaN or infinite weights")


@pytest.mark.parametrize(
    "bad, selection, where",
    [
        (1.5, {}, "cross layer 1 head 2"),
        (-0.25, {}, "cross layer 1 head 2"),
        (2.0, {"heads": [1, 3]}, "cross layer 1 head 3"),
    ],
    ids=["above-1", "negative", "heads-by-model-index"],
)
def test_weights_outside_0_1_are_a_damaged_trace(
    model: Transformer, tmp_path: Path, bad: float, selection: dict, where: str
) -> None:
    """An edited or foreign file's weight of 1.5 or -0.25 loaded and was drawn on the 0..1 scale
    and pooled into head statistics; now it is one line naming the file and the head. bf16
    rounding (a step past 1.0 or 0) still loads."""
    path = _trace(model, **selection).save(tmp_path / "t.trace")
    row = 1 if selection else 2  # the map's row of model head 3 (of the heads recorded), or of head 2

    def edit(value: float) -> Callable[[dict], dict]:
        def poison(tensors: dict) -> dict:
            tensors["cross.1"][row, 1, 0] = value
            return tensors

        return poison

    for rounded in (1 + 2**-7, -(2**-7)):
        _rewrite(path, tensors=edit(rounded))
        assert AttentionTrace.load(path).maps["cross"][1][row, 1, 0] == np.float32(rounded)
    _rewrite(path, tensors=edit(bad))
    _refused(
        lambda: AttentionTrace.load(path),
        CheckpointError,
        rf"^{path}: damaged trace \({where} holds a weight of {bad:g}: attention weights lie in \[0, 1\]\)$",
    )


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda t: t.src_tokens.append("extra"), "encoder maps are not"),
        (lambda t: t.maps["decoder"][0].__setitem__((0, 0, 0), np.nan), "NaN or infinite"),
        (lambda t: t.maps["cross"][2].__setitem__((3, 0, 0), 1.25), r"cross layer 2 head 3 holds a weight of 1.25"),
        (lambda t: t.maps.clear(), "no attention maps"),
        (lambda t: t.maps["cross"].clear(), "no attention maps"),
        (lambda t: t.meta.__setitem__("when", datetime.date(2024, 1, 2)), r"meta\['when'\].*got date"),
        (lambda t: t.meta.__setitem__("runs", {1: "a"}), r"meta\['runs'\].* key 1 is not a string"),
        (lambda t: t.meta.__setitem__("scores", [np.zeros(2)]), r"meta\['scores'\]\[0\].*got ndarray"),
    ],
    ids=["shapes", "nan", "above-1", "no-maps", "no-cross-maps", "date", "int-key", "array"],
)
def test_save_writes_nothing_that_load_would_refuse(model: Transformer, tmp_path: Path, damage, match) -> None:
    """`save` wrote files `load` then refused (no maps, shapes that do not match the tokens) and
    raised json's raw TypeError on meta it cannot store; now each is one line and no file."""
    trace = _trace(model)
    damage(trace)
    _refused(lambda: trace.save(tmp_path / "t.trace"), CheckpointError, match)
    assert not list(tmp_path.iterdir())


def test_numpy_scalars_in_meta_are_saved_as_numbers(model: Transformer, tmp_path: Path) -> None:
    trace = _trace(model)
    trace.meta.update(score=np.float32(-1.5), step=np.int64(7), pair=(1, np.bool_(True)))
    meta = AttentionTrace.load(trace.save(tmp_path / "t.trace")).meta
    assert meta["score"] == -1.5 and meta["step"] == 7 and meta["pair"] == [1, True]
    assert [type(meta[key]) for key in ("score", "step")] == [float, int] and type(meta["pair"][1]) is bool


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda info: info["layers"].update(cross=[-3, -2, -1]), "cross layer indices"),
        (lambda info: info["layers"].update(cross=[1, 1, 1]), "cross layer indices"),
        (lambda info: info["layers"].update(encoder=[2, 1, 0]), "encoder layer indices"),
        (lambda info: info["layers"].update(decoder=[0, 1, 7]), r"decoder layer indices \[0, 1, 7\] .*\[0, 3\)"),
        (lambda info: info["model"]["config"].update(n_layers=0), "n_layers is not a positive integer"),
    ],
    ids=["negative", "repeated", "decreasing", "past-the-top", "zero-n_layers"],
)
def test_hand_edited_layer_indices_are_refused(model: Transformer, tmp_path: Path, edit, match) -> None:
    """Each loaded before: `attention` then answered for the wrong layer, or for none."""
    path = _trace(model).save(tmp_path / "t.trace")
    _rewrite(path, info=edit)
    _refused(lambda: AttentionTrace.load(path), CheckpointError, match)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda info: info.update(heads=[0, 1, 2, 9]), r"head indices \[0, 1, 2, 9\] are not within \[0, 4\)"),
        (lambda info: info.update(heads=[-1, 0, 1, 2]), r"head indices \[-1, 0, 1, 2\] are not within"),
        (lambda info: info["model"]["config"].update(n_heads=2), r"encoder maps are not \(heads, 4, 4\)"),
        (lambda info: info["model"]["config"].update(n_heads="4"), "n_heads is not a positive integer, got '4'"),
    ],
    ids=["past-the-last", "negative", "rows-past-n_heads", "n_heads-string"],
)
def test_hand_edited_head_indices_are_refused(model: Transformer, tmp_path: Path, edit, match) -> None:
    """Each loaded: views and head_stats named head 9 of a 4-head model, `head_row(-1)` of 4 rows
    said to be of 2 heads opened head 1, and an n_heads of "4" made `head_row` a ValueError."""
    path = _trace(model).save(tmp_path / "t.trace")
    _rewrite(path, info=edit)
    _refused(lambda: AttentionTrace.load(path), CheckpointError, match)


def test_traces_of_some_layers_and_heads_still_load(model: Transformer, tmp_path: Path) -> None:
    """The layer checks must not refuse what `record` makes of a selection."""
    trace = _trace(model, kinds=["cross", "encoder"], layers=[0, -1], heads=[1, 3])
    assert trace.layers == {"encoder": [0, 2], "cross": [0, 2]}
    loaded = AttentionTrace.load(trace.save(tmp_path / "t.trace"))
    assert np.array_equal(loaded.attention("cross", -1), trace.attention("cross", 2))
    assert loaded.heads == [1, 3] and loaded.n_heads == 2
    by_hand = AttentionTrace(["a"], [], {"encoder": [np.ones((1, 1, 1), np.float32)]}, layers={"encoder": [4]})
    assert AttentionTrace.load(by_hand.save(tmp_path / "by_hand.trace")).attention("encoder", -1).shape == (1, 1, 1)


def test_save_expands_home_and_refuses_a_directory_path(
    model: Transformer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "~/x.trace" made a literal ./~ folder, and "newdir/" a FILE named newdir."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    trace = _trace(model)
    assert trace.save("~/x.trace") == tmp_path / "home" / "x.trace"
    assert AttentionTrace.load("~/x.trace").src_tokens == trace.src_tokens
    _refused(lambda: trace.save("newdir/"), CheckpointError, "newdir/ names a directory")
    _refused(lambda: trace.save(""), CheckpointError, "^'' names a directory")  # (it began " names a")
    _refused(lambda: trace.save(None), CheckpointError, "expected a path to write the trace to, got NoneType")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


def test_save_never_replaces_what_is_not_a_regular_file(model: Transformer, tmp_path: Path) -> None:
    """`save("/dev/null")` renamed the trace over the device (as root: /dev/null became a file
    of attention weights); a pipe stands in for the device here."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    _refused(lambda: _trace(model).save(pipe), CheckpointError, "pipe is not a regular file")
    assert stat.S_ISFIFO(pipe.stat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("maps", [{}, {"cross": []}])
def test_a_trace_without_maps_is_refused_when_made(maps: dict) -> None:
    """`repr`, `n_heads` and `attention` each raised their own IndexError, StopIteration or
    ValueError on such a trace; every accessor reads a kind's first map, so it is refused once."""
    _refused(lambda: AttentionTrace(["a"], ["b"], maps), AttnlabError, "a trace needs attention maps")


@pytest.mark.parametrize(
    "change, match",
    [
        ({"src_tokens": ["a"]}, r"encoder maps are not \(heads, 1, 1\)"),  # heatmap_png: IndexError
        ({"heads": [0]}, r"maps are not \(heads,"),  # head_stats: zip() is longer
        ({"heads": [1, 1]}, "head indices are not distinct integers"),  # it saved
        ({"model": "x"}, "the model's description is not a mapping"),  # AttributeError: 'get'
        ({"meta": [1]}, "meta is not a mapping"),
        ({"masks": {"cross": np.ones((2, 2), bool)}}, "a mask does not match its maps"),  # boolean index
        ({"maps": None}, "a trace's maps is a dict by attention kind, got NoneType"),  # AttributeError: 'items'
        ({"masks": [np.ones((4, 4), bool)]}, "a trace's masks is a dict by attention kind, got list"),
        ({"layers": None}, "a trace's layers is a dict by attention kind, got NoneType"),  # 'setdefault'
    ],
)
def test_a_trace_made_by_hand_is_checked_when_made(model: Transformer, change: dict, match: str) -> None:
    """Only `save`, `load` and the recorder checked a trace: one made by hand that did not fit
    its own tokens reached the views, which raised IndexError, ValueError or AttributeError."""
    fields = dataclasses.asdict(_trace(model)) | change
    _refused(lambda: AttentionTrace(**fields), AttnlabError, match)


def test_a_trace_file_without_maps_is_damaged(model: Transformer, tmp_path: Path) -> None:
    path = _trace(model).save(tmp_path / "t.trace")
    _rewrite(path, tensors=lambda tensors: {})
    _refused(lambda: AttentionTrace.load(path), CheckpointError, "damaged trace .*needs attention maps")


def test_maps_made_by_hand_become_float32_arrays_or_are_refused_when_made() -> None:
    """A torch tensor's heatmap failed in bokeh ("step must be greater than zero"), and an object
    array, or a ragged list, in `_damage` as a NumPy TypeError or ValueError."""
    from attnlab import viz

    half = torch.full((1, 2, 2), 0.5, dtype=torch.bfloat16, requires_grad=True)
    trace = AttentionTrace(["a", "b"], [], {"encoder": [half, [[[1, 0], [0, 1]]]]})
    assert all(type(m) is np.ndarray and m.dtype == np.float32 for m in trace.maps["encoder"])
    assert trace.maps["encoder"][0].tolist() == [[[0.5, 0.5], [0.5, 0.5]]]
    viz.heatmap(trace, "encoder", 0, 0)
    for bad in (np.array([[[0.5, "x"], [0.5, 0.5]]], dtype=object), [[[0.5, 0.5], [0.5]]], np.full((1, 2, 2), "0.5")):
        _refused(
            lambda: AttentionTrace(["a", "b"], [], {"encoder": [bad]}), AttnlabError, "encoder maps hold real numbers"
        )


@pytest.mark.parametrize(
    "off, match",
    [
        ([1, 2], r"the trace's heads_off is a list of \[kind, layer, head\], got \[1, 2\]"),  # rollout: TypeError
        ("abc", r"the trace's heads_off is a list of \[kind, layer, head\], got 'abc'"),  # heatmap: TypeError
        ([["cross", 0]], r"heads_off is a list of \[kind, layer, head\], got \[\['cross', 0\]\]"),
        ([["cross", 0, 9]], r"heads_off names head 9 of cross layer 0: .*heads are \[0, 4\)"),  # ignored
        ([["cross", 3, 0]], r"heads_off names head 0 of cross layer 3: .*layers are \[0, 3\)"),
        ([["cross", True, 0]], r"heads_off names head 0 of cross layer True"),
        ([["self", 0, 0]], r"heads_off names an unknown attention kind 'self'"),
    ],
    ids=["numbers", "string", "pairs", "head-past-the-last", "layer-past-the-top", "bool-layer", "unknown-kind"],
)
def test_an_edited_heads_off_is_refused_when_read_made_or_loaded(
    model: Transformer, tmp_path: Path, off: object, match: str
) -> None:
    """`meta["heads_off"]` is free to edit, and each view read it its own way: rollout raised a
    TypeError on [1, 2] and ignored head 9 of a 4-head model, the heatmap's title a TypeError on
    "abc". One check reads it for all, and the constructor and `load` (naming the file) refuse it."""
    from attnlab import rollout, viz

    trace = _trace(model)
    path = trace.save(tmp_path / "t.trace")
    trace.meta["heads_off"] = off
    _refused(lambda: rollout(trace, "cross"), AttnlabError, match)
    _refused(lambda: viz.heatmap(trace, "cross", 0, 0), AttnlabError, match)
    _refused(lambda: AttentionTrace(**dataclasses.asdict(trace)), AttnlabError, match)
    _rewrite(path, info=lambda info: info["meta"].update(heads_off=off))
    _refused(lambda: AttentionTrace.load(path), CheckpointError, rf"^{path}: damaged trace \(.*{match}")


def test_heads_off_made_by_hand_as_tuples_are_read_as_the_recorder_writes_them(model: Transformer) -> None:
    """Rollout compared each entry's [:2] with a list, so a tuple entry silently switched nothing off."""
    from attnlab import rollout

    listed, tupled = _trace(model), _trace(model)
    listed.meta["heads_off"] = [["cross", 1, 2], ["cross", 1, 0]]
    tupled.meta["heads_off"] = [("cross", 1, 0), ("cross", 1, 2), ("cross", 1, 2)]
    assert listed.heads_off == tupled.heads_off == {("cross", 1): [0, 2]}
    assert np.array_equal(rollout(listed, "cross"), rollout(tupled, "cross"))
    assert not np.array_equal(rollout(listed, "cross"), rollout(_trace(model), "cross"))


def _pieces(source: int, target: int, kinds: tuple[str, ...]) -> AttentionTrace:
    """A one-head trace made by hand of `source` and `target` pieces, with uniform maps."""
    sizes = {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}
    maps = {kind: [np.full((1, *sizes[kind]), 1 / max(sizes[kind][1], 1), np.float32)] for kind in kinds}
    return AttentionTrace([f"s{i}" for i in range(source)], [f"t{i}" for i in range(target)], maps)


@pytest.mark.parametrize(
    "source, target, kinds, match",
    [
        (0, 2, ("encoder", "decoder", "cross"), "encoder attention needs at least one source piece"),
        (0, 2, ("cross",), "cross attention needs at least one source piece"),
        (3, 0, ("encoder", "decoder", "cross"), "decoder attention needs at least one target piece"),
        (0, 0, ("cross",), "cross attention needs at least one target piece and one source piece"),
    ],
    ids=["no-source", "no-source-cross-only", "no-target", "neither"],
)
def test_a_trace_without_source_or_target_pieces_is_refused(
    model: Transformer, tmp_path: Path, source: int, target: int, kinds: tuple, match: str
) -> None:
    """Such a trace was made, saved and loaded, and then bokeh refused the heatmap's (0, 0)
    ranges, `viz.grid` divided by zero and `head_stats` raised an IndexError. An encoder-only
    trace has no target pieces, and still is one."""
    _refused(lambda: _pieces(source, target, kinds), AttnlabError, f"^{match}$")
    path = _trace(model).save(tmp_path / "t.trace")
    _rewrite(
        path,
        tensors=lambda tensors: {
            name: array[:, :0, :0] if array.ndim == 3 else array[:0, :0] for name, array in tensors.items()
        },
        info=lambda info: info.update(src_tokens=[], tgt_tokens=[]),
    )
    _refused(lambda: AttentionTrace.load(path), CheckpointError, rf"^{path}: damaged trace \(encoder attention needs")
    assert _pieces(3, 0, ("encoder",)).tgt_tokens == []


def test_masks_are_boolean_or_0_1_integers(model: Transformer, tmp_path: Path) -> None:
    """A float mask was taken (only its shape was checked) and `viz.heatmap` then raised numpy's
    TypeError "ufunc 'invert' not supported"; set after the trace was made, it is refused where it
    is read and by `save`. 0/1 integers, what a trace file stores, become booleans."""
    from attnlab import viz

    half = np.tril(np.ones((3, 3))) * 0.5
    fields = dataclasses.asdict(_trace(model))
    match = r"the decoder mask holds booleans \(True where attending was allowed\) or 0/1 integers, got float64"
    _refused(lambda: AttentionTrace(**fields | {"masks": {"decoder": half}}), AttnlabError, f"^{match}$")
    _refused(lambda: AttentionTrace(**fields | {"masks": {"decoder": half.astype(int) + 2}}), AttnlabError, "got int")
    ones = AttentionTrace(**fields | {"masks": {"decoder": np.tril(np.ones((3, 3), np.int64))}})
    assert ones.mask("decoder").dtype == bool and np.array_equal(ones.mask("decoder"), np.tril(np.ones((3, 3), bool)))
    trace = _trace(model)
    trace.masks["decoder"] = half
    _refused(lambda: viz.heatmap(trace, "decoder", 0, 0), AttnlabError, f"^{match}$")
    _refused(lambda: trace.save(tmp_path / "t.trace"), CheckpointError, match)
    path = _trace(model).save(tmp_path / "t.trace")
    _rewrite(path, tensors=lambda tensors: tensors | {"mask.decoder": np.full((3, 3), 2, np.uint8)})
    _refused(lambda: AttentionTrace.load(path), CheckpointError, rf"^{path}: damaged trace \(the decoder mask holds")
