"""Small random Hugging Face `MarianMTModel` directories, saved locally, for the interop tests.

The vocabularies are sentencepiece models trained here on generated word salad (no corpus),
with `vocab.json` ids that deliberately differ from the sentencepiece ids, so a tokenizer that
ignored the vocabulary file would give other ids. Weights are drawn so that outputs depend on
the source and the position (the default init makes every position predict the same token).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import MarianConfig, MarianMTModel

WORDS = "the a dog cat runs sits on in park house red blue small big man woman child plays with ball".split()
VARIANTS = {
    # what the issue names: swish + shared embeddings + a non-zero final_logits_bias ...
    "swish-shared": {"activation_function": "swish", "scale_embedding": False},
    # ... separate vocabularies with untied embeddings ...
    "separate-untied": {
        "activation_function": "swish",
        "share_encoder_decoder_embeddings": False,
        "tie_word_embeddings": False,
        "scale_embedding": True,
    },
    # ... gelu ...
    "gelu": {"activation_function": "gelu", "scale_embedding": True},
    # ... and one vocabulary with an untied output, where transformers 5 ties nothing: the encoder,
    # the decoder and the output each have a table of their own, and `shared` is a fourth.
    "shared-untied": {"activation_function": "swish", "tie_word_embeddings": False},
}


def sentences(seed: int, count: int = 1500) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) for _ in range(count)]


def train_spm(path: Path, seed: int, size: int) -> spm.SentencePieceProcessor:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences(seed)),
        model_prefix=str(path.with_suffix("")),
        vocab_size=size,
        model_type="unigram",
        minloglevel=2,
    )
    path.with_suffix(".model").rename(path)
    return spm.SentencePieceProcessor(model_file=str(path))


def vocab_of(processor: spm.SentencePieceProcessor, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's layout: </s> 0, <unk> 1, then the pieces (reversed: ids unlike sentencepiece's), <pad> last."""
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    pieces = [p for p in reversed(pieces) if p not in ("<s>", "</s>", "<unk>")]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in (*extra, *pieces[:-2]):  # the last two pieces stay out: they map to <unk>
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def make_marian(out: Path, variant: str, seed: int = 0) -> Path:
    """Save a random Marian model of `variant` (see VARIANTS) with its tokenizer files in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    settings = VARIANTS[variant]
    source = train_spm(out / "source.spm", seed, 40)
    target = train_spm(out / "target.spm", seed + 1, 40)
    vocab = vocab_of(source, extra=(">>de<<",))
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    shared = settings.get("share_encoder_decoder_embeddings", True)
    target_vocab = vocab
    if not shared:
        target_vocab = vocab_of(target, extra=(">>de<<",))
        assert target_vocab["<pad>"] == vocab["<pad>"]  # one pad id (the decoder's start) for both sides
        (out / "target_vocab.json").write_text(json.dumps(target_vocab), encoding="utf-8")
    # as OPUS-MT directories say which vocabulary the output reads (MarianTokenizer's choice too)
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": not shared}), encoding="utf-8")
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=max(target_vocab.values()) + 1,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        **settings,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "embed_tokens" in name or "shared" in name:
                param.normal_(0.0, 0.3)
            elif param.dim() == 2:
                param.normal_(0.0, param.size(1) ** -0.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(out)
    return out
