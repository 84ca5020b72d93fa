"""`attnlab presets`: every preset with its parameter count beside the paper's Table 3 figure
(r: the restricted self-attention's window, Table 1's last row; - for global attention; P_attn:
dropout on the attention weights). The
translation presets are counted at `--vocab-size` (the paper's shared vocabulary by default); a
preset with a vocabulary of its own (`parse`'s 16K WSJ vocabulary, `small`, `tiny`) at that one:
the parser was counted at 37,000 pieces, 21M more than its own vocabulary makes it."""

from __future__ import annotations

import json

import torch

from attnlab.errors import ArgumentParser, ConfigError
from attnlab.model.config import PRESETS
from attnlab.model.transformer import Transformer, count_parameters

COLUMNS = (
    "n_layers",
    "d_model",
    "d_ff",
    "n_heads",
    "d_k",
    "d_v",
    "p_drop",
    "p_attn_drop",
    "eps_ls",
    "positional",
    "attn_window",
)


def table(vocab_size: int) -> list[dict]:
    rows = []
    for name, config in PRESETS.items():
        if config.vocab_size == PRESETS["base"].vocab_size:
            config = config.replace(vocab_size=vocab_size)
        with torch.device("meta"):  # shapes only: counting big models allocates nothing
            params = count_parameters(Transformer(config))
        row = {"name": name, **{c: getattr(config, c) for c in COLUMNS}, "vocab": config.vocab_size, "params": params}
        row["paper_params_millions"] = PRESETS[name].paper.get("params_millions")
        rows.append(row)
    return rows


def cli(argv: list[str]) -> int:
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab presets", description=__doc__)
    parser.add_argument(
        "--vocab-size", type=int, default=37000, help="shared BPE vocabulary (default 37000, about the paper's)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    args = parser.parse_args(argv)
    try:
        rows = table(args.vocab_size)
    except ConfigError as error:  # ModelConfig's rule, said of the flag that broke it
        raise ConfigError(f"--vocab-size {args.vocab_size}: {error}") from None
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = f"{'preset':<10} {'N':>2} {'d_model':>7} {'d_ff':>5} {'h':>3} {'d_k':>4} {'d_v':>4} {'P_drop':>6} {'P_attn':>6} {'eps_ls':>6} {'pos':>10} {'r':>3} {'vocab':>6} {'params':>9} {'paper':>6}"
    print(f"parameter counts at a shared vocabulary of {args.vocab_size:,} (a preset with its own: at that one)")
    print(header)
    for r in rows:
        paper = "" if r["paper_params_millions"] is None else f"{r['paper_params_millions']}M"
        print(
            f"{r['name']:<10} {r['n_layers']:>2} {r['d_model']:>7} {r['d_ff']:>5} {r['n_heads']:>3} {r['d_k']:>4} "
            f"{r['d_v']:>4} {r['p_drop']:>6} {r['p_attn_drop']:>6} {r['eps_ls']:>6} {r['positional']:>10} {r['attn_window'] or '-':>3} "
            f"{r['vocab']:>6} {r['params'] / 1e6:>8.1f}M {paper:>6}"
        )
    return 0
