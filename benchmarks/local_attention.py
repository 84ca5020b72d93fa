"""Table 1, measured: one self-attention layer, restricted to a neighbourhood of r, against global.

Table 1 of the paper gives self-attention O(n²·d) operations per layer and restricted
self-attention O(r·n·d). For n = 64 … 4,096 positions (one sequence, the `base` shape: d_model
512, 8 heads of 64) this script times forward + backward, and counts the memory kept for the
backward pass (the bytes of every tensor autograd saves), of

- Eq. (1) alone, three ways: global attention in PyTorch's fused kernel (what attnlab runs when
  nothing is recorded: it keeps no n × n matrix), global attention written out as Eq. (1) (what
  recording runs: the n × n weights exist), and attnlab's restricted kernel with r (default 8);
- one whole `MultiHeadAttention` layer (projections included), global and restricted.

Global attention is the peer: every row prints restricted / global.

    .venv/bin/python benchmarks/local_attention.py                 # table
    .venv/bin/python benchmarks/local_attention.py --json          # one row per n
    .venv/bin/python benchmarks/local_attention.py --plot docs/local_attention_scaling.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import add_clock_argument, clock, machine, median

from attnlab.model.attention import attention, local_attention
from attnlab.model.config import preset
from attnlab.model.transformer import MultiHeadAttention

KINDS = ("explicit", "fused", "local")  # what the plot draws


def layer(window: int | None) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(preset("base", attn_window=window), "encoder")


def saved_bytes(run: Callable[[], torch.Tensor]) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one forward (each storage once)."""
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run().sum()
    return sum(seen.values())


def seconds(run: Callable[[], torch.Tensor], repeats: int, now: Callable[[], float]) -> float:
    """Median time of forward + backward (after one warm-up run)."""
    times = []
    for _ in range(repeats + 1):
        start = now()
        run().sum().backward()
        times.append(now() - start)
    return median(times[1:])


def measure(n: int, window: int, repeats: int, now: Callable[[], float]) -> dict[str, object]:
    generator = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 8, n, 64, generator=generator, requires_grad=True) for _ in range(3))
    kernels: dict[str, Callable[[], torch.Tensor]] = {
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
        "explicit": lambda: attention(q, k, v)[0],
        "local": lambda: local_attention(q, k, v, window, causal=False),
    }
    x = torch.randn(1, n, 512, generator=generator, requires_grad=True)
    layers = {"layer_global": layer(None), "layer_local": layer(window)}
    kernels |= {name: (lambda module=module: module(x)) for name, module in layers.items()}
    row: dict[str, object] = {"n": n, "window": window}
    for name, run in kernels.items():
        row[f"{name}_ms"] = round(1000 * seconds(run, repeats, now), 3)
        row[f"{name}_mib"] = round(saved_bytes(run) / 2**20, 3)
    for a, b in (("local", "fused"), ("local", "explicit"), ("layer_local", "layer_global")):
        row[f"{a}_over_{b}_time"] = round(row[f"{a}_ms"] / row[f"{b}_ms"], 3)
        row[f"{a}_over_{b}_memory"] = round(row[f"{a}_mib"] / row[f"{b}_mib"], 3)
    return row


def plot(rows: list[dict[str, object]], path: str) -> None:
    """Time and memory against n on log-log axes (matplotlib-free: Pillow through bokeh's export is
    not offline-safe, so a small PNG is drawn with Pillow directly)."""
    from PIL import Image, ImageDraw

    width, height, pad = 960, 380, 70
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    ns = [row["n"] for row in rows]
    for panel, (metric, unit) in enumerate((("ms", "ms fwd+bwd"), ("mib", "MiB saved"))):
        left = pad + panel * (width // 2)
        right, top, bottom = left + width // 2 - 2 * pad, pad // 2 + 10, height - pad
        values = [row[f"{kind}_{metric}"] for row in rows for kind in KINDS]
        low, high = min(values), max(values)

        def xy(n: int, value: float) -> tuple[float, float]:
            fx = (torch.tensor(n).log() - torch.tensor(ns[0]).log()) / (
                torch.tensor(ns[-1]).log() - torch.tensor(ns[0]).log()
            )
            fy = (torch.tensor(value).log() - torch.tensor(low).log()) / max(
                float(torch.tensor(high / low).log()), 1e-9
            )
            return left + float(fx) * (right - left), bottom - float(fy) * (bottom - top)

        draw.rectangle((left, top, right, bottom), outline="#999999")
        draw.text((left, top - 16), f"{unit} (log) vs n (log)", fill="black")
        for index, (kind, colour) in enumerate(zip(KINDS, ("#d62728", "#ff7f0e", "#1f77b4"), strict=True)):
            points = [xy(row["n"], row[f"{kind}_{metric}"]) for row in rows]
            draw.line(points, fill=colour, width=2)
            for x, y in points:
                draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour)
            draw.text((points[-1][0] + 8, points[-1][1] - 6 + 12 * (index - 1)), kind, fill=colour)
        for n in ns:
            draw.text((xy(n, low)[0] - 10, bottom + 6), str(n), fill="black")
    image.save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--window", type=int, default=8, help="r of the restricted layer")
    parser.add_argument("--repeats", type=int, default=5)
    add_clock_argument(parser)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", help="also draw the two curves into this PNG")
    parser.add_argument("--smoke", action="store_true", help="two short lengths, one repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.repeats = [64, 256], 1
    print(f"# {machine(torch.device('cpu'), args.clock)}", file=sys.stderr)
    print(
        f"# one self-attention layer, d_model 512, 8 heads, forward+backward, median of {args.repeats}", file=sys.stderr
    )
    now = clock(args.clock)
    rows = [measure(n, args.window, args.repeats, now) for n in args.lengths]
    for row in rows:
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        print(
            f"n {row['n']:>5} | Eq.(1) fused {row['fused_ms']:>8.2f} ms {row['fused_mib']:>7.2f} MiB"
            f" | explicit {row['explicit_ms']:>8.2f} ms {row['explicit_mib']:>8.2f} MiB"
            f" | r={row['window']} {row['local_ms']:>7.2f} ms {row['local_mib']:>6.2f} MiB"
            f" | local/fused time {row['local_over_fused_time']:.2f} | layer local/global time"
            f" {row['layer_local_over_layer_global_time']:.2f}"
        )
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
