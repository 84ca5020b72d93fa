"""The Transformer of *Attention Is All You Need*, §3, readable top to bottom: the feed-forward
layers (§3.3), the residual blocks (§3.1, §5.4), the encoder and decoder layers and the model with
its embeddings and positions (§3.4-§3.5).

Every attention sub-layer is a `MultiHeadAttention` (§3.2.2, `attnlab.model.multihead`), a named hook
point (`encoder.layers.2.self_attn`, `decoder.layers.0.cross_attn`, ...). With no hook set it runs
PyTorch's fused `scaled_dot_product_attention`; with a hook set (see `attnlab.record`) it runs the
explicit Eq. (1) (`attnlab.model.attention`) and hands the weights to the hook. Masks are boolean
and True where attending is allowed, everywhere in attnlab.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import ConfigError, ModelInputError
from attnlab.model.cache import KVCache
from attnlab.model.config import ModelConfig
from attnlab.model.dropout import Dropout
from attnlab.model.embedding import embedding_table, sinusoidal_positions
from attnlab.model.linear import PackedWeight, linear
from attnlab.model.multihead import MultiHeadAttention, cast_once

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
    def embed_tokens(
        self, ids: Tensor, start: int = 0, table: nn.Embedding | None = None, rows: Tensor | None = None
    ) -> Tensor:
        """ids (B, L) -> the first layer's input: each id's row of the embedding × √d_model, plus its
        position. `rows` stands in for the looked-up rows (B, L, d_model): gradient saliency
        (`attnlab.record.saliency`) differentiates with respect to them, as Hugging Face's
        `inputs_embeds`."""
        looked_up = (self.embed if table is None else table)(ids) if rows is None else rows
        x = looked_up * self.embed_scale  # (B, L, d_model)
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

    def encode(self, src: Tensor, src_mask: Tensor | None = None, rows: Tensor | None = None) -> Tensor:
        """src: (B, Ls) ids -> memory (B, Ls, d_model); `rows`: their embeddings (`embed_tokens`)."""
        self.check_ids(src, "source")
        mask = self.src_mask(src) if src_mask is None else src_mask
        x = self.embed_tokens(src, rows=rows)
        for layer in self.encoder["layers"]:
            x = layer(x, mask)
        return self.final_norms[0](x) if self.final_norms else x

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        cache: KVCache | None = None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """tgt: (B, Lt) decoder inputs (BOS first) -> hidden states (B, Lt, d_model); `rows`: their
        embeddings (`embed_tokens`).

        With a cache, `tgt` holds only the new positions and earlier ones are not recomputed.
        """
        self.check_ids(tgt, "target", self.config.target_vocab)
        start = 0 if cache is None else cache.length
        if start + tgt.size(1) > self.config.max_len:
            raise ModelInputError(f"target would exceed the model's max_len={self.config.max_len}")
        x = self.embed_tokens(tgt, start, self.target_embedding, rows)
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
        CPU, through a packed copy of the matrix (`attnlab.model.linear`). An untied output
        matrix is a layer of its own, called as one: int8's `quantize_dynamic` swaps it for a
        quantized layer, whose `weight` is a method (it was an AttributeError in every decode)."""
        if self.config.tie_output:
            out = linear(hidden, self.target_embedding.weight, packed=self.packed_output)
        else:
            out = self.out_proj(hidden)
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
