"""Decoding speed: attnlab's cached beam search against itself uncached and Hugging Face Marian.

Target tokens per second of beam search (beam 4) on the CPU for one fixed batch of sentences, for
three systems of the same shape (the `small` preset: 3+3 layers, d_model 256, 4 heads, d_ff 1024,
a shared 8k vocabulary) with random weights:

- attnlab, with its key/value cache (`TransformerStepper(cache=True)`): one new position a step;
- attnlab without the cache: every step recomputes the whole prefix (what the cache saves);
- Hugging Face `MarianMTModel.generate(num_beams=4)`, configured to the same shape (ReLU,
  embeddings scaled by √d_model, post-norm, tied embeddings).

Equal work: with random weights the systems would stop at different lengths, so every sentence
is made to produce exactly `--tgt-len` tokens on both sides. attnlab's search runs with a maximum
length of `--tgt-len` (where it forces </s>) behind a stepper that forbids </s> before that;
Marian runs with `min_new_tokens = max_new_tokens = --tgt-len` (its min-length processor forbids
</s> likewise). Both therefore take `--tgt-len` decoder steps over sentences × 4 rows, and the
tokens counted are sentences × `--tgt-len` on every side (checked). attnlab is driven through
`beam_search(TransformerStepper(...))`, which is what `attnlab.decode.generate` runs.

The sources are random ids of Multi30k-like lengths (10-20 tokens, mean 15; padded batch): with
random weights the ids do not change the cost. Systems are timed in turn, `--repeats` rounds,
median per system. `--dtype bf16` converts every system's weights to bf16 (`.to(torch.bfloat16)`,
no autocast), so activations are bf16 too; log-probabilities are taken in fp32 by both.

    .venv/bin/python benchmarks/decode.py                 # bf16, then fp32
    .venv/bin/python benchmarks/decode.py --dtype fp32    # one precision
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch
from common import add_clock_argument, clock, machine, median
from torch import Tensor

from attnlab.decode.search import TransformerStepper, beam_search
from attnlab.model.config import ModelConfig, preset
from attnlab.model.transformer import Transformer


class NoEarlyEos:
    """Wraps a stepper so that </s> is never chosen: beam search then runs to its maximum
    length, where it forces </s> itself (the equal-work rule of this benchmark)."""

    def __init__(self, inner: TransformerStepper, eos: int) -> None:
        self.inner, self.eos = inner, eos

    def start(self, rows: Tensor) -> None:
        self.inner.start(rows)

    def step(self, tokens: Tensor) -> Tensor:
        lprobs = self.inner.step(tokens)
        lprobs[:, self.eos] = float("-inf")
        return lprobs

    def reorder(self, index: Tensor) -> None:
        self.inner.reorder(index)


def sources(config: ModelConfig, sentences: int, seed: int = 0) -> Tensor:
    """(sentences, 21) padded random ids, each row 10-20 ids followed by </s>."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(10, 21, (sentences,), generator=generator).tolist()
    src = torch.full((sentences, max(lengths) + 1), config.pad_id, dtype=torch.long)
    for row, length in enumerate(lengths):
        src[row, :length] = torch.randint(4, config.vocab_size, (length,), generator=generator)
        src[row, length] = config.eos_id
    return src


def attnlab_decoder(model: Transformer, src: Tensor, tgt_len: int, cache: bool) -> Callable[[], int]:
    """A call that decodes `src` with beam 4, α 0.6 and returns the target tokens produced."""
    config = model.config

    def run() -> int:
        stepper = NoEarlyEos(TransformerStepper(model, src, cache=cache), config.eos_id)
        best = [
            found[0] for found in beam_search(stepper, [tgt_len] * src.size(0), 4, 0.6, config.bos_id, config.eos_id)
        ]
        if any(len(hyp.tokens) != tgt_len for hyp in best):
            raise SystemExit("attnlab produced a hypothesis of the wrong length: the work is not equal")
        return tgt_len * len(best)

    return run


def marian_decoder(config: ModelConfig, src: Tensor, tgt_len: int, dtype: torch.dtype) -> Callable[[], int] | None:
    """The same call for a random `MarianMTModel` of attnlab's shape; None without transformers."""
    try:
        from transformers import MarianConfig, MarianMTModel
        from transformers.utils import logging
    except ImportError:
        return None
    logging.set_verbosity_error()  # a random model's generation-config notices are noise here
    marian_config = MarianConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.n_layers,
        decoder_layers=config.n_layers,
        encoder_attention_heads=config.n_heads,
        decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=config.max_len,
        pad_token_id=config.pad_id,
        eos_token_id=config.eos_id,
        bos_token_id=config.bos_id,
        decoder_start_token_id=config.bos_id,
        forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    model = MarianMTModel(marian_config).eval().to(dtype)
    attention_mask = src.ne(config.pad_id).long()

    def run() -> int:
        out = model.generate(
            input_ids=src,
            attention_mask=attention_mask,
            num_beams=4,
            length_penalty=0.6,
            do_sample=False,
            min_new_tokens=tgt_len,
            max_new_tokens=tgt_len,
        )
        if out.shape != (src.size(0), tgt_len + 1):  # + the decoder start token
            raise SystemExit(f"Marian produced {tuple(out.shape)}, not {(src.size(0), tgt_len + 1)}")
        return tgt_len * src.size(0)

    return run


def measure(name: str, dtype: str, args: argparse.Namespace) -> dict[str, object]:
    """Time the three systems in `dtype`, in turn, and return the speeds and ratios."""
    now = clock(args.clock)
    config = preset(name)
    torch.manual_seed(0)
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    model = Transformer(config).eval().to(torch_dtype)
    src = sources(config, args.sentences)
    systems: dict[str, Callable[[], int]] = {
        "attnlab_cached": attnlab_decoder(model, src, args.tgt_len, cache=True),
        "attnlab_uncached": attnlab_decoder(model, src, args.tgt_len, cache=False),
    }
    marian = marian_decoder(config, src, args.tgt_len, torch_dtype)
    if marian is not None:
        systems["marian"] = marian
    times: dict[str, list[float]] = {system: [] for system in systems}
    with torch.inference_mode():
        tokens = {system: run() for system, run in systems.items()}  # warm-up, and the token count each
        for _ in range(args.repeats):
            for system, run in systems.items():
                start = now()
                run()
                times[system].append(now() - start)
    speed = {system: tokens[system] / median(times[system]) for system in systems}
    result: dict[str, object] = {
        "preset": name,
        "sentences": args.sentences,
        "tgt_len": args.tgt_len,
        "beam": 4,
        "dtype": dtype,
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        **{f"{system}_tokens_per_s": round(value, 1) for system, value in speed.items()},
        "cached_over_uncached": round(speed["attnlab_cached"] / speed["attnlab_uncached"], 3),
    }
    if marian is not None:
        result["cached_over_marian"] = round(speed["attnlab_cached"] / speed["marian"], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--tgt-len", type=int, default=20, help="target tokens every sentence produces, </s> included")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--dtype",
        nargs="+",
        default=["bf16", "fp32"],
        choices=["fp32", "bf16"],
        help="one measurement per precision; bf16 converts every system's weights (default: both)",
    )
    add_clock_argument(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per precision")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny preset, 4 sentences, 5 tokens: checks the script runs"
    )
    args = parser.parse_args(argv)
    name = "small"
    if args.smoke:
        name, args.sentences, args.tgt_len, args.repeats = "tiny", 4, 5, 1
    try:
        import transformers  # noqa: F401
    except ImportError:
        print(
            "# Hugging Face transformers is not installed: Marian skipped (pip install transformers)", file=sys.stderr
        )
    print(f"# {machine(torch.device('cpu'), args.clock)}", file=sys.stderr)
    for dtype in args.dtype:
        print(
            f"# {name} preset, random weights, {dtype}, {args.sentences} sentences, beam 4, "
            f"{args.tgt_len} target tokens each, median of {args.repeats}",
            file=sys.stderr,
        )
        result = measure(name, dtype, args)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        for system in ("attnlab_cached", "attnlab_uncached", "marian"):
            if f"{system}_tokens_per_s" in result:
                print(f"{dtype}  {system:<17} {result[f'{system}_tokens_per_s']:>9,.0f} target tokens/s")
        print(f"{dtype}  attnlab cached / uncached: {result['cached_over_uncached']:.2f}x")
        if "cached_over_marian" in result:
            print(f"{dtype}  attnlab cached / Marian:   {result['cached_over_marian']:.2f}x (goal >= 2x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
