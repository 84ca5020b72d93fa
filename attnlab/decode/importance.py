"""Head importance over a corpus (`attnlab.record.importance`, Michel et al. 2019) and the pruning
curve it orders (their Fig. 3; Voita et al., 2019, did the same for a Transformer translator and
found most heads could go): heads switched off least important first, a test set decoded at each
step and scored, BLEU (sacreBLEU, with its signature) for a translator, bracket F1 for a parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnlab.data.tokenizer import is_blank
from attnlab.decode.api import Model, text_list
from attnlab.decode.evaluate import LINEARISED, bleu_chrf, bleu_tokenize, parse_report
from attnlab.errors import AttnlabError, ModelInputError
from attnlab.record.importance import HeadImportance, check_model, pair_importance
from attnlab.record.trace import KINDS, whole_number


def head_importance(
    model: Model,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    *,
    exact: bool = False,
    truncate: bool = False,
) -> HeadImportance:
    """Every head's importance on `sources` with their `references` read teacher-forced (a
    parser's: trees), or without references on the model's own outputs (its task's search)."""
    check_model(model)
    if isinstance(sources, str) or not (sources := text_list(sources, "source sentences")):
        raise AttnlabError("head importance needs a list of one or more source sentences")
    if references is None:
        references = model.translate(sources, truncate=truncate)
    elif isinstance(references, str) or len(references := text_list(references, "references")) != len(sources):
        raise AttnlabError(f"{len(sources)} sources need as many references, got {_count(references)}")
    pairs = []
    for number, (source, target) in enumerate(zip(sources, references, strict=True), 1):
        linear = model.task == "parse" and isinstance(target, str) and bool(LINEARISED.search(target))
        try:  # a parser's target: a tree, or as `data prepare` writes it
            pieces, _ = model.encode_target(target, truncate, linear)
            pairs.append((model.encode_source(source, truncate)[0], [*pieces, model.config.eos_id]))
        except ModelInputError as error:  # which line of a thousand, or the user cannot find it
            raise ModelInputError(f"line {number}: {error}") from None
    return pair_importance(model.model, pairs, exact)


def _count(value: Any) -> str:
    return "one text" if isinstance(value, str) else f"{len(value)}" if hasattr(value, "__len__") else repr(value)


def pruning_curve(
    model: Model,
    order: Sequence[tuple[str, int, int]],
    sources: Sequence[str],
    references: Sequence[str],
    steps: Sequence[int],
    **search: Any,
) -> list[dict[str, Any]]:
    """Decode `sources` with the first k heads of `order` switched off, for each k in `steps`, and
    score against `references`: one row per k (heads off, their share of the model's heads, BLEU
    and chrF with sacreBLEU's signatures, or a parser's bracket F1). `order` may hold some of the
    model's heads only (its cross-attention, say): each of them can go, but never every head of
    the model. `search`: beam, alpha, ... (the task's by default)."""
    check_model(model)
    sources, references = text_list(sources, "source sentences"), text_list(references, "references")
    if len(references) != len(sources) or not sources:
        raise AttnlabError(
            f"the pruning curve needs sources and as many references, got {len(sources)} and {_count(references)}"
        )
    if (blank := next((i for i, r in enumerate(references) if isinstance(r, str) and is_blank(r)), None)) is not None:
        raise AttnlabError(f"reference {blank} is empty: its output would be scored against nothing")
    order = _check_order(order, model.config)
    total = len(KINDS) * model.config.n_layers * model.config.n_heads
    most = len(order) - (len(order) == total)  # all heads off leaves nothing to decode with
    rows = []
    for k in steps:
        if not (whole_number(k) and 0 <= k <= most):
            raise AttnlabError(f"heads to switch off are counted from 0 to {most} of this order, got {k!r}")
        k = int(k)
        heads: dict[tuple[str, int], list[int]] = {}
        for kind, layer, head in order[:k]:
            heads.setdefault((kind, layer), []).append(head)
        outputs = [r.text for r in model.translate(list(sources), ablate_heads=heads, **search)]
        row: dict[str, Any] = {"off": k, "share": k / total, "heads": [list(h) for h in order[:k]]}
        if model.task == "parse":
            row["f1"] = parse_report(list(references), outputs, list(sources), "references", "parses")["f1"]
        else:
            row.update(bleu_chrf(outputs, list(references), bleu_tokenize(model.meta.get("data", {}).get("tgt_lang"))))
        rows.append(row)
    return rows


def _check_order(order: Sequence[Sequence[Any]], config: Any) -> list[tuple[str, int, int]]:
    """`order` as distinct (kind, layer, head) of a model of `config`, or one line: a repeated
    head would count twice in the share, and a head the model lacks was refused only once decoded."""
    heads = {
        (kind, layer, head) for kind in KINDS for layer in range(config.n_layers) for head in range(config.n_heads)
    }
    checked = []
    for entry in order:
        head = tuple(entry) if isinstance(entry, Sequence) and not isinstance(entry, str) else None
        if (
            head is None
            or len(head) != 3
            or not isinstance(head[0], str)
            or not all(whole_number(n) for n in head[1:])
            or head not in heads
        ):
            raise AttnlabError(f"the order lists heads of the model as (kind, layer, head), got {entry!r}")
        checked.append((str(head[0]), int(head[1]), int(head[2])))
    if len(set(checked)) != len(checked):
        raise AttnlabError("the order lists each head once; it repeats one")
    return checked
