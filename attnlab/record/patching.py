"""Activation patching of heads (Vig et al., 2020; Meng et al., 2022; Wang et al., 2022; what
TransformerLens calls `patching`): which heads carry what makes two inputs' outputs differ.

Two sources, a clean one and a corrupted one ("the cat sat" / "the dog sat"), are read
teacher-forced on one target, the clean source's output. One run of each keeps every head's output
before W^O. Then, one head at a time, the corrupted run is repeated with that head's output taken
from the clean run (*denoising*: can this head alone bring the clean output back?), or the clean
run with that head's output taken from the corrupted one (*noising*: does this head alone carry the
damage?). Gradients and ablation (`attnlab.record.importance`) say how much an output depends on a
head; patching says which heads carry the difference one change of the input makes.

The measure is the target's log-probability, or the sum over a few of its positions (the word
that changes), as a share of the whole difference: 1 = this head alone moves it all the way, 0 =
not at all, below 0 = the other way. Decoder heads (self and encoder-decoder attention) sit at
target positions, which both runs share, so they are patched for any two sources; encoder heads sit
at source positions and are patched only where both sources have as many pieces (elsewhere their
shares are NaN and `patched` leaves "encoder" out). Every patched run is one row of a batch: a row
replaces one head's output, through the hook points `attnlab.ablate` uses.

`method="attribution"` estimates every patch at once instead (Nanda, 2023, "attribution
patching"; Syed et al., 2023): the base run's gradient with respect to each head's output, dotted
with the change the patch would make, the first-order Taylor term of the patched run. One forward
and one backward pass replace one row per head, and how far the estimate is from the real patch
says how linear the model is there (docs/EXPERIMENTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_PATCHES, HOOKS, attached
from attnlab.record.ablation import ablate
from attnlab.record.equation import check_same_model, trace_ids
from attnlab.record.importance import BATCH_TOKENS, check_model, head_at, quantized, token_log_probs
from attnlab.record.recorder import hook_point
from attnlab.record.stats import check_trace
from attnlab.record.trace import KINDS, AttentionTrace

DIRECTIONS = ("denoise", "noise")
METHODS = ("activation", "attribution")  # each patch run, or all of them estimated from one gradient
MIN_DIFFERENCE = 0.01  # nats: two sources closer than this leave no difference for a head to carry


@dataclass
class HeadPatching:
    """What patching each head did; arrays are (kinds, layers, heads), kinds in `KINDS` order."""

    share: np.ndarray  # the share of the clean-corrupted difference this head alone moves; NaN: not patched
    nats: np.ndarray  # the patched run's log-probability minus its unpatched run's
    clean: float  # log P(target | clean source), summed over `positions`
    corrupted: float  # log P(target | corrupted source), the same
    direction: str  # "denoise": clean outputs into the corrupted run; "noise": the reverse
    positions: list[int]  # the target positions the log-probability sums over
    patched: tuple[str, ...]  # the kinds patched: "encoder" only where the sources are as long
    pieces: list[str] = field(default_factory=list)  # the target's pieces, </s> last, when known
    pairs: int = 1  # sentence pairs averaged (`attnlab.decode.patching.corpus_patching`)
    skipped: int = 0  # pairs left out of the average: their corruption changed nothing
    method: str = "activation"  # "attribution": the shares are first-order estimates, not patched runs

    def order(self) -> list[tuple[str, int, int]]:
        """The patched heads as (kind, layer, head), the largest share first."""
        flat = np.nan_to_num(self.share.ravel(), nan=-np.inf)
        picked = [int(i) for i in np.argsort(-flat, kind="stable") if np.isfinite(flat[i])]
        return [head_at(i, self.share.shape) for i in picked]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per head (kind, layer, head, share, nats; None where not patched), for JSON and tables."""
        out = []
        for index in range(self.share.size):
            kind, layer, head = head_at(index, self.share.shape)
            share, nats = (float(a[KINDS.index(kind), layer, head]) for a in (self.share, self.nats))
            row = {"kind": kind, "layer": layer, "head": head}
            out.append(row | {"share": None if np.isnan(share) else share, "nats": None if np.isnan(nats) else nats})
        return out


class NoDifference(AttnlabError):
    """The two sources give the target the same log-probability: there is nothing to patch."""


def trace_patching(
    model: Any,
    trace: AttentionTrace,
    corrupted: str,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
) -> HeadPatching:
    """Patch every head between the trace's sentence (clean) and `corrupted`, another source
    sentence, on the output the trace shows, with the heads that were off when it was recorded
    off again in both runs."""
    ids = trace_pair(model, trace, corrupted, "heads")
    with ablate(model.model, trace.heads_off):
        result = pair_patching(model.model, *ids, positions, direction, method)
    result.pieces = list(trace.tgt_tokens)
    return result


def trace_pair(model: Any, trace: AttentionTrace, corrupted: str, what: str) -> tuple[list[int], list[int], list[int]]:
    """(clean source, corrupted source, target) ids for patching `what` of the model that
    recorded `trace` (what `attnlab.load` returns), on the trace's own output."""
    check_model(model, "patching")
    check_trace(trace, "the trace")
    src_ids, produced = trace_ids(model, trace)
    check_same_model(model.model, trace, f"its {what} would be patched on an output it did not produce")
    if not produced:
        raise AttnlabError(f"the trace has no target pieces: there is no output to patch the {what} on")
    return src_ids, model.encode_source(corrupted)[0], produced


def pair_patching(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
) -> HeadPatching:
    """Patch every head of `net` (a `Transformer`) between two sources' ids, on `target`'s ids
    (ending in </s>), summing log-probabilities over `positions` (default: all of the target;
    negative ones count from its end), or estimate every patch (`method="attribution"`). The model
    runs in eval mode; its weights' `.grad` is left untouched."""
    config = net.config
    patched = tuple(k for k in KINDS if k != "encoder" or len(clean) == len(corrupted))
    modules = [m for m in net.attention_modules() if hook_point(m)[0] in patched]
    run = patch_each(net, clean, corrupted, target, positions, direction, HEADS, modules, method)
    nats = np.full((len(KINDS), config.n_layers, config.n_heads), np.nan)
    for (module, head), value in zip(run.sites, run.nats, strict=True):
        kind, layer = hook_point(module)
        nats[KINDS.index(kind), layer, head] = value
    share = run.share(nats)
    return HeadPatching(share, nats, run.clean, run.corrupted, direction, run.positions, patched, method=method)


@dataclass(frozen=True)
class Sites:
    """What can be patched, as a kind of hook: `keep(net, kept)` is a context in which a run stores
    each site's activation, (1, n, ...) under its key, into `kept`; `attach(patches)` one in which
    {key: (gate (B, n), activations)} replace them row by row (gate 1: the given one)."""

    keep: Callable[[Any, dict[Any, torch.Tensor]], AbstractContextManager]
    attach: Callable[[dict[Any, tuple[torch.Tensor, torch.Tensor]]], AbstractContextManager]


@dataclass
class Run:
    """`patch_each`'s answer: the two runs' log-probabilities and each patched (key, index)'s change."""

    clean: float
    corrupted: float
    direction: str
    positions: list[int]
    sites: list[tuple[Any, int]]
    nats: list[float]  # each site's patched log-probability minus its base run's

    def share(self, nats: np.ndarray) -> np.ndarray:
        """`nats` (laid out by the caller) as shares of the clean-corrupted difference, signed so
        that 1 is the whole way in the direction patched."""
        difference = self.clean - self.corrupted
        return nats / difference if self.direction == "denoise" else -nats / difference


@torch.inference_mode(False)  # a caller's inference mode would forbid the attribution's gradient
def patch_each(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None,
    direction: str,
    sites: Sites,
    keys: Sequence[Any],
    method: str = "activation",
) -> Run:
    """The driver of every kind of patching: both runs keep the activations at `keys`, then each
    (key, index), one row each, is patched from the other run, or with `method="attribution"`
    every patch is estimated from one gradient of the base run (what heads and residual-stream
    patching share; `sites` says how to keep and patch)."""
    check_how(net, direction, method)
    chosen = target_positions(positions, len(target))
    device = next(net.parameters()).device
    was_training = net.training
    net.eval()  # no dropout: the model as it decodes
    try:
        with torch.no_grad():
            runs = [kept_run(net, ids, target, chosen, device, sites) for ids in (clean, corrupted)]
            (clean_logp, clean_kept), (corrupt_logp, corrupt_kept) = runs
            difference = clean_logp - corrupt_logp
            if abs(difference) < MIN_DIFFERENCE:
                raise NoDifference(
                    f"the corrupted source changes the target's log-probability by only {difference:+.4f} nats "
                    f"({corrupt_logp:.3f} against {clean_logp:.3f}): there is no difference for a head to carry; "
                    "change a word the output depends on",
                    key="no_difference",  # an ordinary outcome (the sentence typed unchanged): said in a reader's words
                    nats=f"{difference:+.4f}",
                    changed=f"{corrupt_logp:.3f}",
                    kept=f"{clean_logp:.3f}",
                )
            base, kept, base_logp = (
                (corrupted, clean_kept, corrupt_logp) if direction == "denoise" else (clean, corrupt_kept, clean_logp)
            )
            each = [(key, i) for key in keys for i in range(kept[key].size(1))]
            if method == "attribution":
                nats = _attributed(net, base, target, chosen, each, kept, device, sites)
            else:
                nats = [v - base_logp for v in patched_runs(net, base, target, chosen, each, kept, device, sites)]
    finally:
        net.train(was_training)
    return Run(clean_logp, corrupt_logp, direction, chosen, each, nats)


def check_how(net: Any, direction: str, method: str) -> None:
    """Refuse a direction or method patching does not have, and attribution on an int8 `net`, in
    one line (a corpus asks before it translates its lines)."""
    if direction not in DIRECTIONS:
        raise AttnlabError(f"patching runs in direction denoise or noise, not {direction!r}")
    if method not in METHODS:
        raise AttnlabError(f"patching's method is activation or attribution, not {method!r}")
    if method == "attribution" and quantized(net):
        raise AttnlabError("attribution patching differentiates through the model: open it in fp32 or bf16, not int8")


def target_positions(positions: Sequence[int] | None, length: int) -> list[int]:
    if positions is None:
        return list(range(length))
    if isinstance(positions, str | bytes) or not isinstance(positions, Sequence) or not positions:
        raise AttnlabError(f"positions are a list of target positions, e.g. [3]; got {positions!r}")
    chosen = set()
    for p in positions:
        if isinstance(p, bool) or not isinstance(p, int | np.integer) or not -length <= p < length:
            raise AttnlabError(
                f"target position {p!r} does not exist: the target has {length} pieces, </s> included "
                f"(0 to {length - 1}, or from the end -1 to -{length})"
            )
        chosen.add(int(p) % length)
    return sorted(chosen)


def pair_tensors(
    src: list[int], target: list[int], rows: int, net: Any, device: torch.device
) -> tuple[torch.Tensor, ...]:
    """(source, decoder input, target) ids, `rows` copies of one sentence pair, on `device`."""
    tgt_in = [net.config.bos_id, *target[:-1]]
    return tuple(torch.tensor([ids] * rows, device=device) for ids in (src, tgt_in, target))


def kept_run(
    net: Any, src: list[int], target: list[int], positions: list[int], device: torch.device, sites: Sites
) -> tuple[float, dict[Any, torch.Tensor]]:
    """The log-probability over `positions` and the activations `sites` keeps, from one run."""
    kept: dict[Any, torch.Tensor] = {}
    with sites.keep(net, kept):
        logp = token_log_probs(net, *pair_tensors(src, target, 1, net, device))[0, positions].sum()
    return float(logp), kept


def patched_runs(
    net: Any,
    src: list[int],
    target: list[int],
    positions: list[int],
    each: list[tuple[Any, int]],
    kept: dict[Any, torch.Tensor],
    device: torch.device,
    sites: Sites,
) -> list[float]:
    """The log-probability over `positions` with each (key, index) of `each` patched alone, one
    row each, in batches of at most `BATCH_TOKENS` target positions."""
    per_batch = max(1, BATCH_TOKENS // len(target))
    if quantized(net):
        per_batch = 1  # int8: activations are quantized per tensor, so rows of one batch would share a scale
    logp: list[float] = []
    for start in range(0, len(each), per_batch):
        chunk = each[start : start + per_batch]
        gates: dict[Any, torch.Tensor] = {}
        for row, (key, index) in enumerate(chunk):
            gates.setdefault(key, torch.zeros(len(chunk), kept[key].size(1), device=device))[row, index] = 1.0
        with sites.attach({key: (gate, kept[key]) for key, gate in gates.items()}):
            rows = token_log_probs(net, *pair_tensors(src, target, len(chunk), net, device))
        logp += rows[:, positions].sum(-1).tolist()
    return logp


def _attributed(
    net: Any,
    src: list[int],
    target: list[int],
    positions: list[int],
    each: list[tuple[Any, int]],
    kept: dict[Any, torch.Tensor],
    device: torch.device,
    sites: Sites,
) -> list[float]:
    """Each (key, index)'s patch estimated to first order: the base run, every site attached with
    its gate at 0 (a patch that changes nothing), differentiated by the gates. ∂ log P / ∂ gate is
    ∂ log P / ∂a · (a_kept − a), the paths through every later site included (a patch with gate 1
    would cut them), from one backward pass; the weights' `.grad` is not touched."""
    keys = dict.fromkeys(key for key, _ in each)
    gates = {key: torch.zeros(1, kept[key].size(1), device=device, requires_grad=True) for key in keys}
    with torch.enable_grad(), sites.attach({key: (gate, kept[key]) for key, gate in gates.items()}):
        logp = token_log_probs(net, *pair_tensors(src, target, 1, net, device))[0, positions].sum()
        grads = dict(zip(gates, torch.autograd.grad(logp, list(gates.values())), strict=True))
    return [float(grads[key][0, index]) for key, index in each]


def _keep_heads(net: Any, kept: dict[Any, torch.Tensor]) -> AbstractContextManager:
    """Every head's output before W^O, (1, h, Lq, d_v) per attention module: recorded, the
    explicit Eq. (1) runs, whose weights times values are the heads' outputs."""

    def keep(module: Any, weights: torch.Tensor, mask: torch.Tensor | None, values: torch.Tensor) -> None:
        kept[module] = weights @ values

    return attached(HOOKS, dict.fromkeys(net.attention_modules(), keep))


HEADS = Sites(keep=_keep_heads, attach=lambda patches: attached(HEAD_PATCHES, patches))
