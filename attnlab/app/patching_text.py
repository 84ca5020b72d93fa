"""What activation patching and path patching found, said in one or two lines of the reader's
language: the same words under the explorer's grids (`attnlab.app.explorer.patching`) and the
notebook explorer's (`attnlab.widgets`); and the grid and the circuit both Compare views draw for
each of two models.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.i18n import kind_name, kind_title, listed, text
from attnlab.errors import AttnlabError
from attnlab.record.circuit import trace_circuit
from attnlab.record.patching import HeadPatching
from attnlab.record.paths import Node, PathPatching
from attnlab.record.residual import ResidualPatching, trace_residual_patching
from attnlab.record.trace import KINDS
from attnlab.viz.patching import estimated

STAYS = 0.5  # the share at the changed pieces in the encoder's top row from which the change "stays" there
NAMED, NOTED = 3, 0.05  # a sender's line names its 3 largest receivers, and up to 2 more as large as 0.05
# a receiver as `PathPatching.through` names it: "cross L2 H1" or "decoder FFN L2"


SENDERS = list(range(1, 9))  # a circuit's menu of heads followed: more than eight is a tangle no one reads
THRESHOLDS = (0.02, 0.05, 0.1)  # its menu of the smallest path drawn, as a share of the difference


def head_lines(patching: HeadPatching, lang: str, reference: bool = False) -> tuple[list[str], str]:
    """(lines: the two runs' log-probabilities, why the encoder's heads were not patched when they
    were not, and that the shares are estimates when they are; the line naming the head that moves
    the most). `reference`: the output read is a reference, not the model's own."""
    logp = text(
        "ablation.patch_logp", lang, clean=patching.clean, corrupted=patching.corrupted,
        difference=patching.clean - patching.corrupted,
    )  # fmt: skip
    if reference:
        logp = f"{logp} {text('ablation.importance_reference', lang)}"
    lines = [logp] if "encoder" in patching.patched else [logp, text("ablation.patch_encoder", lang)]
    if patching.method == "attribution":
        lines.append(text("ablation.patch_estimated", lang))
    kind, layer, head = patching.order()[0]
    share = float(patching.share[KINDS.index(kind), layer, head])
    named = text("ablation.patch_head", lang, kind=kind_title(kind, lang), layer=layer, head=head)
    if not np.isfinite(share) or share <= 0:
        most = text("ablation.patch_nothing", lang)
    elif patching.direction == "denoise":
        most = text("ablation.patch_most_denoise", lang, head=named, share=share)
    else:
        most = text("ablation.patch_most_noise", lang, head=named, share=share)
    return lines, _estimate(patching, most, lang)


def path_lines(paths: PathPatching, lang: str) -> list[str]:
    """What path patching found: the heads' direct and indirect shares summed and, with a sender,
    how its total splits: directly, through later parts (its largest receivers named, largest
    first, the others summed), and the rest (what receivers do together, non-linearity)."""
    lines = [
        text(
            "paths.sums", lang,
            direct=rounded(np.nansum(paths.direct.share)), indirect=rounded(np.nansum(paths.indirect.share)),
        )
    ]  # fmt: skip
    if paths.sender is None:
        return lines
    at = (KINDS.index(paths.sender[0]), *paths.sender[1:])
    total, direct = float(paths.total.share[at]), float(paths.direct.share[at])
    through = paths.through()
    named = [(node, share) for i, (node, share) in enumerate(through[: NAMED + 2]) if i < NAMED or abs(share) >= NOTED]
    parts = [text("paths.part", lang, name=_component(node, lang), share=rounded(v)) for node, v in named]
    others = sum(share for _, share in through[len(named) :])  # so that the parts add up to "through later parts"
    if len(through) > len(named) and rounded(others):
        parts.append(text("paths.others", lang, share=rounded(others)))
    sender = head_name(*paths.sender, lang)
    lines.append(
        text(
            "paths.sender", lang,
            sender=sender, total=rounded(total), direct=rounded(direct), indirect=rounded(total - direct),
            through=listed(parts, lang), rest=rounded(paths.rest),
        )
    )  # fmt: skip
    return lines


def rounded(share: float) -> float:
    """A share as the lines write it (two decimals), a share that rounds to zero without its minus
    (an encoder head's direct share, exactly 0 give or take rounding, read "-0.00 directly")."""
    return round(float(share), 2) + 0.0


def head_name(kind: str, layer: int, head: int, lang: str) -> str:
    """A head as a line or a menu names it: "cross L1 H1"."""
    return text("head.short", lang, kind=kind_name(kind, lang), layer=layer, head=head)


def _component(node: Node, lang: str) -> str:
    """A receiver `PathPatching.through` gives (a head, or ("ffn", side, layer)) in `lang`."""
    if node[0] == "ffn":
        return text("paths.ffn", lang, side=kind_name(node[1], lang), layer=node[2])
    return head_name(*node, lang)


def residual_line(residual: ResidualPatching, lang: str) -> str:
    """Where the difference sits: in the encoder, the share of its top layer's output at the
    changed pieces (it stays there, or has spread); in the output, the two pieces of the decoder's
    top row with the largest shares (that row splits the whole difference)."""
    top = residual.decoder[-1]
    first, *second = np.argsort(-top, kind="stable")[:2]
    landed = [
        text("ablation.residual_piece", lang, piece=word(residual.target, i), share=float(top[i]))
        for i in (first, *(i for i in second if round(100 * float(top[i])) != 0))  # (a second at 0% says nothing)
    ]
    lands = text("ablation.residual_two", lang, first=landed[0], second=landed[1]) if len(landed) > 1 else landed[0]
    if not residual.encoder_patched:
        return _estimate(residual, text("ablation.residual_no_encoder", lang, lands=lands), lang)
    encoder = residual.encoder[-1]
    changed = [i for i, (a, b) in enumerate(zip(residual.source, residual.changed, strict=False)) if a != b]
    changed = changed or [int(np.nanargmax(encoder))]  # (pieces not known: where the top row is largest)
    share = float(np.nansum(encoder[changed]))
    pieces = ", ".join(text("ablation.residual_quoted", lang, piece=word(residual.source, i)) for i in changed)
    if share >= STAYS:
        return _estimate(residual, text("ablation.residual_stays", lang, pieces=pieces, share=share, lands=lands), lang)
    return _estimate(residual, text("ablation.residual_spreads", lang, pieces=pieces, share=share, lands=lands), lang)


def _estimate(result: HeadPatching | ResidualPatching, said: str, lang: str) -> str:
    """`said`, marked as an estimate where the shares are attribution patching's, not measured."""
    return text("ablation.patch_estimate_of", lang, said=said) if result.method == "attribution" else said


def word(pieces: list[str], index: int) -> str:
    """The piece at `index` as a reader names it in a sentence: whole, without sentencepiece's word
    mark, a byte piece by the character it spells (`viz.spelled`, over the pieces around it only: a
    character takes at most 4 bytes, and menus name every piece of a sentence this way), and by its
    position where the pieces are not known."""
    if index >= len(pieces):
        return str(index)
    start = max(0, index - 3)
    return viz.piece_word(viz.spelled(pieces[start : index + 4])[index - start])


def compared_residual(
    model: Any,
    trace: Any,
    changed: str,
    how: dict[str, str],
    label: str,
    lang: str,
    words: dict[str, str],
    **figure: Any,
) -> LayoutDOM:
    """One model's residual stream patched against `changed` on its reading of the compared output
    (`trace`), `how` ({direction, method}): the encoder's grid where the two sentences' positions line
    up, else the decoder's, titled with the model's `label` (`figure`: the view's other options)."""
    if not changed:
        raise AttnlabError(text("compare.patch_none"), key="patch_none")  # said whole in the page's language
    found = trace_residual_patching(model, trace, changed, **how)
    side = "encoder" if found.encoder_patched else "decoder"
    side_name = text("kind.encoder", lang) if found.encoder_patched else text("kind.decoder", lang)
    title = estimated(found, text("compare.patching_title", lang, name=label, side=side_name), words)
    return viz.residual_patching_figure(found, side=side, title=title, words=words, **figure)


def compared_circuit(
    model: Any,
    trace: Any,
    changed: str,
    how: dict[str, str],
    label: str,
    lang: str,
    words: dict[str, str],
    *,
    senders: int,
    threshold: float,
    **figure: Any,
) -> LayoutDOM:
    """One model's circuit for `changed` on its reading of the compared output (`trace`), in the
    direction `how` says, following `senders` heads and keeping paths of `threshold` or more (what
    the circuit menus say, `SENDERS` and `THRESHOLDS`), titled with the model's `label` as the
    Compare views' other figures are (`figure`: the view's other options)."""
    if not changed:
        raise AttnlabError(text("compare.patch_none"), key="patch_none")  # said whole in the page's language
    circuit = trace_circuit(model, trace, changed, direction=how["direction"], senders=senders, threshold=threshold)
    title = f"{label} · {words['circuit.title'].format(threshold=circuit.threshold)}"
    return viz.circuit_figure(circuit, title=title, words=words, **figure)
