"""The incremental-decoding state of the decoder's attention layers.

Self-attention keys and values are written once and never moved. Each decoder layer keeps a
store, (positions, slots, h, d): the new position of decoder row i goes to slot i, and `slots`,
(rows, positions) int32 and shared by the layers, says which slot holds each row's position t.
A beam search reordering its rows then reorders that small table, not every layer's prefix
(FasterTransformer's "cache indirection"): `attnlab.model.kernels.cached_attention` reads the
histories in place. Copying them instead (fairseq's layout, this module until issue #19's eighth
round) read and wrote each layer's whole prefix every step.

The encoder-decoder keys and values are computed once per source and follow the sentences; the
same kernel reads them, a sentence's beams sharing one copy (`cross_step`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from attnlab.model.kernels import cached_attention, compiled, gather


@dataclass
class KVCache:
    """Per decoder layer {"self": {"k", "v": stores, "slots"}, "cross": {"k", "v"}}, the number
    of target positions already processed, and the slot table the layers share."""

    layers: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    length: int = 0  # target positions already processed
    slots: Tensor | None = None  # (rows, positions) int32: the slot holding each row's position t
    room: int = 16  # positions a new store holds (`store`): the decode's longest, where known

    def advance(self, rows: int, positions: int, device: torch.device | str) -> None:
        """Before the decoder reads `positions` new positions of `rows` rows: row i writes
        them into slot i. Every layer's self-attention sees the table (`layers[l]["self"]["slots"]`)."""
        new = torch.arange(rows, dtype=torch.int32, device=device)[:, None].expand(rows, positions)
        self.slots = new.contiguous() if self.slots is None else torch.cat([self.slots, new], dim=1)
        for layer in self.layers:
            layer.setdefault("self", {}).update(slots=self.slots, room=self.room)
        kept = self.layers[0].get("cross", {}) if self.layers else {}
        if "lengths" in kept:  # the kernel reads the encoder-decoder K/V: each row's sentence, once for all layers
            rows_of = row_tables(kept, rows)
            for layer in self.layers:
                layer["cross"].update(rows_of)

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Follow the beams: row i of the new batch continues row index[i] of the old one. The
        encoder-decoder K/V follow `memory_index` instead when they are kept once per sentence
        rather than once per row (see `MultiHeadAttention.forward`); None: they follow `index`."""
        if self.slots is not None:
            self.slots = self.slots.index_select(0, index.to(self.slots.device))
        cross = index if memory_index is None else memory_index
        unchanged = torch.equal(cross, torch.arange(len(cross)))
        for layer in self.layers:
            kept = layer["cross"]
            for name in ROW_TABLES:  # per row, not per sentence: the next `advance` makes them anew
                kept.pop(name, None)
            for name, tensor in kept.items():
                if not (unchanged and tensor.size(0) == len(cross)):  # else: nothing moves
                    kept[name] = tensor.index_select(0, cross.to(tensor.device))


STORE_BYTES = 256 * 2**20  # the most a store is made at once for the decode's longest output


def store(past: dict[str, Any], k: Tensor, v: Tensor) -> None:
    """Write the newest positions' keys and values, (rows, h, L, d), into a layer's stores: the
    last L positions of `past["slots"]`, row i into slot i. A store is made `past["room"]`
    positions long (the longest output the search allows) where that fits in `STORE_BYTES`, else
    16, and grows by doubling when a position or a row does not fit: each growth copies the
    positions held (test2016's fp32 decode: 4-5% of its time in those copies, saved by the room;
    a parse's input + 300 at beam 21 would be gigabytes, where doubling only grows as it runs)."""
    rows, _, new, _ = k.shape
    positions = past["slots"].size(1)
    for name, x in (("k", k), ("v", v)):
        held = past.get(name)
        if held is None or held.size(0) < positions or held.size(1) < rows:
            width = rows if held is None else max(rows, held.size(1))
            room = past.get("room", 16)
            capacity = room if room * width * x.size(1) * x.size(3) * x.element_size() <= STORE_BYTES else 16
            while capacity < positions:
                capacity *= 2
            grown = x.new_empty(capacity, width, x.size(1), x.size(3))
            if held is not None:  # the positions written so far, not the whole old capacity
                grown[: positions - new, : held.size(1)] = held[: positions - new]
            past[name] = held = grown
        held[positions - new : positions, :rows] = x.permute(2, 0, 1, 3)


def self_step(
    past: dict[str, Any], q: Tensor, k: Tensor, v: Tensor, window: int | None, recorded: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """Self-attention while decoding: store the new positions' k, v (B, h, L, ·), then either
    attend in place (one new query, not recorded: returns (B, h, 1, d_v)) or return the rows'
    whole histories (B, h, positions, ·) for the explicit Eq. (1), which a recording reads."""
    store(past, k, v)
    length = past["slots"].size(1)
    if q.size(2) == 1 and not recorded:
        first = 0 if window is None else max(0, length - 1 - window)  # a restricted model's band
        return cached_attention(q[:, :, 0], past["k"], past["v"], past["slots"], first, length)[:, :, None]
    if length == k.size(2):  # the first positions: nothing stored before them
        return k, v
    return gather(past["k"], past["slots"], 0, length), gather(past["v"], past["slots"], 0, length)


def keep_cross(past: dict[str, Tensor], k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    """Keep the encoder-decoder k, v (S, h, Ls, ·) for every later step, laid out for the path
    that will read them: (S, Ls, h, ·) and each sentence's number of real keys for the kernel
    (a source padded at its end, as attnlab pads), else laid out for `torch.matmul`."""
    if compiled(k) is not None:
        keep = None if mask is None else mask[:, 0, 0, :]  # (S, Ls) True for real keys
        lengths = torch.full((k.size(0),), k.size(2)) if keep is None else keep.sum(1)
        if keep is None or bool((keep == (torch.arange(k.size(2)) < lengths[:, None])).all()):  # padded at the end
            past["k"], past["v"] = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            past["lengths"] = lengths.to(torch.int32)
            return
    past["k"], past["v"] = k.transpose(-2, -1).contiguous().transpose(-2, -1), v.contiguous()


ROW_TABLES = ("row_slots", "row_lengths")


def row_tables(past: dict[str, Tensor], rows: int) -> dict[str, Tensor]:
    """What the kernel reads besides kept encoder-decoder K/V (S, Ls, h, ·), the same for every
    layer, for `rows` = S × g decoder rows (a sentence's rows consecutive, as `TransformerStepper`
    lays them out): each row's sentence as its slot at every position, and its number of real keys."""
    sentences, positions = past["k"].shape[:2]
    groups = rows // sentences
    sentence = torch.arange(rows, dtype=torch.int32) // groups
    slots = sentence[:, None].expand(-1, positions)
    return {"row_slots": slots, "row_lengths": past["lengths"].repeat_interleave(groups)}


def cross_step(past: dict[str, Tensor], q: Tensor, recorded: bool) -> Tensor | tuple[Tensor, Tensor]:
    """Encoder-decoder attention while decoding, q (B, h, Lq, d_k) for B = sentences × g rows: the
    kernel's output (B, h, 1, d_v) where it applies, else the kept k, v as (S, h, Ls, ·). The
    kernel's per-row tables are made once a step for every layer (`KVCache.advance`), or here at
    the step that keeps the K/V."""
    k, v = past["k"], past["v"]
    if "lengths" not in past:
        return k, v
    if q.size(2) > 1 or recorded:
        return k.transpose(1, 2), v.transpose(1, 2)
    if past.get("row_slots") is None or past["row_slots"].size(0) != q.size(0):
        past.update(row_tables(past, q.size(0)))
    slots, lengths = past["row_slots"], past["row_lengths"]
    out = cached_attention(q[:, :, 0], k.transpose(0, 1), v.transpose(0, 1), slots, 0, k.size(1), lengths)
    return out[:, :, None]
