"""`attnlab lens`: the logit lens (`attnlab.record.lens`) of every input line, from the command line.
Each line is decoded (or, with `--reference`, read teacher-forced on its reference) and every
decoder layer read through the pre-softmax projection; one output line per input line says at
which layer each output piece was decided, and stderr ends with how often each layer decided one,
over the whole file: where in the stack a model makes up its mind.

With `--attribute` the same lines are read by direct logit attribution
(`attnlab.record.logit_attribution`) instead: each output piece with the decoder part that wrote
most of its logit, and on stderr each kind of part's share of all the logits (cross-attention,
feed-forward, self-attention, embeddings, biases): what in the decoder writes the words.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from attnlab.data.corpora import invalid_lines
from attnlab.data.tokenizer import is_blank
from attnlab.decode.commands import (
    EXIT_STATUS,
    add_checkpoint_argument,
    add_search_arguments,
    empty_notice,
    search_settings,
)
from attnlab.decode.loading import load
from attnlab.decode.streams import one_stdin, read_input, write_stdout
from attnlab.errors import ArgumentParser, AttnlabError, ModelInputError
from attnlab.record.lens import MAX_TOP, Lens, logit_lens
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution

NEVER = "-"  # a piece the top layer does not rank first (beam search looked ahead, or a given reference),
# or with --attribute, one with no writer (the piece it is read against)


def cli(argv: list[str]) -> int:
    parser = ArgumentParser(
        allow_abbrev=False,
        prog="attnlab lens",
        description="For each line, the output pieces, each with the decoder layer from which it stays the "
        f"layer's first choice up to the top (`piece@layer`; @{NEVER}: not even the top layer's first choice). "
        "The logit lens: every decoder layer read through the pre-softmax projection.",
        epilog=f"{EXIT_STATUS} An empty input line is answered with an empty line. stderr ends with the share "
        "of pieces each layer decided.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--input", "-i", default="-", help="file with one sentence per line (default: stdin)")
    parser.add_argument("--reference", help="file of target lines: read teacher-forced on them instead of decoding")
    add_search_arguments(parser, lengths=False, patience=False)
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line instead: pieces, decided layers, each layer's P(piece) and its --top "
        "likeliest pieces (an empty line's object holds empty lists, a failed line's also its \"error\")",
    )
    parser.add_argument("--top", type=int, help="pieces per layer and position with --json (default 3)")
    parser.add_argument(
        "--attribute",
        action="store_true",
        help="direct logit attribution instead: each output piece with the decoder part that wrote most of its "
        f"logit (`piece@cross_L2_H1`; @{NEVER}: the piece it is read against, every share 0); --json: every part's "
        f"share and the writer (null for @{NEVER}); stderr ends with each kind's share of all logits",
    )
    parser.add_argument(
        "--against",
        default="mean",
        help="with --attribute: read each logit against the vocabulary's mean (default), 'runner-up' (the "
        "likeliest other piece) or a piece",
    )
    args = parser.parse_args(argv)
    one_stdin({"--input": args.input, "--reference": args.reference})
    if args.against != "mean" and not args.attribute:
        raise AttnlabError("--against reads each logit against a contrast with --attribute only")
    if args.top is not None and not (args.json and not args.attribute):  # (it was read by nothing)
        raise AttnlabError("--top is how many pieces the lens's --json lists: give it with --json, without --attribute")
    args.top = 3 if args.top is None else args.top
    if not 1 <= args.top <= MAX_TOP:
        raise AttnlabError(f"--top is a whole number from 1 to {MAX_TOP}, got {args.top}")
    decoding = [f"--{n}" for n in ("beam", "alpha") if getattr(args, n) is not None]
    if args.reference and decoding:  # teacher-forced: nothing is decoded, and they were ignored
        raise AttnlabError(
            f"{decoding[0]} is a decoding option, and --reference reads teacher-forced: nothing is decoded"
        )
    lines = read_input(args.input, keep_invalid=True)  # a line that is not UTF-8 fails alone, as in translate
    references = read_input(args.reference, keep_invalid=True) if args.reference else None
    invalid, invalid_references = invalid_lines(lines), invalid_lines(references or [])
    if references is not None and len(references) != len(lines):
        raise AttnlabError(f"{len(lines)} input lines but {len(references)} reference lines")
    model = load(args.checkpoint)
    written = "object" if args.json else "line"  # what an unanswered line is written as (`_unanswered`)
    settings = search_settings(model.task, args.beam, args.alpha)
    start, decided, kinds, writers, failed = time.time(), Counter(), Counter(), Counter(), 0
    out = []
    if empty := [i + 1 for i, line in enumerate(lines) if is_blank(line) and i + 1 not in invalid]:
        print(empty_notice("lens", empty, len(lines), written), file=sys.stderr)
    for i, line in enumerate(lines):
        if is_blank(line) and i + 1 not in invalid:  # answered with an empty line (object), as translate does
            out.append(json.dumps(_unanswered(args.attribute, args.against)) if args.json else "")
            continue
        try:
            if i + 1 in invalid:
                raise ModelInputError(invalid[i + 1])
            if i + 1 in invalid_references:
                raise ModelInputError(f"its reference: {invalid_references[i + 1]}")
            if references is not None and is_blank(references[i]):
                raise ModelInputError("its reference is empty")
            if references is not None:
                result = model.score(line, references[i], record=True)
            else:
                result = model.translate(line, **settings, record=True)
            if args.attribute:
                attribution = logit_attribution(model, result.trace, against=args.against)
            else:
                lens = logit_lens(model, result.trace, top=args.top)
        except ModelInputError as error:
            failed += 1
            print(f"attnlab lens: line {i + 1}: {error}; writing an empty {written}", file=sys.stderr)
            unanswered = _unanswered(args.attribute, args.against) | {"error": str(error)}
            out.append(json.dumps(unanswered, ensure_ascii=False) if args.json else "")
            continue
        if args.attribute:
            kinds.update(kind_shares(attribution))
            writers.update(largest_writers(attribution))
            row = _attribution_json(attribution) if args.json else _writers(attribution)
        else:
            decided.update(lens.settled)
            row = _json(lens) if args.json else _pieces(lens)
        out.append(json.dumps(row, ensure_ascii=False) if args.json else row)
    write_stdout("".join(line + "\n" for line in out))
    answered = len(lines) - failed - sum(is_blank(line) for i, line in enumerate(lines) if i + 1 not in invalid)
    print(f"attnlab lens: {answered} of {len(lines)} lines in {time.time() - start:.1f}s", file=sys.stderr)
    if decided:
        print(f"attnlab lens: {share_line(decided, model.config.n_layers)}", file=sys.stderr)
    if kinds:
        print(f"attnlab lens: {kinds_line(kinds, args.against)}", file=sys.stderr)
        print(f"attnlab lens: {writers_line(writers)}", file=sys.stderr)
    return 1 if failed else 0


def share_line(decided: Counter, n_layers: int) -> str:
    """ "pieces decided at layer 0: 2.1%, ...": each layer's share of all pieces counted."""
    total = sum(decided.values())
    parts = [f"{layer}: {100 * decided[layer] / total:.1f}%" for layer in range(n_layers)]
    never = f"; not the top layer's first choice: {100 * decided[None] / total:.1f}%" if decided[None] else ""
    return f"of {total} pieces, decided at layer {', '.join(parts)}{never}"


def _pieces(lens: Lens) -> str:
    return " ".join(
        f"{piece}@{NEVER if layer is None else layer}" for piece, layer in zip(lens.produced, lens.settled, strict=True)
    )


def _json(lens: Lens) -> dict[str, Any]:
    return {
        "tokens": lens.produced,
        "decided": lens.settled,
        "p": [[round(float(p), 4) for p in row] for row in lens.p],
        "top": lens.top,
        "top_p": [[[round(float(p), 4) for p in cell] for cell in row] for row in lens.top_p],
    }


def _unanswered(attribute: bool, against: str) -> dict[str, Any]:
    """The --json object of a line with no output pieces, blank or failed (the caller adds a failed
    one's "error"): what `_json` or `_attribution_json` gives a sentence pair of no pieces, every
    key there and every list empty. An empty line there broke a JSON-lines reader; an object of its
    own keys ({"line": N, "error": ...}) would make a reader tell the two kinds apart before
    reading any, and a line's number is already its place in the output, as for every other line."""
    none = np.zeros((0, 0, 0, 0))  # no positions: every list below is empty
    if attribute:
        return _attribution_json(LogitAttribution([], [], [], against, [], *[none] * 8))
    return _json(Lens([], [], [], none, none, none))


# -- --attribute ---------------------------------------------------------------------------------------------
KINDS = {
    "cross": "cross-attention",
    "ffn": "feed-forward",
    "decoder": "self-attention",
    "embedding": "embeddings",
    "position": "positions",
    "bias": "biases",
}


def kind_shares(attribution: LogitAttribution) -> Counter:
    """{kind (a key of KINDS): its shares summed over the heads, layers and positions}, and "logit": the logits'."""
    return Counter(
        {
            "cross": float(attribution.cross_heads.sum()),
            "ffn": float(attribution.ffn.sum()),
            "decoder": float(attribution.self_heads.sum()),
            "embedding": float(attribution.embedding.sum()),
            "position": float(attribution.position.sum()),
            "bias": float(attribution.bias.sum()),
            "logit": float(attribution.logit.sum()),
        }
    )


def kinds_line(kinds: Counter, against: str) -> str:
    """ "of the logits' sum (against the mean logit): cross-attention 41.2%, ...": each kind's share."""
    total = kinds["logit"]
    parts = ", ".join(f"{name} {100 * kinds[kind] / total:.1f}%" for kind, name in KINDS.items())
    return f"of the {total:.1f} that the logits add up to (against {'the mean logit' if against == 'mean' else against}): {parts}"


def largest_writers(attribution: LogitAttribution) -> list[str | None]:
    """Each output piece's largest direct writer (`LogitAttribution.writer`): "cross L2 H1", ...,
    None for a piece read against itself."""
    return [attribution.writer(i) for i in range(len(attribution.produced))]


def writers_line(writers: Counter, shown: int = 6) -> str:
    """ "the largest direct writer of the 236 pieces: ffn L2 37.8%, bias 17.0%, ...": the `shown`
    commonest. Pieces with no writer (None) are left out of the count and the shares, and the line
    ends with how many, as `share_line` ends with the pieces no layer decided."""
    named = Counter({name: n for name, n in writers.items() if name is not None})
    total = sum(named.values())
    parts = ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in named.most_common(shown)) or "none"
    left = f"; {writers[None]} left out (the piece read against: every share 0)" if writers[None] else ""
    return f"the largest direct writer of the {total} pieces: {parts}{left}"


def _writers(attribution: LogitAttribution) -> str:
    return " ".join(
        f"{piece}@{NEVER if writer is None else writer.replace(' ', '_')}"
        for piece, writer in zip(attribution.produced, largest_writers(attribution), strict=True)
    )


def _attribution_json(attribution: LogitAttribution) -> dict[str, Any]:
    def rounded(a: object) -> object:
        return [rounded(x) for x in a] if isinstance(a, list) else round(float(a), 4)

    return {
        "tokens": attribution.produced,
        "against": attribution.contrast if attribution.against != "mean" else "mean",
        "writer": largest_writers(attribution),  # null: the piece read against, nothing to attribute
        "logit": rounded(attribution.logit.tolist()),
        **{
            name: rounded(getattr(attribution, name).tolist())
            for name in ("self_heads", "cross_heads", "ffn", "embedding", "position", "bias")
        },
        "source": attribution.source,
        "source_shares": rounded(attribution.cross_source.sum((0, 1)).tolist()),
    }
