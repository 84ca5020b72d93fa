"""How alignment is read off a model (`attnlab.decode.alignment`): a *reading* names a method
(one head, a layer's heads averaged, all layers, Shift-Att, rollout, direct logit shares, norms,
saliency) and the layer and head it takes; `candidates` lists every reading of a model, which
`evaluate --all-heads` scores; a model card's `meta.alignment` names the best one and the link
rule it won with (`best_method`), which `align` then uses. Every reading is checked against the
model before any line is decoded, and named as the reports name it (`reading_name`).
"""

from __future__ import annotations

import reprlib
from numbers import Real
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.record.trace import whole_number

METHODS = ("head", "layer", "all", "shift", "rollout", "direct", "norm", "saliency")


def check_threshold(method: str, threshold: object) -> None:
    """A word's attention mass lies in [0, 1]: a threshold above 1, or NaN (every comparison is
    False), links nothing without a word. One check, for `word_links` and `align_lines`."""
    if method == "threshold" and not (isinstance(threshold, Real) and 0.0 <= threshold <= 1.0):
        raise AttnlabError(f"--threshold is a share of a word's attention, in [0, 1]; got {threshold!r}")


def reading(method: str, layer: int | None = None, head: int | None = None, strict: bool = True) -> dict[str, Any]:
    """One way to read alignment off a trace. A setting its method does not read is refused (`align
    --method all --layer 0` printed the all-layer links without a word), or dropped if not `strict`."""
    if method not in METHODS:
        raise AttnlabError(f"unknown alignment method {method!r}; choose from {', '.join(METHODS)}")
    reads = {
        "head": "layer head",
        "layer": "layer",
        "all": "",
        "rollout": "layer",
        "direct": "layer",
        "norm": "layer",
        "saliency": "",
    }
    reads["shift"] = "layer head" if layer is not None else "layer"
    unread = [f"--{n} {v}" for n, v in (("layer", layer), ("head", head)) if v is not None and n not in reads[method]]
    if unread and strict:  # (Shift-Att reads a head of the --layer it is given; without one, the all-layer average)
        said = " or ".join(unread) + " without --layer" * (method == "shift")
        raise AttnlabError(f"--method {method} takes no {said}")
    return {"method": method, **{n: v if n in reads[method] else None for n, v in (("layer", layer), ("head", head))}}


def candidates(n_layers: int, n_heads: int) -> list[dict[str, Any]]:
    """Every way to read alignment off a model's traces: each layer × head, each layer's average,
    the all-layer average, Shift-Att on each layer's average and on the all-layer average, each
    layer's rollout, the direct shares of each layer and of all, each layer's norms, and the
    gradient saliency."""
    layers, heads = range(n_layers), n_heads
    out = [{"method": "head", "layer": n, "head": h} for n in layers for h in range(heads)]
    out += [{"method": "layer", "layer": n, "head": None} for n in layers]
    out += [{"method": "all", "layer": None, "head": None}]
    out += [{"method": "shift", "layer": n, "head": None} for n in layers]
    out += [{"method": "shift", "layer": None, "head": None}]
    out += [{"method": "rollout", "layer": n, "head": None} for n in layers]
    out += [{"method": "direct", "layer": n, "head": None} for n in [*layers, None]]
    out += [{"method": "norm", "layer": n, "head": None} for n in layers]
    return out + [{"method": "saliency", "layer": None, "head": None}]


# -- a model card's best reading ------------------------------------------------------------------------
def card_of(path: str | None) -> str:
    """Where a model's best reading is stored, as its refusals name it: `CKPT/config.json:
    meta.alignment` (the file to mend), or the card's for a model read from no directory."""
    return f"{path}/config.json: meta.alignment" if path else "the card's meta.alignment"


def best_method(meta: dict[str, Any], config: Any = None, path: str | None = None) -> dict[str, Any]:
    """The reading a model card names as its best (`meta["alignment"]`, as `evaluate --save-best`
    writes it), else the all-layer average. One that names no reading (not a mapping, a method not
    in `METHODS`), or none of the model's (`check_reading` against `config`), is one line naming
    `card_of(path)`: `"head"` or `{"method": "bogus"}` was ignored, and `all` read without a word."""
    best, where = meta.get("alignment"), card_of(path)
    if best is None:
        return reading("all")
    if not isinstance(best, dict):
        raise AttnlabError(
            f'{where} is {reprlib.repr(best)}, not a mapping such as {{"method": "head", "layer": 2, "head": 3}}'
        )
    if best.get("method") not in METHODS:
        raise AttnlabError(f"{where} method {reprlib.repr(best.get('method'))} is not one of {', '.join(METHODS)}")
    chosen = reading(best["method"], best.get("layer"), best.get("head"), strict=False)  # a card's extras: dropped
    return {**check_reading(chosen, config, where), **card_rule(best, where)}


def card_rule(best: dict[str, Any], where: str) -> dict[str, Any]:
    """The link rule a card's best reading was scored with (`--save-best` keeps it), {} for a card
    without one (argmax): a reading that won with threshold links and was read with argmax scored
    another AER than its card's."""
    if "links" not in best:
        return {}
    if best["links"] not in ("argmax", "threshold"):
        raise AttnlabError(f"{where} links {reprlib.repr(best['links'])} is not argmax or threshold")
    try:
        check_threshold(best["links"], best.get("threshold"))
    except AttnlabError:
        raise AttnlabError(f"{where} threshold {reprlib.repr(best.get('threshold'))} is not in [0, 1]") from None
    return {"links": best["links"], **({"threshold": best["threshold"]} if best["links"] == "threshold" else {})}


def check_reading(chosen: dict[str, Any], config: Any = None, where: str | None = None) -> dict[str, Any]:
    """A reading's layer and head, checked before any line is decoded: a head reading names both,
    and given the model's `config` each lies inside it (`align --layer 9` of a three-layer model,
    or a card's, failed "layer 9 of cross attention was not recorded" once the model had run).
    `where` names a card's reading (`card_of`); None, the command line's flags. Returns it counted
    from 0 where `config` says from where (`--layer -1 --head -1` is reported as L2 H3, not L-1 H-1)."""
    if chosen["method"] == "head" and None in (chosen["layer"], chosen["head"]):
        said = f"{where} reads a head but names no layer and head: give --method"
        raise AttnlabError("--method head needs --layer and --head" if where is None else said)
    counted = dict(chosen)
    for name, field, what in (("layer", "n_layers", "decoder layers"), ("head", "n_heads", "heads a layer")):
        value, count = chosen[name], getattr(config, field, None)
        if value is None or count is None:
            continue
        if whole_number(value) and -count <= value < count:
            counted[name] = int(value) % count
            continue
        said = f"--{name} {value}" if where is None else f"{where} {name} {reprlib.repr(value)}"
        raise AttnlabError(f"{said}: the model has {count} {what} (0 to {count - 1}, or {-count} to -1 from the last)")
    return counted


def reading_name(reading: dict[str, Any], samples: int = 0) -> str:
    """`head L3 H2`, `layer L3`, `all`, `shift L3`, `shift all`, `rollout L3`, `direct L3`, `direct all`,
    `norm L3`, `saliency` (`saliency smoothgrad 10` with SmoothGrad's `samples`)."""
    if reading["method"] == "saliency" and samples:
        return f"saliency smoothgrad {samples}"
    parts = [reading["method"]]
    if reading.get("layer") is not None:
        parts.append(f"L{reading['layer']}")
    elif reading["method"] in ("shift", "direct"):
        parts.append("all")
    if reading.get("head") is not None:
        parts.append(f"H{reading['head']}")
    return " ".join(parts)
