"""What recording attention costs: recorded / unrecorded forward, and what hook points cost when off.

The base preset on the CPU, one sentence pair of 32 source + 32 target tokens (random ids: the
cost does not depend on them), forward only, eval mode, no autograd. Three models share the same
weights and are timed in turn, round after round, so a load burst from another job hits all
three alike; each figure is the median over the rounds:

- recorded: attnlab's model inside `attnlab.record(model)`: every head of every layer, all three
  kinds, explicit Eq. (1) and the weights copied out as float32;
- unrecorded: the same model outside the context manager (the fused kernel behind flag checks);
- plain: a copy whose attention modules are `PlainAttention`, a subclass whose forward calls the
  fused kernel unconditionally, with no hook, head-mask or cache branches: the model as it would
  be without hook points.

Targets (issue 3): recorded ≤ 1.3× unrecorded; unrecorded ≤ 1.02× plain.

    .venv/bin/python benchmarks/record_overhead.py --rounds 41
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import add_clock_argument, clock, machine, median
from torch import Tensor

from attnlab.model.config import preset
from attnlab.model.transformer import MultiHeadAttention, Transformer
from attnlab.record.recorder import record


class PlainAttention(MultiHeadAttention):
    """§3.2.2 without hook points: always the fused kernel, no flag checks (the baseline)."""

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        cache: dict[str, Tensor] | None = None,  # DecoderLayer passes it; None in a teacher-forced pass
    ) -> Tensor:
        q = self._split(self.w_q(x), self.d_k)
        source = x if memory is None else memory
        k, v = self._split(self.w_k(source), self.d_k), self._split(self.w_v(source), self.d_v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, Lq, d_v)
        batch, _, length, _ = out.shape
        return self.w_o(out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_v))


def plain_copy(model: Transformer) -> Transformer:
    """A deep copy (same weights) whose attention modules are `PlainAttention`."""
    plain = copy.deepcopy(model)
    for module in plain.attention_modules():
        module.__class__ = PlainAttention
    return plain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--length", type=int, default=32, help="source and target tokens")
    parser.add_argument("--rounds", type=int, default=41, help="timings of each model, interleaved")
    add_clock_argument(parser)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny preset, 3 rounds: checks the script runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.rounds = "tiny", 3
    now = clock(args.clock)
    print(f"# {machine(torch.device('cpu'), args.clock)}", file=sys.stderr)
    print(
        f"# {args.preset} preset, one pair of {args.length}+{args.length} tokens, forward, median of {args.rounds}",
        file=sys.stderr,
    )
    config = preset(args.preset)
    torch.manual_seed(0)
    model = Transformer(config).eval()
    plain = plain_copy(model).eval()
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.vocab_size, (1, args.length), generator=generator)
    tgt = torch.randint(4, config.vocab_size, (1, args.length), generator=generator)

    def recorded() -> Tensor:
        with record(model):
            return model(src, tgt)

    variants: dict[str, Callable[[], Tensor]] = {
        "recorded": recorded,
        "unrecorded": lambda: model(src, tgt),
        "plain": lambda: plain(src, tgt),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        reference = variants["plain"]()
        for name, forward in variants.items():  # warm-up, and the three must agree
            if not torch.allclose(forward(), reference, atol=1e-5):
                raise SystemExit(f"{name} forward differs from the plain model's")
        names = list(variants)
        for round_ in range(args.rounds):
            for name in names[round_ % 3 :] + names[: round_ % 3]:  # rotate who goes first
                start = now()
                variants[name]()
                times[name].append(now() - start)
    ms = {name: median(values) * 1e3 for name, values in times.items()}
    result = {
        "preset": args.preset,
        "length": args.length,
        "rounds": args.rounds,
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "recorded_ms": round(ms["recorded"], 2),
        "unrecorded_ms": round(ms["unrecorded"], 2),
        "plain_ms": round(ms["plain"], 2),
        "recorded_over_unrecorded": round(ms["recorded"] / ms["unrecorded"], 3),
        "unrecorded_over_plain": round(ms["unrecorded"] / ms["plain"], 3),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    for name in variants:
        print(f"{name:<11} {ms[name]:8.2f} ms")
    print(f"recorded / unrecorded: {result['recorded_over_unrecorded']:.3f}x (target <= 1.3x)")
    print(f"unrecorded / plain:    {result['unrecorded_over_plain']:.3f}x (target <= 1.02x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
