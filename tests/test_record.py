"""Recording: changes nothing, removes itself, records true distributions, saves losslessly."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab import preset
from attnlab.decode.api import Result
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError, CheckpointError, RecordingError
from attnlab.model.transformer import KVCache, Transformer
from attnlab.record.ablation import ablate
from attnlab.record.equation import attention_parts
from attnlab.record.recorder import model_info, record, weights_hash
from attnlab.record.stats import COLUMNS, head_pattern, head_stats, sentence_stats
from attnlab.record.trace import AttentionTrace


@pytest.fixture
def model() -> Transformer:
    return Transformer(preset("tiny", n_layers=3)).eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, 1000, (3, 9))
    src[0, 6:] = 0  # padding
    src[1, 8:] = 0
    tgt = torch.randint(4, 1000, (3, 7))
    tgt[:, 0] = 2
    tgt[0, 4:] = 0
    return src, tgt


def _tokens(ids: torch.Tensor) -> list[list[str]]:
    return [[f"t{i}" for i in row if i != 0] for row in ids.tolist()]


def test_recording_changes_nothing(model: Transformer) -> None:
    src, tgt = _batch()
    with torch.no_grad():
        plain_memory = model.encode(src)
        plain = model(src, tgt)
        with record(model) as rec:
            recorded_memory = model.encode(src)
            recorded = model(src, tgt)
    assert torch.allclose(plain_memory, recorded_memory, atol=1e-5)
    assert torch.allclose(plain, recorded, atol=1e-5)
    assert len(rec.captures) == 3 * 3


def test_hooks_removed_after_exit_and_after_exception(model: Transformer) -> None:
    assert len(model.attention_modules()) == 3 * 3  # the checks below are not over an empty list
    with record(model):
        assert all(m.hook is not None for m in model.attention_modules())
    assert all(m.hook is None for m in model.attention_modules())
    with pytest.raises(RuntimeError, match="boom"), record(model, kinds=["cross"]):
        raise RuntimeError("boom")
    assert all(m.hook is None for m in model.attention_modules())
    with pytest.raises(AttnlabError, match="unknown attention kind"), record(model, kinds=["sideways"]):
        pass


@pytest.mark.parametrize("intervention", ["record", "ablate"])
def test_a_recording_or_ablation_holds_for_its_own_thread_only(model: Transformer, intervention: str) -> None:
    """A server shares one model among sessions: while one thread records (or switches heads
    off), another thread's forward pass of the same model must neither reach the recording nor
    be ablated. Before the hooks lived per thread, the other pass's weights landed in the
    recording (a crash, or a trace made of two sentences) and the other output was ablated."""
    src, tgt = _batch()
    with torch.no_grad():
        plain = model(src, tgt)
    opened, other_done = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def other() -> None:
        opened.wait(10)
        seen["hooks"] = [m.hook for m in model.attention_modules()] + [m.head_mask for m in model.attention_modules()]
        with torch.no_grad():
            seen["out"] = model(src, tgt)
        other_done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with torch.no_grad():
        if intervention == "record":
            with record(model) as rec:
                opened.set()
                assert other_done.wait(10)
                model(src, tgt)
            assert {len(capture.weights) for capture in rec.captures.values()} == {1}  # this thread's one pass
        else:
            with ablate(model, {("cross", 0): [0, 1]}):
                opened.set()
                assert other_done.wait(10)
                ablated = model(src, tgt)
            assert not torch.allclose(ablated, plain, atol=1e-3)  # the ablation did act here
    thread.join()
    assert seen["hooks"] == [None] * (2 * len(model.attention_modules()))
    assert torch.equal(seen["out"], plain)


def test_a_compiled_model_is_not_recorded_and_says_so(model: Transformer) -> None:
    """Compiled graphs do not read the per-thread hooks: the traces say nothing was recorded
    instead of coming back empty."""
    src, tgt = _batch()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad(), record(model) as rec:
        compiled(src, tgt)
    with pytest.raises(AttnlabError, match="nothing was recorded"):
        rec.traces(src, tgt, _tokens(src), _tokens(tgt))


def test_rows_are_distributions_and_masked_cells_are_zero(model: Transformer) -> None:
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    dec = rec.weights("decoder", 0)  # (B, h, Lt, Lt), padded batch
    enc = rec.weights("encoder", -1)
    assert torch.allclose(dec.sum(-1), torch.ones_like(dec.sum(-1)), atol=1e-5)
    assert (dec.triu(1) == 0).all()  # future positions exactly zero
    assert (enc[0, :, :, 6:] == 0).all() and (enc[1, :, :, 8:] == 0).all()  # padding keys exactly zero
    cross = rec.weights("cross", 1)
    assert (cross[0, :, :, 6:] == 0).all() and (cross[1, :, :, 8:] == 0).all()
    traces = rec.traces(src, tgt, _tokens(src), _tokens(tgt))
    assert [len(t.src_tokens) for t in traces] == [6, 8, 9]
    for trace in traces:
        # (cut to the sentence, the encoder and cross masks are all True: the padding checks are above)
        assert trace.kinds == ["encoder", "decoder", "cross"] and not trace.mask("decoder").all()
        for kind in trace.kinds:
            for layer in range(3):
                weights = trace.attention(kind, layer)
                assert np.allclose(weights.sum(-1), 1.0, atol=1e-5)
                assert weights.shape[1:] == trace.mask(kind).shape
                assert (weights[:, ~trace.mask(kind)] == 0).all()
    assert traces[0].attention("cross", -1).shape == (4, 4, 6)


def test_recorded_weights_are_the_ones_used(model: Transformer) -> None:
    src, tgt = _batch()
    layer = model.decoder["layers"][1].cross_attn
    outputs = []
    handle = layer.register_forward_hook(lambda m, i, o: outputs.append(o))
    try:
        with torch.no_grad(), record(model, kinds=["cross"], layers=[1], keep_values=True) as rec:
            model(src, tgt)
    finally:
        handle.remove()
    weights = rec.weights("cross", 1)
    values = rec.values("cross", 1)[0]
    heads_out = weights @ values  # (B, h, Lt, d_v)
    merged = heads_out.transpose(1, 2).reshape(src.size(0), tgt.size(1), -1)
    assert torch.allclose(layer.w_o(merged), outputs[0], atol=1e-5)


def test_values_recorded_while_beam_decoding_stay_as_they_were(model: Transformer) -> None:
    """The decoder's K/V cache reuses its buffers from one reorder to the next; the values a
    recording keeps must be its own copies, not views that a later step overwrites."""
    src = torch.randint(4, 1000, (3, 7))
    snapshots = []
    with torch.no_grad(), record(model, kinds=["decoder"], keep_values=True) as rec:
        mask = model.src_mask(src)
        memory, cache = model.encode(src, mask), KVCache()
        for t in range(5):
            model.decode(torch.randint(4, 1000, (3, 1)), memory, mask, cache)
            snapshots.append([rec.values("decoder", layer)[t].clone() for layer in range(3)])
            cache.reorder(torch.tensor([[2, 0, 0], [1, 1, 2]][t % 2]))  # rows copied, rows dropped
    for t, taken in enumerate(snapshots):
        assert all(torch.equal(rec.values("decoder", layer)[t], taken[layer]) for layer in range(3))


def test_selection_by_kind_layer_head(model: Transformer) -> None:
    src, tgt = _batch()
    with torch.no_grad(), record(model, kinds=["encoder"], layers=[-1], heads=[1, 3]) as rec:
        model(src, tgt)
    assert list(rec.captures) == [("encoder", 2)]
    trace = rec.traces(src, tgt, _tokens(src), _tokens(tgt))[2]
    assert trace.attention("encoder", 2).shape == (2, 9, 9) and trace.heads == [1, 3]
    with pytest.raises(AttnlabError, match="no cross attention"):
        trace.attention("cross", 0)
    with pytest.raises(AttnlabError, match="no cross attention"):  # its labels were ([], the source)
        trace.labels("cross")


def test_save_load_round_trip_and_damage(model: Transformer, tmp_path) -> None:
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    trace = rec.traces(src, tgt, _tokens(src), _tokens(tgt), model_info(model, "ckpt/x"))[0]
    trace.meta["text"] = "ünïcode ✓"
    path = trace.save(tmp_path / "t.trace")
    loaded = AttentionTrace.load(path)
    assert loaded.kinds == trace.kinds == ["encoder", "decoder", "cross"]
    for kind in trace.kinds:
        for layer in range(3):
            assert np.array_equal(trace.attention(kind, layer), loaded.attention(kind, layer))
        assert np.array_equal(trace.mask(kind), loaded.mask(kind))
    assert loaded.src_tokens == trace.src_tokens and loaded.tgt_tokens == trace.tgt_tokens
    assert loaded.model == trace.model and loaded.meta == trace.meta
    assert len(loaded.model["weights_sha256"]) == 16
    raw = path.read_bytes()
    (tmp_path / "cut.trace").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "junk.trace").write_bytes(b"not a trace at all")
    for bad in ("cut.trace", "junk.trace", "missing.trace", None):
        with pytest.raises(CheckpointError) as info:
            AttentionTrace.load(bad if bad is None else tmp_path / bad)
        assert "\n" not in str(info.value)
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "other.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="not an attnlab trace"):
        AttentionTrace.load(tmp_path / "other.safetensors")
    # Writing where a trace cannot go is one line too (it was a raw IsADirectoryError), with no
    # temporary file left behind.
    (tmp_path / "blocker").write_text("a file where a directory should be")
    for where, match in ((tmp_path, "names a directory"), (tmp_path / "blocker" / "t.trace", "cannot write")):
        with pytest.raises(CheckpointError, match=match):
            trace.save(where)
    assert not list(tmp_path.glob(".*.tmp"))


def test_what_attnlab_writes_gets_the_mode_mkdir_and_open_give(model: Transformer, tmp_path) -> None:
    """Checkpoints, traces and profiles are assembled in a temporary sibling and renamed into
    place; mkdtemp's 0700 and mkstemp's 0600 survived the rename, so an explorer served as
    another user could not open a checkpoint or trace that others on the machine wrote."""
    import pyarrow as pa

    from attnlab.decode.profile import write_profile
    from attnlab.model.checkpoint import save_checkpoint

    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    trace = rec.traces(src, tgt, _tokens(src), _tokens(tgt), model_info(model, "ckpt/x"))[0]
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"not read")
    old = os.umask(0o027)
    try:
        checkpoint = save_checkpoint(tmp_path / "ckpt", model, spm)
        written = [trace.save(tmp_path / "t.trace"), write_profile(pa.table({"x": [1]}), tmp_path / "p.parquet", {})]
    finally:
        os.umask(old)
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o750
    written += list(checkpoint.iterdir())
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in written} == {path.name: 0o640 for path in written}


def test_head_stats_on_known_patterns() -> None:
    eye = np.eye(4, dtype=np.float32)[None]
    prev = np.zeros((1, 4, 4), np.float32)
    prev[0, 0, 0] = 1
    prev[0, np.arange(1, 4), np.arange(0, 3)] = 1
    trace = AttentionTrace(["a", "b", "c", "</s>"], [], {"encoder": [np.concatenate([eye, prev])]})
    rows = {r["head"]: r for r in head_stats(trace)}
    assert rows[0]["self"] == pytest.approx(1) and rows[0]["entropy"] == pytest.approx(0)
    assert rows[0]["eos"] == pytest.approx(0.25) and rows[0]["distance"] == 0
    assert rows[1]["prev"] == pytest.approx(0.75) and rows[1]["first"] == pytest.approx(0.5)
    assert rows[1]["distance"] == pytest.approx(0.75)
    # a distance is |i - j|, ahead as behind (an encoder's head that looks two keys ahead: 2, not -2)
    ahead = np.zeros((1, 4, 4), np.float32)
    ahead[0, np.arange(4), np.minimum(np.arange(4) + 2, 3)] = 1
    looking = AttentionTrace(["a", "b", "c", "</s>"], [], {"encoder": [ahead]})
    assert head_stats(looking)[0]["distance"] == pytest.approx((2 + 2 + 1 + 0) / 4)
    uniform = AttentionTrace(["a", "b"], [], {"encoder": [np.full((1, 2, 2), 0.5, np.float32)]})
    both = head_stats([uniform, uniform])
    assert both[0]["entropy"] == pytest.approx(np.log(2)) and both[0]["rows"] == 4
    assert set(COLUMNS) <= set(both[0])


@pytest.mark.parametrize("nothing", [[], (), iter([])])
def test_head_stats_of_no_traces_is_one_line(nothing: object) -> None:
    """An empty list gave an empty table without a word (a profile of nothing, which a table or
    a scatter then drew empty)."""
    with pytest.raises(AttnlabError, match=r"^head_stats needs at least one trace: none given$"):
        head_stats(nothing)


def test_head_stats_pool_heads_by_their_model_index_and_one_model_only(model: Transformer) -> None:
    """Traces of heads [2, 3] and of heads [0, 1] were summed position by position and labelled
    heads 2 and 3; a full trace with a subset one was numpy's broadcast ValueError; traces of
    two models were averaged; a Result or None in place of a trace was an AttributeError."""
    src, tgt = _batch()

    def traced(net: Transformer, heads: list[int] | None = None) -> AttentionTrace:
        with torch.no_grad(), record(net, heads=heads) as rec:
            net(src, tgt)
        return rec.traces(src, tgt, _tokens(src), _tokens(tgt), model_info(net))[0]

    full, low, high = traced(model), traced(model, [0, 1]), traced(model, [2, 3])
    alone = head_stats(full)
    for pooled, twice in ((head_stats([high, low]), ()), (head_stats([full, low]), (0, 1))):
        assert [(r["kind"], r["layer"], r["head"]) for r in pooled] == [
            (r["kind"], r["layer"], r["head"]) for r in alone
        ]
        for row, expected in zip(pooled, alone, strict=True):
            assert row["rows"] == expected["rows"] * (2 if row["head"] in twice else 1)
            assert [row[name] for name in COLUMNS] == pytest.approx([expected[name] for name in COLUMNS])
    other = traced(Transformer(preset("tiny", n_layers=3)).eval())
    with pytest.raises(AttnlabError, match=r"^trace 3 was recorded from another model than trace 1 \(weights \w+ vs"):
        head_stats([full, low, other])
    result = Result("a b", "c d", ["▁c", "▁d", "</s>"], ["▁a", "▁b", "</s>"], -1.0, -3.0, trace=full)
    with pytest.raises(AttnlabError, match=r"^trace 2 is a Result, not an AttentionTrace \(a Result holds one in"):
        head_stats([full, result])
    with pytest.raises(AttnlabError, match="^the trace is a NoneType, not an AttentionTrace"):
        sentence_stats(None)
    with pytest.raises(AttnlabError, match="^expected an AttentionTrace or a list of them, got str$"):
        head_stats("trace")


def test_nested_ablations_switch_off_every_enclosing_blocks_heads(model: Transformer) -> None:
    """An inner block on the same layer replaced the outer block's mask: only its own heads
    were off (output and `heads_off` both), the outer ones silently back on."""
    src, tgt = _batch()

    def run(*blocks: dict) -> tuple[torch.Tensor, list]:
        with torch.no_grad(), ablate(model, blocks[0]):
            if len(blocks) == 1:
                with record(model, kinds=["cross"]) as rec:
                    out = model(src, tgt)
                return out, rec.traces(src, tgt, _tokens(src), _tokens(tgt))[0].meta["heads_off"]
            return run(*blocks[1:])

    union, union_off = run({("cross", 2): [0, 1, 2]})
    nested, nested_off = run({("cross", 2): [0, 1]}, {("cross", -1): [2, 1]})
    assert torch.equal(nested, union) and nested_off == union_off == [["cross", 2, h] for h in (0, 1, 2)]
    with torch.no_grad(), ablate(model, {("cross", 2): [0, 1]}):
        with ablate(model, {("cross", 2): [2], ("encoder", 0): [3]}):
            pass
        with record(model, kinds=["cross"]):  # the explicit softmax, as in `run`
            outer_again = model(src, tgt)  # the inner block's heads are back on, the outer's still off
    assert torch.equal(outer_again, run({("cross", 2): [0, 1]})[0]) and not torch.equal(outer_again, union)
    assert all(m.head_mask is None for m in model.attention_modules())


def test_values_and_allowed_refuse_layers_as_weights_does(model: Transformer) -> None:
    """`values` and `allowed` read layer 3 of 3 as layer 0 (`% n_layers`), and a layer not
    recorded was a KeyError."""
    src, tgt = _batch()
    with torch.no_grad(), record(model, layers=[0], keep_values=True) as rec:
        model(src, tgt)
    assert rec.values("encoder", -3) is rec.values("encoder", 0)
    for read in (rec.weights, rec.values, rec.allowed):
        for layer, match in ((3, "layer 3 does not exist"), (1, "nothing was recorded for encoder layer 1")):
            with pytest.raises(AttnlabError, match=match) as info:
                read("encoder", layer)
            assert "\n" not in str(info.value)
        with pytest.raises(AttnlabError, match="layer '0' does not exist"):  # was a TypeError
            read("encoder", "0")


def test_traces_refuse_tokens_that_do_not_fit_the_maps(model: Transformer) -> None:
    """3 target labels for 4 rows made a trace that `head_stats` and the views failed on later;
    `rec.traces(src, tgt, None)` was a TypeError."""
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    short = _tokens(tgt)
    short[1] = short[1][:-1]
    for src_tokens, tgt_tokens, match in (
        (_tokens(src), short, r"sentence 1's tokens do not fit .*decoder maps are not \(heads, 6, 6\)"),
        (_tokens(src)[:2], _tokens(tgt), "2 source token lists for a batch of 3 sentences"),
        (None, _tokens(tgt), "^src_tokens is a list of each sentence's source pieces, got None$"),  # a TypeError
        (["a b", "c", "d"], _tokens(tgt), "^src_tokens is a list of each sentence's source pieces, got"),
        (_tokens(src), "x y", "^tgt_tokens is a list of each sentence's target pieces, got 'x y'$"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            rec.traces(src, tgt, src_tokens, tgt_tokens)
        assert "\n" not in str(info.value)
    assert len(rec.traces(src, tgt, _tokens(src), _tokens(tgt))) == 3


def test_traces_refuse_ids_that_are_not_the_recorded_batch(model: Transformer) -> None:
    """Ids of more sentences than were recorded, or a target of fewer, were IndexErrors, and ids
    as a list an AttributeError, from deep inside."""
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    four, four_tgt = torch.cat([src, src[:1]]), torch.cat([tgt, tgt[:1]])
    for ids, where, got in (
        ((four, four_tgt), "src", r"got shape \(4, 9\)"),
        ((src.tolist(), tgt), "src", "got list"),
        ((src, tgt[:2]), "tgt", r"got shape \(2, 7\)"),
        ((src, tgt.float()), "tgt", r"got shape \(3, 7\)"),
    ):
        labels = _tokens(torch.as_tensor(ids[0])), _tokens(ids[1].long())
        with pytest.raises(AttnlabError, match=rf"^{where} is the \(batch, length\) tensor of ids of the 3 .*{got}$"):
            rec.traces(*ids, *labels)
    assert len(rec.traces(src, tgt, _tokens(src), _tokens(tgt))) == 3


def test_a_head_named_twice_is_recorded_once(model: Transformer) -> None:
    src, tgt = _batch()
    with torch.no_grad(), record(model, kinds=["cross"], heads=[3, 1, -3]) as rec:
        model(src, tgt)
    trace = rec.traces(src, tgt, _tokens(src), _tokens(tgt))[0]
    assert trace.heads == [1, 3] and trace.n_heads == 2
    assert sorted({row["head"] for row in head_stats(trace)}) == [1, 3]
    assert {row["rows"] for row in head_stats(trace)} == {4}  # not 8: head 1 counted once


def test_one_kind_layer_or_head_may_be_given_alone(model: Transformer) -> None:
    """`kinds="cross"` said "unknown attention kind(s) ['c', 'o', 'r', 's']", and `layers=1`
    or `heads=2` "'int' object is not iterable"."""
    src, tgt = _batch()
    with torch.no_grad(), record(model, kinds="cross", layers=-1, heads=np.int64(2)) as rec:
        model(src, tgt)
    assert list(rec.captures) == [("cross", 2)] and rec.heads == [2]
    for selection, match in (
        ({"kinds": "crss"}, r"unknown attention kind\(s\) \['crss'\]"),
        ({"layers": 1.0}, "layer 1.0 does not exist"),
        ({"heads": True}, "head True does not exist"),
        ({"layers": [None]}, "layer None does not exist"),
    ):
        with pytest.raises(AttnlabError, match=match), record(model, **selection):
            pass


def test_layers_and_heads_may_be_tensors_or_arrays_of_whole_numbers(model: Transformer) -> None:
    """`heads=scores.argmax()` was "iteration over a 0-d tensor", and `heads=scores.topk(2).indices`
    "head tensor(1) does not exist"; a float tensor is still no head."""
    src, tgt = _batch()
    with torch.no_grad(), record(model, layers=torch.tensor(-1), heads=torch.tensor([3, 1])) as rec:
        model(src, tgt)
    assert sorted(rec.captures) == [("cross", 2), ("decoder", 2), ("encoder", 2)] and rec.heads == [1, 3]
    with torch.no_grad(), record(model, kinds="cross", layers=np.array([0, 2]), heads=np.array(2)) as rec:
        model(src, tgt)
    assert sorted(rec.captures) == [("cross", 0), ("cross", 2)] and rec.heads == [2]
    with ablate(model, {("cross", torch.tensor(0)): torch.tensor([1, 2])}):
        assert model.decoder["layers"][0].cross_attn.head_mask.tolist() == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(AttnlabError, match=r"^head 1.0 does not exist"), record(model, heads=torch.tensor(1.0)):
        pass


@pytest.mark.parametrize("selection", ["kinds", "layers", "heads"])
def test_an_empty_selection_is_one_line(model: Transformer, selection: str) -> None:
    """`kinds=[]` or `layers=[]` recorded nothing and then said "run the model itself inside the
    block"; `heads=[]` made a trace of no heads, which `widgets.show` opened as an IndexError."""
    with (
        pytest.raises(AttnlabError, match=rf"^{selection}=\[\] records nothing: name at least one, or leave"),
        record(model, **{selection: []}),
    ):
        pass


def test_keep_values_is_true_or_false(model: Transformer) -> None:
    """keep_values="no" is a true string: it kept the values."""
    with (
        pytest.raises(AttnlabError, match="^keep_values must be True or False, got 'no'$"),
        record(model, keep_values="no"),
    ):
        pass


def test_trace_layers_are_whole_numbers(model: Transformer) -> None:
    """ "1" and None were TypeErrors; True and 1.0 silently answered for layer 1."""
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
    trace = rec.traces(src, tgt, _tokens(src), _tokens(tgt))[0]
    assert trace.attention("cross", np.int64(-2)).base is trace.attention("cross", 1).base is trace.maps["cross"][1]
    for bad in ("1", None, True, 1.0):
        with pytest.raises(AttnlabError, match=f"a layer is a whole number, got {bad!r}$"):
            trace.attention("cross", bad)


def test_a_trace_equals_itself_saved_and_loaded(model: Transformer, tmp_path) -> None:
    """`==` was numpy's "truth value of an array is ambiguous" ValueError."""
    src, tgt = _batch()
    with torch.no_grad(), record(model, heads=(0, 2)) as rec:
        model(src, tgt)
    trace, other = rec.traces(src, tgt, _tokens(src), _tokens(tgt), model_info(model, "ckpt"))[:2]
    trace.meta["span"] = (1, 2)  # a tuple, saved as a list
    loaded = AttentionTrace.load(trace.save(tmp_path / "t.trace"))
    assert loaded == trace and trace != other and trace != "a trace"
    loaded.maps["cross"][1] = loaded.maps["cross"][1] + 1e-3
    assert loaded != trace


def test_attention_parts_read_layers_and_heads_as_indices() -> None:
    """1.0 and None were TypeErrors and head 1.5 an IndexError; head -1 was refused although
    the widgets offer it (the model's last head)."""
    model = load(Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de")
    trace = model.score("A dog runs.", "Ein Hund läuft.", record=True).trace
    last = model.config.n_heads - 1
    np.testing.assert_allclose(
        attention_parts(model, trace, "cross", -1, -1)["weights"], trace.attention("cross", -1)[last], atol=1e-4
    )
    for layer, head, match in (
        (1.0, 0, "layer 1.0"),
        (1, 1.5, "head 1.5"),
        (None, 0, "layer None"),
        (1, None, "head None"),
    ):
        with pytest.raises(AttnlabError, match=f"{match} does not exist") as info:
            attention_parts(model, trace, "cross", layer, head)
        assert "\n" not in str(info.value)


def test_model_info_and_weights_hash_take_what_load_returns(tmp_path: Path) -> None:
    """The recorder's own pattern, `record(m)` then `rec.traces(..., model_info(m))`, with `m` from
    `attnlab.load` was an AttributeError ('parameters'); a Path as the checkpoint was refused only
    when the trace was saved."""
    path = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
    model = load(path)
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    with torch.no_grad(), record(model, kinds="cross") as rec:
        model.model(src, tgt)
    trace = rec.traces(src, tgt, [["a", "b", "c", "</s>"]], [["x", "y", "</s>"]], model_info(model, path))[0]
    assert trace.model == model.info and weights_hash(model) == weights_hash(model.model)
    assert AttentionTrace.load(trace.save(tmp_path / "t.trace")) == trace
    for call in (lambda: model_info(None), lambda: weights_hash("model")):
        with pytest.raises(AttnlabError, match="^expected an attnlab model"):
            call()


def test_attention_parts_refuse_what_is_not_a_loaded_model_or_a_trace() -> None:
    """A bare Transformer, None or a Result in place of the model or the trace were
    AttributeErrors from inside."""
    model = load(Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de")
    result = model.score("A dog runs.", "Ein Hund läuft.", record=True)
    for args, match in (
        ((model.model, result.trace), "needs what attnlab.load returns .*got Transformer$"),
        ((None, result.trace), "needs what attnlab.load returns .*got NoneType$"),
        ((model, None), "^the trace is a NoneType, not an AttentionTrace"),
        ((model, result), "^the trace is a Result, not an AttentionTrace"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            attention_parts(*args, "cross", 0, 0)
        assert "\n" not in str(info.value)


def test_separate_passes_are_refused_and_decoding_steps_still_join(model: Transformer) -> None:
    """`rec.weights` joins every call of a hook point: two passes of other lengths came back
    stacked along the queries as if they were decoding steps, and a sentence translated by beam
    search (one row at the first step, the beam's after) was torch.cat's raw "sizes must match".
    Each is one line now, while incremental decoding's steps still join into the pass's maps."""
    src, tgt = _batch()
    with torch.no_grad(), record(model) as rec:
        model(src, tgt)
        model(src[:, :5], tgt)
    for kind in ("encoder", "decoder", "cross"):
        for read in (rec.weights, rec.allowed):
            with pytest.raises(RecordingError, match=f"^{kind} layer 0 was recorded in 2 calls that are not one") as e:
                read(kind, 0)
            assert "\n" not in str(e.value) and "record one forward pass per `record` block" in str(e.value)
    with pytest.raises(RecordingError):
        rec.traces(src, tgt, _tokens(src), _tokens(tgt))
    one, first = src[2:], tgt[2:]
    with torch.no_grad(), record(model) as whole:
        model(one, first)
    with torch.no_grad(), record(model) as steps:
        mask = model.src_mask(one)
        memory, cache = model.encode(one, mask), KVCache()
        model.decode(first[:, :3], memory, mask, cache)  # a prefix, then one position at a time
        for t in range(3, tgt.size(1)):
            model.decode(first[:, t : t + 1], memory, mask, cache)
    for kind in ("encoder", "decoder", "cross"):
        assert torch.allclose(whole.weights(kind, 1), steps.weights(kind, 1), atol=1e-5)
    with torch.no_grad(), record(model, kinds="cross") as beams:
        cache = KVCache()
        model.decode(first[:, :1], memory, mask, cache)
        cache.reorder(torch.tensor([0, 0, 0]))  # the beam: one row becomes three
        model.decode(tgt[:, 1:2], memory, mask, cache)
    with pytest.raises(RecordingError, match=r"\(call 2: 3 rows, 1 queries, 9 keys; the next decoding step: 1 rows"):
        beams.weights("cross", 0)


def test_a_heads_pattern_is_named_by_the_share_of_weight_that_shows_it() -> None:
    """`head_pattern` names a head by where at least half its weight lies (an offset of
    self-attention, the diagonal of encoder–decoder attention, the first key or </s>), else by the
    shape of its rows; built from maps whose answer is known."""
    n = 6
    eye = np.eye(n, dtype=np.float32)

    def pattern(kind: str, weights: np.ndarray) -> tuple[str, float]:
        src = [f"▁w{i}" for i in range(n - 1)] + ["</s>"]
        maps = {kind: [weights[None].astype(np.float32)]}
        trace = AttentionTrace(src, src if kind != "encoder" else [], maps)
        (row,) = head_stats(trace)
        return head_pattern(row)

    previous = 0.7 * np.roll(eye, -1, axis=1) + 0.3 * eye  # key i-1 (wrapping at row 0)
    assert pattern("encoder", previous)[0] == "prev" and pattern("encoder", previous)[1] > 0.5
    assert pattern("encoder", eye) == ("self", 1.0)
    assert pattern("encoder", np.roll(eye, 1, axis=1))[0] == "next"
    assert pattern("cross", eye) == ("diagonal", 1.0)  # (cross: the diagonal, not "self")
    eos = np.zeros((n, n), np.float32)
    eos[:, -1] = 0.9
    eos[:, 0] += 0.1
    assert pattern("cross", eos)[0] == "eos"
    assert pattern("encoder", np.roll(eos, 1, axis=1))[0] == "first"  # 0.9 on key 0
    assert pattern("encoder", np.full((n, n), 1 / n, np.float32)) == ("broad", pytest.approx(1 / n))
    content = np.zeros((n, n), np.float32)  # one key each, far from any offset: chosen by content
    content[np.arange(n), [3, 4, 5, 0, 1, 2]] = 1.0
    assert pattern("encoder", content) == ("peaked", 1.0)
    mixed = 0.45 * content + 0.35 * eye + 0.2 / n
    assert pattern("encoder", mixed)[0] == "mixed"
    # ... and by more than chance: an even spread over a 4-piece pair puts 62% within one of the
    # diagonal (it read as an aligner), and a decoder's first row can read only its first key
    even = AttentionTrace(["▁a", "▁b", "▁c", "</s>"], ["▁x", "▁y", "▁z", "</s>"], {"cross": [np.full((1, 4, 4), 0.25)]})
    (row,) = head_stats(even)
    assert row["diagonal"] == pytest.approx(0.625) == row["chance"]["diagonal"]
    assert head_pattern(row) == ("broad", 0.25)
    causal = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]  # each row even over the keys it may read
    (row,) = head_stats(AttentionTrace(["▁a", "</s>"], ["▁x", "▁y", "</s>"], {"decoder": [causal[None]]}))
    assert row["first"] == pytest.approx(11 / 18) == row["self"]  # row 0 reads key 0 whatever the head does
    assert head_pattern(row)[0] == "mixed"  # (it parked "on the first piece", and "on its own position")
    mostly_self = 0.4 * causal + 0.6 * np.eye(3)
    (row,) = head_stats(AttentionTrace(["▁a", "</s>"], ["▁x", "▁y", "</s>"], {"decoder": [mostly_self[None]]}))
    assert head_pattern(row)[0] == "self"
