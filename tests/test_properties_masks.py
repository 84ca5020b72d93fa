"""Property: the masks of §3.2.3 never leak, for random lengths and paddings, in every attention
path (the fused kernel when nothing is recorded, the explicit Eq. (1) when `attnlab.record` is on,
and incremental decoding with the KV cache), and recorded weights are exactly zero where masked.

Every "nothing changed" assertion is paired with a control: the same kind of change made where it
*is* allowed to matter moves the outputs by far more than the tolerance, so the property cannot
pass because the perturbation was too small to see.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st
from properties import examples, prove

from attnlab import preset
from attnlab.model.transformer import KVCache, Transformer
from attnlab.record import record

VOCAB, PAD, BOS = 1000, 0, 2
VISIBLE = 1e-2  # a real change (a token the output may see) moves some logit by more than this
BATCHED = 1e-4  # a sentence alone vs. inside a padded batch: other matrix shapes, other rounding


def _model(**overrides: object) -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("tiny", vocab_size=VOCAB, max_len=64, **overrides)).eval()


MODELS = {"post-norm": _model(), "pre-norm, learned positions": _model(norm="pre", positional="learned")}


@dataclass
class Case:
    model: str
    src: torch.Tensor  # (B, Ls) ids, padded with PAD after each row's length
    tgt: torch.Tensor  # (B, Lt) decoder inputs, BOS first, no padding
    src_lens: list[int]
    garbage: torch.Tensor  # (B, Ls) other non-pad ids, used where the source is padding
    cut: int  # target positions >= cut are "the future" for the positions before it
    future: torch.Tensor  # (B, Lt - cut) other ids for the future positions

    @property
    def mask(self) -> torch.Tensor:
        """(B, Ls) True at real source tokens."""
        return torch.arange(self.src.size(1))[None, :] < torch.tensor(self.src_lens)[:, None]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    batch = draw(st.integers(1, 4))
    src_lens = draw(st.lists(st.integers(1, 12), min_size=batch, max_size=batch))
    width = max(src_lens) + draw(st.integers(0, 3))  # sometimes every row is padded
    tgt_len = draw(st.integers(2, 10))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (batch, width), generator=g)
    for b, length in enumerate(src_lens):
        src[b, length:] = PAD
    tgt = torch.randint(4, VOCAB, (batch, tgt_len), generator=g)
    tgt[:, 0] = BOS
    cut = draw(st.integers(1, tgt_len - 1))
    return Case(
        model=draw(st.sampled_from(sorted(MODELS))),
        src=src,
        tgt=tgt,
        src_lens=src_lens,
        garbage=torch.randint(4, VOCAB, (batch, width), generator=g),
        cut=cut,
        future=torch.randint(4, VOCAB, (batch, tgt_len - cut), generator=g),
    )


def _paths(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logits (B, Lt, V) for decoder inputs `tgt` over `src`, whose keys are limited by `mask`
    (B, Ls) rather than by the pad ids, computed the three ways the model can run."""
    key_mask = mask[:, None, None, :]  # (B, 1, 1, Ls)
    with torch.no_grad():
        fused = model.logits(model.decode(tgt, model.encode(src, key_mask), key_mask))
        with record(model):
            explicit = model.logits(model.decode(tgt, model.encode(src, key_mask), key_mask))
        memory, cache = model.encode(src, key_mask), KVCache()
        steps = [model.logits(model.decode(tgt[:, t : t + 1], memory, key_mask, cache)) for t in range(tgt.size(1))]
    return {"fused": fused, "recorded": explicit, "cached": torch.cat(steps, 1)}


@examples(60)
def test_padded_source_tokens_never_reach_any_output(examples: int) -> None:
    """Whatever ids sit under the source padding mask, every output is bit-for-bit the same."""
    padded = 0

    def holds(case: Case) -> None:
        nonlocal padded
        model, mask = MODELS[case.model], case.mask
        padded += not bool(mask.all())
        other = torch.where(mask, case.src, case.garbage)  # the padding replaced by real-looking ids
        before, after = _paths(model, case.src, case.tgt, mask), _paths(model, other, case.tgt, mask)
        for path in before:
            assert torch.equal(before[path], after[path]), f"{path}: padding leaked into the outputs"
        # control: the same ids put under a mask that lets them be seen do change the outputs
        if not bool(mask.all()):
            seen = _paths(model, other, case.tgt, torch.ones_like(mask))["fused"]
            assert (seen - before["fused"]).abs().amax() > VISIBLE

    prove(holds, examples, case=cases())
    assert padded >= examples // 2, f"only {padded} of {examples} examples had any padding"


@examples(60)
def test_future_target_tokens_never_reach_earlier_positions(examples: int) -> None:
    """Changing the decoder inputs from position `cut` on leaves positions < cut bit-for-bit the
    same (causal mask, §3.2.3), in all three paths; position `cut` itself does change."""

    def holds(case: Case) -> None:
        model, mask = MODELS[case.model], case.mask
        changed = case.tgt.clone()
        changed[:, case.cut :] = case.future
        before, after = _paths(model, case.src, case.tgt, mask), _paths(model, case.src, changed, mask)
        for path in before:
            assert torch.equal(before[path][:, : case.cut], after[path][:, : case.cut]), f"{path}: the future leaked"
        # control: the changed inputs are visible from position `cut` on (where they are allowed)
        assert (before["fused"][:, case.cut :] - after["fused"][:, case.cut :]).abs().amax() > VISIBLE

    prove(holds, examples, case=cases())


@examples(40)
def test_a_sentence_in_a_padded_batch_gets_its_own_outputs(examples: int) -> None:
    """`model(src, tgt)` with pad ids (the mask built from them, as in training and decoding): a
    sentence's logits inside a padded batch equal its logits alone, in both attention paths."""

    def holds(case: Case, tgt_lens: list[int]) -> None:
        model = MODELS[case.model]
        tgt = case.tgt.clone()
        lens = [min(n, tgt.size(1)) for n in tgt_lens[: tgt.size(0)]]
        for b in range(tgt.size(0)):
            tgt[b, lens[b] :] = PAD
        with torch.no_grad():
            batched = model(case.src, tgt)
            with record(model):
                recorded = model(case.src, tgt)
            for b, (ls, lt) in enumerate(zip(case.src_lens, lens, strict=True)):
                alone = model(case.src[b : b + 1, :ls], tgt[b : b + 1, :lt])[0]
                for name, out in (("fused", batched), ("recorded", recorded)):
                    gap = (out[b, :lt] - alone).abs().amax()
                    assert gap < BATCHED, f"{name}: row {b} moved by {gap:.2e} in a padded batch"
                # control: one real source token changed moves the same outputs far more
                other = case.src[b : b + 1, :ls].clone()
                other[0, 0] = 4 + (other[0, 0] - 3) % (VOCAB - 4)  # another id, never a special
                assert (model(other, tgt[b : b + 1, :lt])[0] - alone).abs().amax() > VISIBLE

    prove(holds, examples, case=cases(), tgt_lens=st.lists(st.integers(1, 10), min_size=4, max_size=4))


@examples(60)
def test_recorded_weights_are_exactly_zero_where_masked(examples: int) -> None:
    """Recorded maps: rows are distributions, cells at padded keys (encoder, cross) and future keys
    (decoder) are exactly 0, the traces carry exactly these masks, and the weights of real rows do
    not depend on what sits under the padding or in the future."""

    def weights(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, mask: torch.Tensor):
        key_mask = mask[:, None, None, :]
        with torch.no_grad(), record(model) as rec:
            model.decode(tgt, model.encode(src, key_mask), key_mask)
        return rec

    def holds(case: Case) -> None:
        model, mask = MODELS[case.model], case.mask
        rec = weights(model, case.src, case.tgt, mask)
        lt = case.tgt.size(1)
        allowed = {
            "encoder": mask[:, None, None, :].expand(-1, 1, mask.size(1), -1),
            "cross": mask[:, None, None, :].expand(-1, 1, lt, -1),
            "decoder": torch.ones(lt, lt, dtype=torch.bool).tril()[None, None],
        }
        for layer in range(model.config.n_layers):
            for kind, keep in allowed.items():
                w = rec.weights(kind, layer)  # (B, h, Lq, Lk)
                keep = keep.expand_as(w)
                assert (w[~keep] == 0).all(), f"{kind} layer {layer}: weight on a masked key"
                rows = w.sum(-1) if kind != "encoder" else w.sum(-1)[mask[:, None, :].expand(-1, w.size(1), -1)]
                assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)
                assert (w[keep] > 0).all()  # softmax: every allowed key gets some weight
        traces = rec.traces(case.src, case.tgt, [["x"] * n for n in case.src_lens], [["y"] * lt] * len(case.src_lens))
        for b, trace in enumerate(traces):
            n = case.src_lens[b]
            assert trace.mask("encoder").shape == (n, n) and trace.mask("encoder").all()
            assert trace.mask("cross").shape == (lt, n) and trace.mask("cross").all()
            assert np.array_equal(trace.mask("decoder"), np.tril(np.ones((lt, lt), bool)))
        # the same maps with other ids under the padding, and other future decoder inputs
        changed = case.tgt.clone()
        changed[:, case.cut :] = case.future
        again = weights(model, torch.where(mask, case.src, case.garbage), changed, mask)
        for layer in range(model.config.n_layers):
            for kind in allowed:
                a, b = rec.weights(kind, layer), again.weights(kind, layer)
                if kind == "encoder":
                    rows = mask[:, None, :, None].expand_as(a)  # real query rows
                    assert torch.equal(a[rows], b[rows]), f"{kind} layer {layer}: padding changed the maps"
                else:
                    assert torch.equal(a[:, :, : case.cut], b[:, :, : case.cut]), f"{kind} layer {layer}: leaked"

    prove(holds, examples, case=cases())
