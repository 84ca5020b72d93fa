"""The Transformer of *Attention Is All You Need*, §3, readable top to bottom.

Every attention sub-layer is a named hook point (`encoder.layers.2.self_attn`,
`decoder.layers.0.cross_attn`, ...). With no hook set it runs PyTorch's fused
`scaled_dot_product_attention`; with a hook set (see `attnlab.record`) it runs the explicit
Eq. (1) below and hands the weights to the hook. Masks are boolean and True where attending is
allowed, everywhere in attnlab.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import ConfigError, ModelInputError
from attnlab.model.attention import BANDED_FROM, explicit_attention, local_attention, window_mask
from attnlab.model.cache import KVCache, cross_step, keep_cross, self_step
from attnlab.model.config import ModelConfig
from attnlab.model.dropout import Dropout
from attnlab.model.embedding import embedding_table, sinusoidal_positions
from attnlab.model.hooks import HEAD_MASKS, HEAD_PATCHES, HOOKS, AttentionHook
from attnlab.model.linear import PackedWeight, linear


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
        self.w_q = nn.Linear(config.d_model, config.n_heads * config.d_k)
        self.w_k = nn.Linear(config.d_model, config.n_heads * config.d_k)
        self.w_v = nn.Linear(config.d_model, config.n_heads * config.d_v)
        self.w_o = nn.Linear(config.n_heads * config.d_v, config.d_model)
        # Restricted self-attention (`attn_window`): the band is applied here, where the keys'
        # positions are known (also in incremental decoding); encoder-decoder attention is global.
        self.window = None if kind == "cross" else config.attn_window
        self.causal = kind == "decoder"

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
                    out = local_attention(q, k, v, self.window, self.causal, keep)
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
            return self._ungroup(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), groups)
        out, weights = explicit_attention(q, k, v, mask)
        if hook is not None:
            rows = (lambda t: t.repeat_interleave(groups, 0)) if groups > 1 else (lambda t: t)
            hook(self, self._ungroup(weights, groups), None if mask is None else rows(mask), rows(v))
        return self._ungroup(out, groups)

    @staticmethod
    def _ungroup(x: Tensor, groups: int) -> Tensor:
        """(S, h, g·Lq, ·) -> (S·g, h, Lq, ·): undo the grouping of `_attend`."""
        return x if groups == 1 else x.unflatten(2, (groups, -1)).transpose(1, 2).flatten(0, 1)


ACTIVATION_FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, xW1 + b1)W2 + b2 (ReLU; imported Marian models may use GELU or swish)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff)
        self.w_2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        # As rows (N, d_model): compiled with dynamic shapes, a 3-D ReLU made Inductor save its
        # backward mask as bool, which its CPU code writes 8x slower (BENCHMARKS.md, training round 8).
        return self.w_2(self.activation(self.w_1(x.reshape(-1, x.size(-1))))).view(x.shape)


class Residual(nn.Module):
    """§3.1 and §5.4: LayerNorm(x + Dropout(Sublayer(x))); `norm="pre"` is the opt-in
    x + Dropout(Sublayer(LayerNorm(x))) that later work prefers (not the paper's)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.p_drop)
        self.pre = config.norm == "pre"

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config, "encoder")
        self.ffn = FeedForward(config)
        self.res_attn, self.res_ffn = Residual(config), Residual(config)

    def forward(self, x: Tensor, src_mask: Tensor | None) -> Tensor:
        x = self.res_attn(x, lambda y: self.self_attn(y, mask=src_mask))
        return self.res_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config, "decoder")
        self.cross_attn = MultiHeadAttention(config, "cross")
        self.ffn = FeedForward(config)
        self.res_self, self.res_cross, self.res_ffn = Residual(config), Residual(config), Residual(config)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        src_mask: Tensor | None,
        cache: dict[str, dict[str, Tensor]] | None = None,
    ) -> Tensor:
        self_cache = None if cache is None else cache.setdefault("self", {})
        cross_cache = None if cache is None else cache.setdefault("cross", {})
        x = self.res_self(x, lambda y: self.self_attn(y, mask=tgt_mask, cache=self_cache))
        x = self.res_cross(x, lambda y: self.cross_attn(y, memory, mask=src_mask, cache=cross_cache))
        return self.res_ffn(x, self.ffn)


class Transformer(nn.Module):
    """Encoder-decoder with one shared embedding matrix for source, target and the pre-softmax
    projection (§3.4), embeddings scaled by √d_model, positions added (§3.5), then dropout.

    Imported Marian models may have their own target embedding (`tgt_embed`), an untied output
    matrix (`out_proj`) and a bias on the logits (`logits_bias`); the paper's presets have none."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):  # Transformer("small") was an AttributeError
            raise ConfigError(f"Transformer takes a ModelConfig, e.g. attnlab.preset('small'); got {config!r}")
        self.config = config
        self.embed = embedding_table(config.vocab_size, config.d_model, config.pad_id)
        if not config.share_embeddings:
            self.tgt_embed = embedding_table(config.target_vocab, config.d_model, config.pad_id)
        if not config.tie_output:
            self.out_proj = nn.Linear(config.d_model, config.target_vocab, bias=False)
        if config.logits_bias:
            self.register_buffer("logits_bias", torch.zeros(config.target_vocab))
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        if config.positional == "learned":
            self.positions = embedding_table(config.max_len, config.d_model)
        else:  # fixed, so no checkpoint stores it; `reset_parameters` computes it
            self.register_buffer("pe", torch.empty(config.max_len, config.d_model), persistent=False)
        self.dropout = Dropout(config.p_drop)
        self.packed_output = PackedWeight()  # the output matrix in oneDNN's layout, made when decoding
        self.encoder = nn.ModuleDict({"layers": nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))})
        self.decoder = nn.ModuleDict({"layers": nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))})
        # Pre-norm stacks need a final LayerNorm; the paper's post-norm stacks already end in one.
        self.final_norms = nn.ModuleList(nn.LayerNorm(config.d_model) for _ in range(2 if config.norm == "pre" else 0))
        if not self.embed.weight.is_meta:  # a model on the meta device has shapes only, nothing to fill
            self.reset_parameters()
        for name, module in self.named_modules():
            if isinstance(module, MultiHeadAttention):
                module.name = name

    def reset_parameters(self) -> None:
        """Embeddings ~ N(0, d_model^-1/2) so that after ×√d_model they have unit scale (the
        tensor2tensor convention); Xavier-uniform projections; learned positions ~ N(0, 1)
        (nn.Embedding's default); the sinusoidal table of §3.5."""
        for table in dict.fromkeys((self.embed, self.target_embedding)):  # once if shared, in order
            nn.init.normal_(table.weight, 0.0, self.config.d_model**-0.5)
            with torch.no_grad():
                table.weight[self.config.pad_id].zero_()
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if self.config.positional == "learned":
            nn.init.normal_(self.positions.weight)
        else:
            with torch.no_grad():
                self.pe.copy_(sinusoidal_positions(self.config.max_len, self.config.d_model, self.config.pe_layout))

    @property
    def target_embedding(self) -> nn.Embedding:
        """The decoder's embedding: the shared matrix (§3.4) unless the model has its own."""
        return self.embed if self.config.share_embeddings else self.tgt_embed

    # -- hook points ---------------------------------------------------------------------
    def attention_modules(self) -> list[MultiHeadAttention]:
        """Every hook point, in order: encoder self, then per decoder layer self and cross."""
        return [m for m in self.modules() if isinstance(m, MultiHeadAttention)]

    # -- input checks (clear errors instead of an IndexError deep in torch) --------------
    def check_ids(self, ids: Tensor, what: str, vocab_size: int | None = None) -> None:
        """Raise a one-line ModelInputError for ids the model cannot read. Skipped inside a
        compiled graph (min/max would read values back to the host): the trainer checks each
        batch on the host before the compiled step (`Trainer.train_step`)."""
        if torch.compiler.is_compiling():
            return
        if not isinstance(ids, Tensor):  # a list was an AttributeError
            raise ModelInputError(f"{what} must be a (batch, length) tensor of token ids, got {type(ids).__name__}")
        if ids.dim() != 2:
            raise ModelInputError(f"{what} must be a (batch, length) tensor of token ids, got shape {tuple(ids.shape)}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise ModelInputError(f"{what} must hold integer token ids, got {ids.dtype}")
        if ids.size(0) == 0 or ids.size(1) == 0:
            raise ModelInputError(f"{what} is empty (shape {tuple(ids.shape)})")
        if ids.size(1) > self.config.max_len:
            raise ModelInputError(
                f"{what} has {ids.size(1)} tokens, more than the model's max_len={self.config.max_len}"
            )
        vocab_size = vocab_size or self.config.vocab_size
        low, high = (int(bound) for bound in torch.aminmax(ids))
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ModelInputError(f"{what} holds token id {bad}, outside the vocabulary [0, {vocab_size})")

    # -- §3.4, §3.5 ------------------------------------------------------------------------
    def embed_tokens(self, ids: Tensor, start: int = 0, table: nn.Embedding | None = None) -> Tensor:
        x = (self.embed if table is None else table)(ids) * self.embed_scale  # (B, L, d_model)
        if self.config.positional == "learned":
            pos = self.positions(torch.arange(start, start + ids.size(1), device=ids.device))
        else:
            pos = self.pe[start : start + ids.size(1)]  # (a view: no index tensor a decoding step)
        return self.dropout(x + pos)

    def src_mask(self, src: Tensor) -> Tensor | None:
        """(B, 1, 1, Ls) key-padding mask, or None when there is no padding (eager fast path).
        Compiled, the mask is always built: asking whether it is needed reads a value back to
        the host, a synchronisation and a graph break per call."""
        keep = src.ne(self.config.pad_id)[:, None, None, :]
        if torch.compiler.is_compiling():
            return keep
        return None if bool(keep.all()) else keep

    @staticmethod
    def causal_mask(length: int, device: torch.device | str = "cpu") -> Tensor:
        """(1, 1, L, L): position i may attend to positions ≤ i (§3.2.3)."""
        return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src: (B, Ls) ids -> memory (B, Ls, d_model)."""
        self.check_ids(src, "source")
        mask = self.src_mask(src) if src_mask is None else src_mask
        x = self.embed_tokens(src)
        for layer in self.encoder["layers"]:
            x = layer(x, mask)
        return self.final_norms[0](x) if self.final_norms else x

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache | None = None) -> Tensor:
        """tgt: (B, Lt) decoder inputs (BOS first) -> hidden states (B, Lt, d_model).

        With a cache, `tgt` holds only the new positions and earlier ones are not recomputed.
        """
        self.check_ids(tgt, "target", self.config.target_vocab)
        start = 0 if cache is None else cache.length
        if start + tgt.size(1) > self.config.max_len:
            raise ModelInputError(f"target would exceed the model's max_len={self.config.max_len}")
        x = self.embed_tokens(tgt, start, self.target_embedding)
        # With one new position per step, every cached key is visible: no mask needed (the
        # attention layers add the band of a restricted model themselves).
        tgt_mask = self.causal_mask(tgt.size(1), tgt.device) if tgt.size(1) > 1 else None
        if cache is not None:
            if start and tgt.size(1) > 1:
                raise ModelInputError("incremental decoding feeds one position at a time")
            if not cache.layers:
                cache.layers = [{} for _ in self.decoder["layers"]]
            cache.advance(tgt.size(0), tgt.size(1), tgt.device)
        memory = cast_once(memory)
        for i, layer in enumerate(self.decoder["layers"]):
            x = layer(x, memory, tgt_mask, src_mask, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.length += tgt.size(1)
        return self.final_norms[1](x) if self.final_norms else x

    def logits(self, hidden: Tensor) -> Tensor:
        """Pre-softmax projection with the shared embedding matrix (§3.4); when decoding on the
        CPU, through a packed copy of the matrix (`attnlab.model.linear`)."""
        weight = self.out_proj.weight if not self.config.tie_output else self.target_embedding.weight
        out = linear(hidden, weight, packed=self.packed_output)
        return out.add_(self.logits_bias) if self.config.logits_bias else out

    def forward(self, src: Tensor, tgt: Tensor, scored: Tensor | None = None) -> Tensor:
        """Teacher-forced pass: src (B, Ls), tgt (B, Lt) decoder inputs -> logits (B, Lt, V).

        With `scored` (N,), flat indices into the (B, Lt) positions, only those get logits,
        (N, V): the trainer passes the non-pad targets, so padding costs no share of the
        pre-softmax projection and the loss over the vocabulary (7-9% of positions in
        Multi30k's token-budget batches; that projection is a quarter of base's step)."""
        self.check_ids(src, "source")
        if isinstance(tgt, Tensor) and tgt.dim() == 2 and src.size(0) != tgt.size(0):  # (else `decode` says why)
            raise ModelInputError(f"source batch {src.size(0)} and target batch {tgt.size(0)} differ")
        mask = self.src_mask(src)
        memory = self.encode(src, mask)
        hidden = self.decode(tgt, memory, mask)
        if scored is not None:
            hidden = hidden.flatten(0, 1).index_select(0, scored)
        return self.logits(hidden)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor once (the tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())
