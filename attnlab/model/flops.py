"""What a model costs: FLOPs per token, and the paper's Table 2 estimate method.

Counting multiply-adds as 2 FLOPs: every linear layer costs 2 × its weights per token it
touches, attention adds 2 × (QKᵀ + AV) = 4 · L · h · d_k-ish per query, the shared pre-softmax
projection 2 · d_model · V per target token. Training is forward + backward ≈ 3 × forward.
The paper estimates training cost as time × GPUs × sustained TFLOPS (footnote to Table 2:
P100 = 9.5 TFLOPS), which is what `paper_estimate` reproduces.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import torch

from attnlab.errors import ArgumentParser, ConfigError
from attnlab.model.config import MAX_POSITIONS, PRESETS, ModelConfig, parse_overrides, preset

PAPER_RUNS = {"base": (12 * 3600, 8, 9.5e12, 3.3e18), "big": (3.5 * 24 * 3600, 8, 9.5e12, 2.3e19)}


def forward_flops_per_target_token(config: ModelConfig, src_len: int = 32, tgt_len: int = 32) -> float:
    """Forward FLOPs of one sentence pair divided by its target tokens."""
    if min(src_len, tgt_len) < 1:  # a target of 0 tokens divided by zero; a negative one gave negative FLOPs
        raise ConfigError(f"sentence lengths must be ≥ 1 token, got source {src_len} and target {tgt_len}")
    if max(src_len, tgt_len) > MAX_POSITIONS:  # 10^20 printed float rounding noise as if exact
        raise ConfigError(
            f"sentence lengths must be at most {MAX_POSITIONS:,} tokens, the most positions a model takes "
            f"(max_len), got source {src_len:,} and target {tgt_len:,}"
        )
    d, h, dk, dv, ff = config.d_model, config.n_heads, config.d_k, config.d_v, config.d_ff
    attn_proj = 2 * d * h * dk + d * h * dv + h * dv * d  # W_Q, W_K, W_V, W_O
    ffn = 2 * d * ff
    enc = src_len * config.n_layers * (2 * (attn_proj + ffn) + 2 * h * keys_per_query(src_len, config) * (dk + dv))
    dec_self = 2 * attn_proj + 2 * h * keys_per_query(tgt_len, config) * (dk + dv)
    # cross: Q and O per target token, K and V once per source token
    dec_cross = 2 * (d * h * dk + h * dv * d) + 2 * h * src_len * (dk + dv)
    dec_cross_kv = src_len * 2 * (d * h * dk + d * h * dv)
    dec = tgt_len * config.n_layers * (dec_self + dec_cross + 2 * ffn) + config.n_layers * dec_cross_kv
    logits = tgt_len * 2 * d * config.vocab_size
    return (enc + dec + logits) / tgt_len


def keys_per_query(length: int, config: ModelConfig) -> float:
    """The keys one query of self-attention meets, on average over a sentence of `length`: all
    of them, or with restricted attention (`attn_window` r, Table 1's last row) those within r
    on either side. As for global attention, causality is not counted: both are what a dense
    kernel computes and the window's saving is the one Table 1 states, O(r·n) instead of O(n²)."""
    r = config.attn_window
    if r is None or r >= length - 1:
        return float(length)
    return sum(min(i, r) + min(length - 1 - i, r) + 1 for i in range(length)) / length


def train_flops_per_target_token(config: ModelConfig, src_len: int = 32, tgt_len: int = 32) -> float:
    return 3 * forward_flops_per_target_token(config, src_len, tgt_len)


def measure_matmul_peak(
    dtype: torch.dtype = torch.float32,
    size: int = 1024,
    seconds: float = 0.3,
    device: torch.device | str | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> float:
    """FLOP/s of the fastest square matrix multiply in `seconds` on this machine (the MFU
    denominator): the fastest, as a peak is what the machine can do, where a mean sinks with any
    other job's burst on a shared machine (docs/BENCHMARKS.md, training round eleven). `device`
    defaults to the GPU when there is one; `now` is the clock (the benchmarks pass their own)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    generator = torch.Generator(device).manual_seed(0)  # leaves the global RNG (dropout) untouched
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    a @ b  # warm-up: thread pool, packing buffers
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    fastest, start = math.inf, now()
    while now() - start < seconds:
        begun = now()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        fastest = min(fastest, now() - begun)
    return 2 * size**3 / fastest


def cli(argv: list[str]) -> int:
    """`attnlab flops --preset NAME [--src-len --tgt-len] [key=value ...]`."""
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab flops", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", choices=list(PRESETS), help="model preset (default: base)")
    parser.add_argument(
        "--src-len", type=int, default=32, help="source tokens a sentence (attention's cost; default 32)"
    )
    parser.add_argument("--tgt-len", type=int, default=32, help="target tokens a sentence (default 32)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the lines")
    parser.add_argument(  # in the usage line and --help; the items are checked by parse_overrides
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="change a field of the preset (e.g. d_model=256 n_layers=3); the paper's Table 2 figure is "
        "quoted for an unchanged preset only",
    )
    args, rest = parser.parse_known_args(argv)  # rest: what looks like a flag but is none, first refused
    overrides = parse_overrides([*rest, *args.overrides], ("--preset", "--src-len", "--tgt-len", "--json"))
    config = preset(args.preset, **overrides)
    fwd = forward_flops_per_target_token(config, args.src_len, args.tgt_len)
    report = {
        "preset": args.preset,
        **({"overrides": overrides} if overrides else {}),
        "forward_flops_per_target_token": fwd,
        "train_flops_per_target_token": 3 * fwd,
    }
    if args.preset in PAPER_RUNS and not overrides:  # the paper's cost is of its own model, not a changed one
        seconds, gpus, tflops, paper = PAPER_RUNS[args.preset]
        report["paper_table2_estimate"] = seconds * gpus * tflops
        report["paper_table2_figure"] = paper
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"preset {args.preset} (source {args.src_len}, target {args.tgt_len} tokens per sentence)")
    print(f"  forward: {fwd / 1e6:,.1f} MFLOP per target token")
    print(f"  training (forward + backward ≈ 3×): {3 * fwd / 1e6:,.1f} MFLOP per target token")
    if "paper_table2_estimate" in report:
        seconds, gpus, tflops, paper = PAPER_RUNS[args.preset]
        print(
            f"  paper's Table 2 method: {seconds / 3600:.0f} h × {gpus} P100 × {tflops / 1e12} TFLOPS = "
            f"{report['paper_table2_estimate']:.2e} FLOPs (Table 2 prints {paper:.1e})"
        )
    return 0
