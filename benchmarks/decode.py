"""Decoding speed: attnlab against CTranslate2 and Hugging Face Marian, in two settings.

Target tokens per second of beam search (beam 4, α 0.6) on the CPU, every system on the same
number of threads, printed as ratios to the peers measured in the same run.

**test2016** (real sentences, each system's own stopping): the bundled EN→DE translator
(`checkpoints/multi30k-en-de`) decodes Multi30k test2016 with `Model.translate` (fp32 and bf16),
and the same weights exported by `attnlab export ctranslate2` decode it with CTranslate2 (fp32
and int8 weights). Tokens are the pieces each system produced, </s> included; outputs differ a
little, so the token counts differ a little too (printed). attnlab stops as tensor2tensor does (the
paper's decoder: once no live hypothesis can still win), CTranslate2 once `beam` hypotheses have
ended (its `patience` 1, fairseq's rule): the `attnlab-patience1` rows run attnlab with that stop
too (`translate(patience=1)`), the same search as CTranslate2's. Both batch the same way: sentences
sorted by length, at most `BATCH_TOKENS` source tokens × beam a batch (attnlab's default;
CTranslate2's `batch_type="tokens"` with a quarter of it). CTranslate2 at 64 sentences a batch,
as this script ran it until issue #19's third round, was 1.3x slower here (1.7x at 32).

**latency** (one sentence at a time): the same systems on the first `--latency-sentences`
sentences of test2016, one call per sentence, as the explorer and the widgets translate what a
user types; rows give milliseconds per sentence too. No batch to fill the products: this is where
per-step overhead (every PyTorch operation of a decoding step) shows.

**equal-work** (random weights, every sentence exactly `--tgt-len` tokens): systems of the same
shape (the `small` preset: 3+3 layers, d_model 256, 4 heads, d_ff 1024, a shared 8k vocabulary):

- attnlab with its key/value cache (`TransformerStepper(cache=True)`), and without it (every step
  recomputes the prefix: what the cache saves);
- Hugging Face `MarianMTModel.generate(num_beams=4)` configured to the same shape (ReLU,
  embeddings × √d_model, post-norm, tied embeddings);
- CTranslate2 on the same random weights, exported with `attnlab export ctranslate2`.

With random weights the systems would stop at different lengths, so every sentence is made to
produce `--tgt-len` tokens: attnlab's search runs to its maximum length behind a stepper that
forbids </s> before it; Marian runs with `min_new_tokens = max_new_tokens`, CTranslate2 with
`min_decoding_length = max_decoding_length` (checked). The sources are random ids of Multi30k-like
lengths (10-20 tokens). Systems are warmed twice, then timed in turn, `--repeats` rounds, median
per system. Every process keeps freed memory (`keep_freed_memory`), as `attnlab translate` does.
`bf16` converts every torch system's weights to bf16 (no autocast); CTranslate2 runs `float32` and
`int8` (its fast CPU precisions). CTranslate2 always, and each attnlab precision on real
sentences (test2016, latency; there attnlab also runs `int8`, `load(dtype="int8")`: int8 linear
layers, dynamically quantized activations), runs in a process of its own (`Worker`), as users run
them.

    .venv/bin/python benchmarks/decode.py            # both settings, all precisions
    .venv/bin/python benchmarks/decode.py --json     # one JSON row per setting × system × dtype
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from common import Worker, add_clock_argument, clock, machine, median, without_emulated_bf16
from torch import Tensor

import attnlab
from attnlab.data.corpora import find_data_dir, read_lines
from attnlab.decode.interop import ctranslate2_spec, export_ctranslate2, write_spec
from attnlab.decode.search import beam_search
from attnlab.decode.stepper import TransformerStepper
from attnlab.model.config import ModelConfig, preset
from attnlab.model.linear import for_inference
from attnlab.model.memory import keep_freed_memory
from attnlab.model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"
CT2_TYPES = {"fp32": "float32", "int8": "int8"}
BATCH_TOKENS = 16000  # test2016: source tokens × beam a batch, for both systems
HAVE_CT2 = importlib.util.find_spec("ctranslate2") is not None  # optional: pip install attnlab[serve]


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


def ctranslate2_translate(
    path: str, compute_type: str, rows: list[list[str]], options: dict[str, object], length: int, one_by_one: bool
) -> Callable[[], int]:
    """CTranslate2 translating `rows` (with `one_by_one`, one call per row, as an interactive
    user sends them); with `length`, every best hypothesis must have exactly that many tokens
    (the equal-work rule). Built in a `Worker`: only the child loads CTranslate2."""
    import ctranslate2  # optional: only the child loads it

    translator = ctranslate2.Translator(
        path, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=torch.get_num_threads()
    )
    batches = [[row] for row in rows] if one_by_one else [rows]

    def run() -> int:
        lengths = [len(r.hypotheses[0]) for batch in batches for r in translator.translate_batch(batch, **options)]
        if length and set(lengths) != {length}:
            raise SystemExit(f"CTranslate2 produced lengths {sorted(set(lengths))}, not {length}")
        return sum(lengths)

    return run


def attnlab_translate(
    checkpoint: str, dtype: str, lines: list[str], one_by_one: bool, patience: float | None = None
) -> Callable[[], int]:
    """`attnlab.load(checkpoint, dtype)` translating `lines` as `attnlab translate` does (in
    batches of `BATCH_TOKENS` source tokens × beam), or one line per call; built in a `Worker`."""
    model = attnlab.load(checkpoint, dtype=dtype)
    search = {"beam": 4, "alpha": 0.6, "patience": patience}

    def run() -> int:
        with torch.inference_mode():
            if one_by_one:
                return sum(len(model.translate(line, **search).tokens) for line in lines)
            return sum(len(r.tokens) for r in model.translate(lines, **search, batch_tokens=BATCH_TOKENS))

    return run


def ctranslate2_decoder(
    model: Transformer, src: Tensor, tgt_len: int, dtype: str, workdir: Path, clock_kind: str
) -> Callable[[], int] | None:
    """The same call for CTranslate2 on `model`'s weights (exported through its spec API)."""
    if not HAVE_CT2:
        return None
    config = model.config
    pieces = [f"<t{i}>" for i in range(config.vocab_size)]
    path = workdir / f"equal-work-{dtype}"
    if not path.exists():
        write_spec(ctranslate2_spec(model, pieces, pieces, unk_id=1), path)
    # the pieces without </s>: the exported model appends it, as attnlab does (`add_source_eos`)
    rows = [[pieces[i] for i in row.tolist() if i not in (config.pad_id, config.eos_id)] for row in src]
    options = {
        "beam_size": 4,
        "length_penalty": 0.6,
        "min_decoding_length": tgt_len,
        "max_decoding_length": tgt_len,
        "return_end_token": True,
        "max_batch_size": len(rows),
    }
    return Worker(
        ctranslate2_translate, str(path), CT2_TYPES[dtype], rows, options, tgt_len, False, clock_kind=clock_kind
    )


def equal_work(dtypes: list[str], args: argparse.Namespace, workdir: Path) -> list[dict[str, object]]:
    """The equal-work setting: random `small` models, every system in turn, median of repeats."""
    now = clock(args.clock)
    config = preset(args.preset)
    src = sources(config, args.sentences)
    systems: dict[tuple[str, str], Callable[[], int]] = {}
    for dtype in dtypes:
        torch.manual_seed(0)
        model = Transformer(config).eval()
        if dtype in CT2_TYPES:
            ct2 = ctranslate2_decoder(model, src, args.tgt_len, dtype, workdir, args.clock)
            if ct2 is not None:
                systems[("ctranslate2", dtype)] = ct2
        if dtype in ("fp32", "bf16"):
            torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
            model = for_inference(model.to(torch_dtype))  # as `attnlab.load` does: packed weights
            systems[("attnlab", dtype)] = attnlab_decoder(model, src, args.tgt_len, cache=True)
            systems[("attnlab-uncached", dtype)] = attnlab_decoder(model, src, args.tgt_len, cache=False)
            marian = marian_decoder(config, src, args.tgt_len, torch_dtype)
            if marian is not None:
                systems[("marian", dtype)] = marian
    return timed("equal-work", systems, args.repeats, now, sentences=args.sentences)


def test2016(dtypes: list[str], args: argparse.Namespace, workdir: Path) -> list[dict[str, object]]:
    """The test2016 setting: the bundled translator and its CTranslate2 export on real sentences,
    batched as `Model.translate` batches a file."""
    lines = _test_lines(args)[: args.test_sentences]
    systems = _real_systems(dtypes, args, workdir, lines, one_by_one=False)
    return timed("test2016", systems, args.test_repeats, clock(args.clock), sentences=len(lines))


def latency(dtypes: list[str], args: argparse.Namespace, workdir: Path) -> list[dict[str, object]]:
    """The latency setting: the same systems, one test2016 sentence per call, as the explorer
    and the widgets translate what a user types."""
    lines = _test_lines(args)[: args.latency_sentences]
    systems = _real_systems(dtypes, args, workdir, lines, one_by_one=True)
    rows = timed("latency", systems, args.test_repeats, clock(args.clock), sentences=len(lines))
    for row in rows:
        row["ms_per_sentence"] = round(1000 * row["seconds"] / len(lines), 1)
    return rows


def _test_lines(args: argparse.Namespace) -> list[str]:
    lines = read_lines(find_data_dir(args.data_dir) / "multi30k" / "test2016.en")
    return [line for line in lines if line.strip()]


def _real_systems(
    dtypes: list[str], args: argparse.Namespace, workdir: Path, lines: list[str], one_by_one: bool
) -> dict[tuple[str, str], Callable[[], int]]:
    """attnlab (`attnlab.load`, each dtype) and CTranslate2 (the same weights exported) decoding
    `lines`: in batches of `BATCH_TOKENS` source tokens × beam, or one line per call; each
    system in a `Worker` of its own."""
    systems: dict[tuple[str, str], Callable[[], int]] = {}
    exported = workdir / "bundled"
    for dtype in dtypes:
        if dtype in ("fp32", "bf16", "int8"):  # int8: attnlab's linear layers quantized (`--dtype int8`)
            systems[("attnlab", dtype)] = Worker(
                attnlab_translate, args.checkpoint, dtype, lines, one_by_one, clock_kind=args.clock
            )
        if dtype in ("fp32", "bf16") and not one_by_one:  # CTranslate2's own stop (`patience` 1): the same search
            systems[("attnlab-patience1", dtype)] = Worker(
                attnlab_translate, args.checkpoint, dtype, lines, False, 1.0, clock_kind=args.clock
            )
        if dtype in CT2_TYPES and HAVE_CT2:
            fp32 = attnlab.load(args.checkpoint)
            if not exported.exists():
                export_ctranslate2(fp32, exported)
            # a user's rows: the pieces without </s>, which the exported model appends (`add_source_eos`)
            rows = [fp32.pieces(fp32.encode_source(line)[0][:-1], source=True) for line in lines]
            options = {
                "beam_size": 4,
                "length_penalty": 0.6,
                "max_decoding_length": max(len(r) for r in rows) + 50,  # input + 50, </s> not counted, as attnlab's
                "return_end_token": True,
            }
            if not one_by_one:
                options |= {"max_batch_size": BATCH_TOKENS // 4, "batch_type": "tokens"}
            systems[("ctranslate2", dtype)] = Worker(
                ctranslate2_translate,
                str(exported),
                CT2_TYPES[dtype],
                rows,
                options,
                0,
                one_by_one,
                clock_kind=args.clock,
            )
    return systems


def timed(
    setting: str,
    systems: dict[tuple[str, str], Callable[[], int]],
    repeats: int,
    now: Callable[[], float],
    **extra: object,
) -> list[dict[str, object]]:
    """Warm every system twice, then time them in turn, `repeats` rounds; one row each (median,
    and every round's time for the paired ratios). Twice: a process's heap settles only on its
    second decode (attnlab fp32 still took ~30k page faults there on test2016), and with one
    warm-up that fell in the first timed round."""
    times: dict[tuple[str, str], list[float]] = {key: [] for key in systems}
    with torch.inference_mode():
        tokens = {key: run() for key, run in systems.items()}
        for run in systems.values():
            run()
        for _ in range(repeats):
            for key, run in systems.items():
                times[key].append(_seconds(run, now))
    return [
        {
            "setting": setting,
            "system": system,
            "dtype": dtype,
            "tokens_per_s": round(tokens[(system, dtype)] / median(times[(system, dtype)]), 1),
            "tokens": tokens[(system, dtype)],
            "seconds": round(median(times[(system, dtype)]), 3),
            "round_seconds": [round(t, 3) for t in times[(system, dtype)]],
            "beam": 4,
            "threads": torch.get_num_threads(),
            **extra,
        }
        for system, dtype in systems
    ]


def _seconds(run: Callable[[], int], now: Callable[[], float]) -> float:
    """One call's time: a `Worker` times itself, in its own process; anything else is timed here."""
    if isinstance(run, Worker):
        return run.timed()[1]
    start = now()
    run()
    return now() - start


RATIOS = [  # (numerator system, dtype, denominator system, dtype): what the docs quote
    ("attnlab", "fp32", "ctranslate2", "fp32"),
    ("attnlab", "bf16", "ctranslate2", "int8"),
    ("attnlab", "int8", "ctranslate2", "int8"),
    ("attnlab-patience1", "fp32", "ctranslate2", "fp32"),
    ("attnlab-patience1", "bf16", "ctranslate2", "int8"),
    ("attnlab", "bf16", "marian", "bf16"),
    ("attnlab", "fp32", "marian", "fp32"),
    ("attnlab", "fp32", "attnlab-uncached", "fp32"),
]


def ratios(rows: list[dict[str, object]]) -> list[str]:
    """Each quoted ratio as the median over rounds of the two systems' speeds in that round: the
    systems of one round ran seconds apart, so a load burst from another job moves both."""
    by_key = {(r["setting"], r["system"], r["dtype"]): r for r in rows}
    lines = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        for a, da, b, db in RATIOS:
            if (setting, a, da) in by_key and (setting, b, db) in by_key:
                ra, rb = by_key[(setting, a, da)], by_key[(setting, b, db)]
                paired = [
                    (ra["tokens"] / ta) / (rb["tokens"] / tb)
                    for ta, tb in zip(ra["round_seconds"], rb["round_seconds"], strict=True)
                ]
                spread = f" (rounds {min(paired):.2f}-{max(paired):.2f})" if len(paired) > 1 else ""
                lines.append(f"{setting:<10} {a} {da} / {b} {db}: {median(paired):.2f}x{spread}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    settings = ["test2016", "latency", "equal-work"]
    parser.add_argument("--setting", nargs="+", default=settings, choices=settings)
    parser.add_argument("--dtype", nargs="+", choices=["fp32", "bf16", "int8"],
                        help="torch systems run fp32/bf16 (attnlab on real sentences int8 too), CTranslate2 fp32/int8; "
                        "default all three, bf16 left out on a CPU without bf16 products")  # fmt: skip
    parser.add_argument("--checkpoint", default=str(BUNDLED), help="test2016 and latency: the translator to measure")
    parser.add_argument("--data-dir", help="where multi30k/test2016.en is (default: $ATTNLAB_DATA, ../shared/data)")
    parser.add_argument("--test-sentences", type=int, default=1000, help="test2016: how many sentences")
    parser.add_argument("--test-repeats", type=int, default=5, help="test2016 and latency: timed rounds")
    parser.add_argument(
        "--latency-sentences", type=int, default=100, help="latency: how many test2016 sentences, one per call"
    )
    parser.add_argument("--sentences", type=int, default=64, help="equal-work: sentences per batch")
    parser.add_argument(
        "--tgt-len", type=int, default=20, help="equal-work: tokens each sentence produces, </s> included"
    )
    parser.add_argument("--repeats", type=int, default=9, help="equal-work: timed rounds")
    add_clock_argument(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per setting × system × dtype")
    parser.add_argument("--smoke", action="store_true", help="a few sentences, tiny shapes: checks the script runs")
    args = parser.parse_args(argv)
    args.preset = "small"
    if args.smoke:
        args.preset, args.sentences, args.tgt_len, args.repeats = "tiny", 4, 5, 1
        args.test_sentences, args.test_repeats, args.latency_sentences = 8, 1, 3
    print(f"# {machine(torch.device('cpu'), args.clock)}", file=sys.stderr)
    if args.dtype is None:
        args.dtype = without_emulated_bf16(["fp32", "bf16", "int8"], torch.device("cpu"), keep=args.smoke)
    if keep_freed_memory():  # as `attnlab translate` does; process-wide, so every peer gets it too
        print("# glibc malloc keeps freed memory (keep_freed_memory), for every system", file=sys.stderr)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="attnlab-decode-bench-") as tmp:
        if "test2016" in args.setting:
            print(f"# test2016: {args.checkpoint}, beam 4, α 0.6, median of {args.test_repeats}", file=sys.stderr)
            rows += test2016(args.dtype, args, Path(tmp))
        if "latency" in args.setting:
            print(f"# latency: the first {args.latency_sentences} test2016 sentences, one per call, "
                  f"median of {args.test_repeats}", file=sys.stderr)  # fmt: skip
            rows += latency(args.dtype, args, Path(tmp))
        if "equal-work" in args.setting:
            print(f"# equal-work: {args.preset} preset, random weights, {args.sentences} sentences × "
                  f"{args.tgt_len} tokens, beam 4, median of {args.repeats}", file=sys.stderr)  # fmt: skip
            rows += equal_work(args.dtype, args, Path(tmp))
    for row in rows:
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            per = f", {row['ms_per_sentence']:.1f} ms a sentence" if "ms_per_sentence" in row else ""
            print(f"{row['setting']:<10} {row['system']:<17} {row['dtype']:<5} {row['tokens_per_s']:>9,.0f} tokens/s"
                  f"  ({row['tokens']:,} tokens in {row['seconds']:.2f} s{per})")  # fmt: skip
    for line in ratios(rows):
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
