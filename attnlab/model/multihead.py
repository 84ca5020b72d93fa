"""§3.2.2 Multi-head attention: h parallel heads of Eq. (1) (`attnlab.model.attention`), each in
its own d_k / d_v projection, concatenated and projected by W^O; the model's named hook points.

Each `MultiHeadAttention` is a hook point (`encoder.layers.2.self_attn`, `decoder.layers.0.cross_attn`,
...). With no hook set it runs PyTorch's fused `scaled_dot_product_attention`; with a recording hook
set (`attnlab.record`) it runs the explicit Eq. (1) and hands the weights to the hook; ablation and
activation patching act on the heads' outputs before W^O. All three attach per thread
(`attnlab.model.hooks`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.attention import BANDED_FROM, explicit_attention, local_attention, window_mask
from attnlab.model.cache import cross_step, keep_cross, self_step
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import HEAD_MASKS, HEAD_PATCHES, HOOKS, AttentionHook


def cast_once(x: Tensor) -> Tensor:
    """x in autocast's dtype when autocast is on, else x: an activation read by several projections (the
    q, k, v of self-attention; the encoder output) is cast once, not once per projection, nor its gradient."""
    device = x.device.type
    return x.to(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else x


class MultiHeadAttention(nn.Module):
    """§3.2.2: h parallel heads of Eq. (1) with separate d_k and d_v, then W^O."""

    def __init__(self, config: ModelConfig, kind: str) -> None:
        super().__init__()
        self.kind = kind  # "encoder" | "decoder" | "cross" (§3.2.3)
        self.name = ""  # set by Transformer to the hook point's dotted name
        self.n_heads, self.d_k, self.d_v = config.n_heads, config.d_k, config.d_v
        bias = config.attn_bias  # (the paper's projections have none; Marian's do)
        self.w_q = nn.Linear(config.d_model, config.n_heads * config.d_k, bias=bias)
        self.w_k = nn.Linear(config.d_model, config.n_heads * config.d_k, bias=bias)
        self.w_v = nn.Linear(config.d_model, config.n_heads * config.d_v, bias=bias)
        self.w_o = nn.Linear(config.n_heads * config.d_v, config.d_model, bias=bias)
        # Restricted self-attention (`attn_window`): the band is applied here, where the keys'
        # positions are known (also in incremental decoding); encoder-decoder attention is global.
        self.window = None if kind == "cross" else config.attn_window
        self.causal = kind == "decoder"
        self.p_attn_drop = config.p_attn_drop  # on the weights, while training only

    @property
    def hook(self) -> AttentionHook | None:
        """The recording hook attached in this thread (`attnlab.record`); None: the fused
        kernel runs and nothing is recorded. Compiled graphs are never recorded (dynamo cannot
        read a context variable; the trainer records probes with the eager model)."""
        return None if torch.compiler.is_compiling() else HOOKS.get().get(self)

    @property
    def head_mask(self) -> Tensor | None:
        """(h,) 0/1 per head attached in this thread (`attnlab.ablate`), or (B, h) one gate per sentence
        (`attnlab.head_importance` differentiates through them); None: all on (and when compiled)."""
        return None if torch.compiler.is_compiling() else HEAD_MASKS.get().get(self)

    @property
    def head_patch(self) -> tuple[Tensor, Tensor] | None:
        """(gate (B, h), outputs (B or 1, h, Lq, d_v)) from activation patching (`attnlab.record.patching`):
        a gate of 1 replaces the head's output by the one given, before any head mask."""
        return None if torch.compiler.is_compiling() else HEAD_PATCHES.get().get(self)

    def _split(self, x: Tensor, d: int) -> Tensor:
        batch, length, _ = x.shape  # -> (B, h, L, d); one position (decoding): a view, not a transpose
        return x.view(batch, self.n_heads, 1, d) if length == 1 else x.view(batch, length, -1, d).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        cache: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """x: (B, Lq, d_model) queries; keys/values come from `memory` (cross) or x (self).

        While decoding, `memory` may hold one row per sentence for B = sentences × g query rows
        (a sentence's g beams in consecutive rows): the encoder-decoder K/V are then computed,
        cached and attended once per sentence instead of once per beam.
        """
        x = cast_once(x)
        q = self._split(self.w_q(x), self.d_k)
        if memory is None or cache is None or "k" not in cache:
            source = x if memory is None else memory
            k, v = self._split(self.w_k(source), self.d_k), self._split(self.w_v(source), self.d_v)
            if cache is not None and memory is not None:  # encoder-decoder K/V: once per source
                keep_cross(cache, k, v, mask)
        if cache is not None:  # incremental decoding (attnlab.model.cache): the attention's output, or K/V
            recorded = self.hook is not None
            got = (
                cross_step(cache, q, recorded)
                if memory is not None
                else self_step(cache, q, k, v, self.window, recorded)
            )
            if isinstance(got, Tensor):
                return self._project(got)
            k, v = got
        if self.window is not None and self.window < k.size(2) - 1:  # else the window covers everything
            if self.hook is None and q.size(2) == k.size(2) > BANDED_FROM * (2 * self.window + 1):
                keep = None if mask is None or mask.size(-2) > 1 else mask[:, 0, 0, :]  # key padding
                if keep is not None or mask is None or self.causal:  # (a dense causal mask is the band's)
                    out = local_attention(q, k, v, self.window, self.causal, keep, self._dropout)
                    return self._project(out)
            band = window_mask(q.size(2), k.size(2), self.window, self.causal, q.device)
            mask = band if mask is None else mask & band
        out = self._attend(q, k, v, mask, decoding=cache is not None)
        return self._project(out)

    def _project(self, out: Tensor) -> Tensor:
        """The heads' outputs (B, h, Lq, d_v), concatenated and projected by W^O."""
        if (patch := self.head_patch) is not None:  # (gate, outputs)
            out = out + patch[0].to(out.dtype).reshape(-1, self.n_heads, 1, 1) * (patch[1].to(out.dtype) - out)
        head_mask = self.head_mask  # (a context-variable lookup: read once)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).reshape(-1, self.n_heads, 1, 1)  # switched-off heads give 0
        batch, _, length, _ = out.shape
        out = out.reshape(batch, 1, -1) if length == 1 else out.transpose(1, 2).reshape(batch, length, -1)
        return self.w_o(out)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, decoding: bool) -> Tensor:
        """Eq. (1) for every head: q (B, h, Lq, d_k) against k, v (B / g, h, Lk, ·) -> (B, h, Lq, d_v).

        The fused kernel runs when nothing is recorded, except on the CPU in two cases where the
        two matrix products of Eq. (1) are faster: incremental decoding (one query per row: 2-7x
        in bf16; `benchmarks/decode.py`) and bf16 (a bf16 model, or autocast: the products run in
        bf16, where PyTorch's CPU kernels upcast all of Eq. (1) to fp32 and take twice as long
        forward and backward, 1.5-2x as long forward only; docs/BENCHMARKS.md, training rounds 3-4).
        """
        groups = q.size(0) // k.size(0)
        if groups > 1:  # a sentence's g rows become g·Lq queries against its one copy of K/V
            q = q.unflatten(0, (-1, groups)).transpose(1, 2).flatten(2, 3)
        cpu = q.device.type == "cpu"
        hook = self.hook  # (a context-variable lookup: read once per call)
        if hook is None and not (cpu and (decoding or q.dtype == torch.bfloat16)):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout)
            return self._ungroup(out, groups)
        out, weights = explicit_attention(q, k, v, mask, self._dropout)
        if hook is not None:
            rows = (lambda t: t.repeat_interleave(groups, 0)) if groups > 1 else (lambda t: t)
            hook(self, self._ungroup(weights, groups), None if mask is None else rows(mask), rows(v))
        return self._ungroup(out, groups)

    @property
    def _dropout(self) -> float:
        """The attention dropout's rate now: `p_attn_drop` while training, else 0."""
        return self.p_attn_drop if self.training else 0.0

    @staticmethod
    def _ungroup(x: Tensor, groups: int) -> Tensor:
        """(S, h, g·Lq, ·) -> (S·g, h, Lq, ·): undo the grouping of `_attend`."""
        return x if groups == 1 else x.unflatten(2, (groups, -1)).transpose(1, 2).flatten(0, 1)
