"""The explorer's model side, and `attnlab explore [--checkpoint DIR ...] [--port N]`.

The web app (`apps/explorer.py`, served by `panel serve`) draws with `attnlab.viz`; what it
needs from the model beyond `translate`/`parse`/`score` lives here, free of Panel, so that the
notebook widgets and tests can use it too:

- `find_checkpoints` / `open_model`: the bundled checkpoints, and a loaded model shared by all
  sessions of one server (loaded once, read only: sessions never change the weights);
- `probe_snapshots`: the probe traces a training run recorded at each checkpoint (timeline);
- `attention_parts`: Eq. (1) step by step for one head (QKᵀ/√d_k, the mask, softmax, ΣaV);
- `ablation`: re-decode with heads switched off, and the change in the log-probability of the
  original output.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import AttnlabError, CheckpointError
from attnlab.trace import AttentionTrace

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "apps" / "explorer.py"
BUNDLED = ROOT / "checkpoints"
_STEP = re.compile(r"^step_(\d+)$")
_BYTE_PIECE = re.compile(r"^<0x[0-9A-F]{2}>$")


# -- checkpoints ----------------------------------------------------------------------------------------
def find_checkpoints(extra: Sequence[str | Path] = (), bundled: Path = BUNDLED) -> dict[str, str]:
    """{display name: path}: the bundled checkpoints, then the given ones (kept even when they are
    not checkpoints, so that the app can say what is wrong with them)."""
    found: dict[str, str] = {}
    if bundled.is_dir():
        for path in sorted(bundled.iterdir()):
            if (path / "manifest.json").is_file():
                found[path.name] = str(path)
    for path in extra:
        path = Path(path).expanduser()
        name = path.name or str(path)
        if name in found and found[name] != str(path):
            name = str(path)
        found[name] = str(path)
    return found


_MODELS: dict[str, Any] = {}
_LOCK = threading.Lock()


def open_model(path: str | Path) -> Any:
    """`attnlab.load(path)`, cached per server process: sessions share one read-only model."""
    from attnlab.api import load

    key = str(Path(path).expanduser().resolve())
    with _LOCK:
        if key not in _MODELS:
            if not Path(key).exists():
                raise CheckpointError(f"{path}: no such directory")
            _MODELS[key] = load(key)
        return _MODELS[key]


def probe_snapshots(path: str | Path) -> list[tuple[int, list[Path]]]:
    """(step, probe trace files) recorded during training, oldest first.

    Looks for `probes/step_N/probe_K.trace` in the directory itself (a bundled checkpoint or a
    run directory) and in the run directory above `RUN/checkpoints/step_N`."""
    path = Path(path)
    for candidate in (path / "probes", path.parent / "probes", path.parent.parent / "probes"):
        if candidate.is_dir():
            steps = []
            for step_dir in candidate.iterdir():
                match = _STEP.match(step_dir.name)
                files = sorted(step_dir.glob("probe_*.trace"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
                if match and files:
                    steps.append((int(match.group(1)), files))
            if steps:
                return sorted(steps)
    return []


# -- input notices ---------------------------------------------------------------------------------------
def unknown_characters(model: Any, text: str) -> list[str]:
    """Characters the vocabulary has no piece for (sentencepiece spells them as UTF-8 byte pieces
    or maps them to <unk>)."""
    tokenizer = model.tokenizer
    unk = tokenizer.unk_id()
    missing = []
    for char in dict.fromkeys(text):
        if char.isspace():
            continue
        ids = tokenizer.encode(char)
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        if any(i == unk or _BYTE_PIECE.match(p) for i, p in zip(ids, pieces, strict=True)):
            missing.append(char)
    return missing


# -- Eq. (1) step by step ----------------------------------------------------------------------------------
def trace_ids(model: Any, trace: AttentionTrace) -> tuple[list[int], list[int]]:
    """(source ids, produced ids) of a trace, from its pieces and the model's vocabulary."""
    piece = model.tokenizer.piece_to_id
    return [piece(p) for p in trace.src_tokens], [piece(p) for p in trace.tgt_tokens]


def attention_parts(model: Any, trace: AttentionTrace, kind: str, layer: int, head: int) -> dict[str, np.ndarray]:
    """Recompute one head of one layer along Eq. (1), from the inputs the layer really received
    in the teacher-forced pass over the trace's sentence pair.

    Returns (q, k) `scores` = QKᵀ/√d_k, `allowed` (the mask), `masked` (−∞ where forbidden),
    `weights` = softmax, (k, d_v) `v`, (q, d_v) `out` = weights·V, and q/k vectors.
    """
    import torch

    net = model.model
    n_layers = net.config.n_layers
    layer_index = layer + n_layers if layer < 0 else layer
    if not 0 <= layer_index < n_layers:
        raise AttnlabError(f"layer {layer} does not exist (the model has {n_layers})")
    if not 0 <= head < net.config.n_heads:
        raise AttnlabError(f"head {head} does not exist (the model has {net.config.n_heads})")
    if kind == "encoder":
        module = net.encoder["layers"][layer_index].self_attn
    elif kind in ("decoder", "cross"):
        block = net.decoder["layers"][layer_index]
        module = block.self_attn if kind == "decoder" else block.cross_attn
    else:
        raise AttnlabError(f"unknown attention kind {kind!r}")
    src_ids, produced = trace_ids(model, trace)
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]]) if produced else torch.tensor([[net.config.bos_id]])
    seen: dict[str, Any] = {}

    def capture(_module: Any, args: tuple, kwargs: dict) -> None:
        seen["x"] = args[0]
        seen["memory"] = args[1] if len(args) > 1 else kwargs.get("memory")
        seen["mask"] = kwargs.get("mask")

    handle = module.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad():
            net(src, tgt)
    finally:
        handle.remove()
    with torch.no_grad():
        x = seen["x"]
        source = x if seen["memory"] is None else seen["memory"]
        q = module._split(module.w_q(x), module.d_k)[0, head]  # (Lq, d_k)
        k = module._split(module.w_k(source), module.d_k)[0, head]  # (Lk, d_k)
        v = module._split(module.w_v(source), module.d_v)[0, head]  # (Lk, d_v)
        scores = q @ k.T / math.sqrt(module.d_k)  # (Lq, Lk)
        mask = seen["mask"]
        allowed = (
            torch.ones_like(scores, dtype=torch.bool)
            if mask is None
            else mask.reshape(-1, mask.size(-1))[-scores.size(0) :].expand_as(scores)
        )
        masked = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(masked, dim=-1).nan_to_num(0.0)
        out = weights @ v  # (Lq, d_v)
    as_np = {
        "q": q,
        "k": k,
        "v": v,
        "scores": scores,
        "allowed": allowed,
        "masked": masked,
        "weights": weights,
        "out": out,
    }
    return {name: t.float().numpy() if t.dtype != torch.bool else t.numpy() for name, t in as_np.items()}


# -- head ablation -------------------------------------------------------------------------------------------
@dataclass
class Ablation:
    """What switching heads off does to one sentence."""

    heads: dict[tuple[str, int], list[int]]
    text: str  # the re-decoded output with the heads off
    tokens: list[str]
    original_tokens: list[str]
    before: list[float] = field(default_factory=list)  # log P of each original token, all heads
    after: list[float] = field(default_factory=list)  # the same with the heads off

    @property
    def logprob_change(self) -> float:
        return sum(self.after) - sum(self.before)


def token_logprobs(model: Any, src_ids: list[int], produced: list[int], heads: dict | None = None) -> list[float]:
    """Teacher-forced log P(y_t | y_<t, x) of each produced token, optionally with heads off."""
    import torch

    from attnlab.record import ablate

    net = model.model
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]])
    with torch.no_grad(), ablate(net, heads or {}):
        lprobs = torch.log_softmax(net(src, tgt).float(), -1)[0]
    return lprobs.gather(-1, torch.tensor(produced)[:, None]).squeeze(-1).tolist()


def ablation(model: Any, trace: AttentionTrace, heads: dict[tuple[str, int], list[int]], **decode: Any) -> Ablation:
    """Re-decode the trace's source with `heads` switched off, and score the original output."""
    src_ids, produced = trace_ids(model, trace)
    text = trace.meta.get("text") or model.tokenizer.decode(src_ids[:-1])
    result = model.translate(text, record=False, truncate=True, ablate_heads=heads, **decode)
    return Ablation(
        heads=heads,
        text=result.text,
        tokens=result.tokens,
        original_tokens=list(trace.tgt_tokens),
        before=token_logprobs(model, src_ids, produced),
        after=token_logprobs(model, src_ids, produced, heads),
    )


# -- command line ---------------------------------------------------------------------------------------------
def serve_command(
    checkpoints: Sequence[str], port: int, address: str, show: bool = False, threads: int = 1
) -> list[str]:
    """The `panel serve` command line that runs the explorer."""
    if not APP.is_file():
        raise AttnlabError(f"the explorer app is missing ({APP}); attnlab explore runs from a source checkout")
    command = [sys.executable, "-m", "panel", "serve", str(APP), "--port", str(port), "--address", address]
    command += ["--allow-websocket-origin", f"{address}:{port}", "--allow-websocket-origin", f"localhost:{port}"]
    if show:
        command.append("--show")
    command += ["--args", "--threads", str(threads)]
    for path in checkpoints:
        command += ["--checkpoint", str(path)]
    return command


def cli(argv: list[str]) -> int:
    """`attnlab explore [--checkpoint DIR ...] [--port N]`: serve the explorer on this machine."""
    parser = argparse.ArgumentParser(
        prog="attnlab explore",
        description="Open the explorer: translate or parse, and look at every attention head (works offline).",
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        help="checkpoint or run directory (repeatable); the bundled ones are always listed",
    )
    parser.add_argument("--port", type=int, default=5006)
    parser.add_argument("--address", default="127.0.0.1", help="interface to listen on (default: this machine only)")
    parser.add_argument("--show", action="store_true", help="open a browser tab")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for decoding (default 1: fastest for one sentence on shared cores)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the panel serve command instead of running it")
    args = parser.parse_args(argv)
    for path in args.checkpoint:
        if not Path(path).expanduser().exists():
            raise CheckpointError(f"{path}: no such directory")
    if not args.checkpoint and not find_checkpoints():
        print(
            "attnlab explore: no bundled checkpoints yet; pass --checkpoint DIR (or open one in the app)",
            file=sys.stderr,
        )
    command = serve_command(args.checkpoint, args.port, args.address, args.show, args.threads)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    print(f"attnlab explore: http://{args.address}:{args.port}/explorer", file=sys.stderr)
    sys.stderr.flush()
    if os.name == "posix":  # become the server: Ctrl-C and kill reach it directly, no orphan left
        os.execv(command[0], command)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
