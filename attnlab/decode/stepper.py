"""One decoding step of a Transformer for the search (`attnlab.decode.search`): the model side.

`TransformerStepper` runs the decoder on the newest position with the key/value cache and gives
the search what it reads: the next token's log-probabilities, or directly each row's best moves
(`ranked`), which the kernel computes without writing the (rows, vocabulary) log-softmax.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.decode.deadline import check_time
from attnlab.model.cache import KVCache
from attnlab.model.kernels import log_softmax_top_k, top_k
from attnlab.model.transformer import Transformer


class TransformerStepper:
    """Steps a Transformer; with `cache`, only the newest position is computed each step.

    The encoder output (and, in the cache, the encoder-decoder K/V) is kept once per sentence
    while a sentence's rows are consecutive and equally many per sentence, which is how
    `beam_search` and `greedy_search` lay them out; any other layout falls back to one copy per
    row. Beams then cost no copies of the source side, only of their own prefixes.
    """

    def __init__(
        self, model: Transformer, src: Tensor, cache: bool = True, mask_tokens: Sequence[int] = (), positions: int = 16
    ) -> None:
        """`positions`: the most target positions a row will reach (<s> included), where the search
        knows it: the cache's stores are made that long at once where they fit (`cache.store`)."""
        self.model, self.use_cache, self.positions = model, cache, positions
        self.masked = sorted({model.config.pad_id, model.config.bos_id, *mask_tokens})
        self.mask_tokens = torch.tensor(self.masked, device=src.device)
        self.src_mask = model.src_mask(src)
        self.encoded = model.encode(src, self.src_mask)  # (B, Ls, d_model), once per source

    def start(self, rows: Tensor) -> None:
        self.memory, self.mask = self.encoded, self.src_mask
        self.row_memory = torch.arange(self.encoded.size(0))  # memory entry each row reads
        self.cache = KVCache(room=self.positions) if self.use_cache else None
        self.buffer: Tensor | None = None  # fp32 log-probabilities of a bf16 model
        self.reorder(rows)

    def step(self, tokens: Tensor) -> Tensor:
        return self._log_probs(self._logits(tokens))

    def ranked(self, tokens: Tensor, k: int, eos: int) -> tuple[Tensor, Tensor, Tensor]:
        """`ranked_moves(step(tokens), k, eos)`, in one pass over the logits where the kernel
        applies (`kernels.log_softmax_top_k`): the (N, V) log-probabilities are never written, and
        a bf16 model's logits never copied to fp32 (1,000 rows × 8,000, one thread: 5.5 ms
        instead of 11-13). The same moves up to rounding (its own e^x)."""
        logits = self._logits(tokens)
        found = log_softmax_top_k(logits, min(k, logits.size(1)), self.mask_tokens, eos)
        if found is None:
            return ranked_moves(self._log_probs(logits).cpu(), k, eos)
        if eos in self.masked:  # as `step` fills it: a row out of room then gets -1e4 too
            found[2].fill_(float("-inf"))
        return found

    def _logits(self, tokens: Tensor) -> Tensor:
        check_time()
        new = tokens[:, -1:] if self.cache is not None else tokens
        hidden = self.model.decode(new, self.memory, self.mask, self.cache)[:, -1]  # (N, d_model)
        return self.model.logits(hidden)

    def _log_probs(self, logits: Tensor) -> Tensor:
        """fp32 log-probabilities over the vocabulary, normalised in place: one (N, V) tensor
        read and written, not two (1,200 rows × 8,000: 2 ms instead of 6.7 ms, the same numbers),
        pad and <s> never produced (-inf). In other dtypes the logits are copied into an fp32
        buffer kept across steps: freshly allocated, an (N, V) fp32 tensor costs more in page
        faults than in arithmetic."""
        if logits.dtype == torch.float32:
            lprobs = logits
        else:
            if self.buffer is None or self.buffer.size(0) < logits.size(0):
                self.buffer = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
            lprobs = self.buffer[: logits.size(0)]
            lprobs.copy_(logits)  # (log_softmax's own dtype= is ~9x slower on the CPU)
        return torch.log_softmax(lprobs, dim=-1, out=lprobs).index_fill_(1, self.mask_tokens, float("-inf"))

    def reorder(self, index: Tensor) -> None:
        wanted = self.row_memory.index_select(0, index)  # the memory entry of each new row
        groups = wanted.numel() // torch.unique_consecutive(wanted).numel()
        if not torch.equal(wanted, wanted[::groups].repeat_interleave(groups)):
            groups = 1  # not consecutive equal blocks: one copy per row
        keep = wanted[::groups]  # the memory entries that stay, in their new order
        if not torch.equal(keep, torch.arange(self.memory.size(0))):
            self.memory = self.memory.index_select(0, keep.to(self.memory.device))
            self.mask = None if self.mask is None else self.mask.index_select(0, keep.to(self.mask.device))
        self.row_memory = torch.arange(keep.numel()).repeat_interleave(groups)
        if self.cache is not None:
            self.cache.reorder(index, keep)


def top_moves(lprobs: Tensor, k: int, chunk: int = 64) -> tuple[Tensor, Tensor]:
    """`lprobs.topk(k, dim=1)` over a large vocabulary, in a quarter of its time on the CPU.

    A row's k best entries lie in the k chunks (of `chunk` columns) with the highest maxima:
    each chunk holding one of them has a maximum at least the k-th best value, and at most k
    chunks can. So one cheap max over every column, then `topk` over k · chunk candidates
    instead of V (8,000 columns: 7.7 ms -> 3.4 ms a step for 1,000 rows). Same values; among
    exact ties the indices may differ, as they may between `topk` implementations. Where the
    compiled kernel applies (fp32 on the CPU), one pass per row instead (`kernels.top_k`:
    400 rows, one thread, 1.7 ms against 2.6 ms for the chunks).
    """
    found = top_k(lprobs, k)  # the compiled one-pass kernel, where it applies
    if found is not None:
        return found
    rows, vocab = lprobs.shape
    if vocab < 4 * k * chunk:  # too few chunks to skip: plain topk
        return lprobs.topk(min(k, vocab), dim=1)
    whole = vocab // chunk * chunk
    best_chunks = lprobs[:, :whole].reshape(rows, -1, chunk).amax(2).topk(k, dim=1).indices  # (N, k)
    columns = (best_chunks[:, :, None] * chunk + torch.arange(chunk, device=lprobs.device)).view(rows, -1)
    if whole < vocab:  # the ragged last chunk is always a candidate
        columns = torch.cat([columns, torch.arange(whole, vocab, device=lprobs.device).expand(rows, -1)], 1)
    values, picked = lprobs.gather(1, columns).topk(k, dim=1)
    return values, columns.gather(1, picked)


def ranked_moves(lprobs: Tensor, k: int, eos: int) -> tuple[Tensor, Tensor]:
    """What the search reads of a step's (N, V) log-probabilities: each row's min(k, V) best
    moves (`top_moves`: log-probabilities and tokens) and each row's log-probability of </s>."""
    return (*top_moves(lprobs, min(k, lprobs.size(1))), lprobs[:, eos])
