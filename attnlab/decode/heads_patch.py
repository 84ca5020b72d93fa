"""`attnlab heads patch`: activation patching from the command line (`attnlab.decode.patching`).

attnlab heads patch --checkpoint C --clean "A man sleeps." --corrupted "A woman sleeps."
attnlab heads patch --checkpoint C --clean man.en --corrupted woman.en --files   # the mean over pairs
attnlab heads patch --checkpoint C --clean "..." --corrupted "..." --residual    # layers × positions
attnlab heads patch ... --method attribution     # every patch estimated from one gradient (Nanda, 2023)
attnlab heads patch ... --paths [--sender cross:1:1]   # each head's share split: direct, and through what
attnlab heads patch ... --circuit 4 [--threshold 0.05]   # the heads that move most and their paths
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from attnlab.decode.commands import add_checkpoint_argument, add_dtype_argument
from attnlab.decode.loading import load
from attnlab.decode.patching import (
    LANDS,
    ResidualCorpus,
    corpus_patching,
    corpus_paths,
    corpus_residual,
    patch_circuit,
    patch_heads,
    patch_paths,
    patch_residual,
)
from attnlab.decode.streams import one_stdin, read_input, write_stdout
from attnlab.errors import AttnlabError, ConfigError
from attnlab.model.checkpoint import weights_digest
from attnlab.record.circuit import MOST, Circuit
from attnlab.record.patching import DIRECTIONS, METHODS, HeadPatching
from attnlab.record.paths import SIDES, Node, PathPatching, node_name
from attnlab.record.residual import ResidualPatching
from attnlab.record.trace import KINDS


def patch_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "patch",
        allow_abbrev=False,
        help="activation patching: which heads carry what one change of the input changes in the output",
        description="Read the clean sentence's output teacher-forced after the clean and the corrupted sentence; "
        "then patch each head alone, its output in the corrupted run taken from the clean run (denoise) or the "
        "reverse (noise), and print the share of the log-probability difference it moves (1: all of it).",
    )
    add_checkpoint_argument(run)
    run.add_argument("--clean", required=True, help="the clean source sentence (with --files: a file of them)")
    run.add_argument("--corrupted", required=True, help="the same sentence with a change (with --files: a file)")
    run.add_argument("--target", help="the output to read (default: the model's for --clean; with --files a file)")
    run.add_argument("--files", action="store_true", help="--clean, --corrupted, --target name line-aligned files")
    run.add_argument("--limit", type=int, help="with --files: only the first N lines")
    run.add_argument(
        "--positions",
        type=int,
        nargs="+",
        help="sum the log-probability over these target positions, from 0 (negative: from the end, -1 the </s>)",
    )
    run.add_argument(
        "--direction",
        choices=DIRECTIONS,
        default="denoise",
        help="clean into corrupted, or the reverse (default: denoise)",
    )
    run.add_argument(
        "--residual",
        action="store_true",
        help="patch each layer's output at each position instead of each head (Meng et al.'s causal tracing); "
        "with --files, pairs that differ in one piece, lined up on it: the encoder's mean share by distance",
    )
    run.add_argument(
        "--method",
        choices=METHODS,
        default="activation",
        help="activation (the default): patch each for real; attribution: estimate every patch from one backward "
        "pass (the gradient times the change), a first-order estimate that is fast and, where the model is far "
        "from linear, wrong",
    )
    run.add_argument(
        "--paths",
        action="store_true",
        help="split each head's share into its direct path to the output (every other head and feed-forward "
        "layer frozen) and the rest, and the sender's effect through each later head and feed-forward layer",
    )
    run.add_argument(
        "--sender",
        help="with --paths: the head whose receivers to measure, KIND:LAYER:HEAD (e.g. cross:1:1), or a "
        "feed-forward layer, ffn:SIDE:LAYER (e.g. ffn:decoder:1); default: the top head",
    )
    run.add_argument(
        "--circuit",
        type=int,
        metavar="N",
        help="the N heads that move most and their paths (to the output, or through a later head or "
        "feed-forward layer) of at least --threshold of the difference",
    )
    run.add_argument("--threshold", type=float, help="with --circuit: the smallest share a path keeps (default 0.05)")
    add_dtype_argument(run)
    run.add_argument("--truncate", action="store_true", help="cut lines longer than the model takes")
    run.add_argument("--json", action="store_true", help="one JSON object on stdout instead of tables")


def patch_command(args: argparse.Namespace) -> int:
    """`attnlab heads patch`: heads or the residual stream, of one pair or over files of pairs."""
    # each refusal names what is wrong with what was given: `--limit 3` alone said "got 3", and
    # `--sender` without --paths said "not --files"; a --threshold without --circuit was ignored
    if args.limit is not None and not args.files:
        raise ConfigError("--limit reads only the first N lines of files of pairs: give it with --files")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit takes N ≥ 1 lines of the --files, got {args.limit}")
    if args.positions is not None and args.files:
        raise AttnlabError("--positions picks pieces of one output: give one --clean and --corrupted, not --files")
    if args.sender is not None and not args.paths:
        raise AttnlabError("--sender names the head whose paths to split: give it with --paths")
    if args.sender is not None and args.files:
        raise AttnlabError("--sender splits the paths of one pair: give one --clean and --corrupted, not --files")
    if args.threshold is not None and args.circuit is None:
        raise AttnlabError("--threshold is the smallest share a path of --circuit keeps: give it with --circuit N")
    if sum(map(bool, (args.paths, args.residual, args.circuit is not None))) > 1:
        raise AttnlabError("--paths, --residual and --circuit each patch something else: give one of them")
    if args.circuit is not None and args.files:
        raise AttnlabError("--circuit follows the paths of one pair: give one --clean and --corrupted, not --files")
    if args.circuit is not None and not 1 <= args.circuit <= MOST:  # was "most is how many nodes ...; got 16"
        raise ConfigError(f"--circuit N follows the N heads that move most: N from 1 to {MOST}, got {args.circuit}")
    if args.circuit is not None and args.method != "activation":  # it patched activations without a word
        raise AttnlabError(f"--circuit patches each path (activation patching): --method {args.method} is not read")
    named = [
        f"--{n} {v}" for n in ("clean", "corrupted", "target") if _is_file(v := getattr(args, n)) and not args.files
    ]
    if named:  # the file's name was patched as a sentence, and a table of it printed
        raise AttnlabError(f"{named[0]} names a file: give --files to read the sentences from files")
    sender = _sender(args.sender) if args.sender is not None else None
    if args.files:  # read (and refused) before the model loads
        one_stdin({"--clean": args.clean, "--corrupted": args.corrupted, "--target": args.target})
        clean, corrupted = read_input(args.clean)[: args.limit], read_input(args.corrupted)[: args.limit]
        targets = read_input(args.target)[: args.limit] if args.target else None
        if len(clean) != len(corrupted) or (targets is not None and len(targets) != len(clean)):
            counts = f"{args.clean} has {len(clean)} lines, {args.corrupted} has {len(corrupted)}"
            raise AttnlabError(counts + ("" if targets is None else f", {args.target} has {len(targets)}"))
        if not clean:  # was "needs as many clean lines as clean ones (0)"
            raise AttnlabError(f"{args.clean} and {args.corrupted} have no lines: there is no pair to patch")
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    started = time.perf_counter()
    how = {"direction": args.direction, "method": args.method, "truncate": args.truncate}
    about = {
        "checkpoint": os.path.basename(os.path.normpath(args.checkpoint)),
        "model_sha256": weights_digest(model.path),
    }
    if args.circuit is not None:
        one = {"positions": args.positions, "direction": args.direction, "truncate": args.truncate}
        one |= {} if args.threshold is None else {"threshold": args.threshold}  # (else patch_circuit's default)
        circuit = patch_circuit(model, args.clean, args.corrupted, args.target, senders=args.circuit, **one)
        pairs, left = 1, {}
        result = circuit.total
        answer = about | {
            name: getattr(result, name) for name in ("direction", "clean", "corrupted", "positions", "pieces")
        }
        answer |= {"senders": [list(s) for s in circuit.senders], "threshold": circuit.threshold}
        answer |= {"parts": {node_name(n): {"total": t, "direct": d} for n, (t, d) in circuit.shares.items()}}
        answer |= {"edges": [[node_name(a), node_name(b), share] for a, b, share in circuit.edges]}
        table = _circuit_table(circuit)
    elif args.paths:
        if args.files:
            paths = corpus_paths(model, clean, corrupted, targets, **how)
        else:
            one = {"positions": args.positions, **how}
            paths = patch_paths(model, args.clean, args.corrupted, args.target, **one)
            top = paths.total.order()[0] if sender is None and paths.total.order() else sender
            paths = (
                paths if top is None else patch_paths(model, args.clean, args.corrupted, args.target, sender=top, **one)
            )
        result = paths.total
        pairs, left = result.pairs, {"no difference": result.skipped}
        fields = ("direction", "clean", "corrupted", "positions", "pieces", "pairs", "skipped")
        answer = about | {name: getattr(result, name) for name in fields} | {"patched": list(result.patched)}
        answer |= _path_answer(paths)
        table = _path_tables(paths)
    elif args.files and args.residual:
        spread = corpus_residual(model, clean, corrupted, targets, **how)
        pairs, left = spread.pairs, {"no difference": spread.skipped, "not one changed piece": spread.left_out}
        fields = {
            name: getattr(spread, name) for name in ("direction", "method", "clean", "corrupted", "offsets", "landed")
        }
        answer = about | fields | {"encoder": _listed(spread.encoder), "pairs": pairs} | left
        table = _spread_tables(spread)
    elif args.residual:
        residual = patch_residual(model, args.clean, args.corrupted, args.target, positions=args.positions, **how)
        pairs, left = 1, {}
        fields = ("direction", "method", "clean", "corrupted", "positions", "source", "changed", "target")
        answer = about | {name: getattr(residual, name) for name in fields}
        answer |= {side: _listed(getattr(residual, side)) for side in ("encoder", "decoder")}
        table = _residual_tables(residual)
    else:
        if args.files:
            result = corpus_patching(model, clean, corrupted, targets, **how)
        else:
            result = patch_heads(model, args.clean, args.corrupted, args.target, positions=args.positions, **how)
        pairs, left = result.pairs, {"no difference": result.skipped}
        fields = ("direction", "method", "clean", "corrupted", "positions", "pieces", "pairs", "skipped")
        answer = about | {name: getattr(result, name) for name in fields} | {"patched": list(result.patched)}
        answer |= {"heads": result.rows()}
        table = _patch_tables(result)
    said = f"{pairs:,} pair{'s' * (pairs != 1)} patched in {time.perf_counter() - started:.1f} s"
    out = ", ".join(f"{n:,} {why}" for why, n in left.items() if n)
    print(said + (f" ({out}: left out)" if out else ""), file=sys.stderr)
    write_stdout(json.dumps(answer, ensure_ascii=False) + "\n" if args.json else table)
    return 0


def _is_file(path: str | None) -> bool:
    """Whether `--clean` (or --corrupted, --target) names an existing file; a sentence with a NUL
    or too long for a path is none (`os.path.isfile` says False, where `Path.is_file` raised)."""
    return path is not None and os.path.isfile(path)


def _patch_tables(result: HeadPatching) -> str:
    """The two log-probabilities, each kind's grid of shares (top layer first), then the heads by share."""
    some = result.pieces and len(result.positions) < len(result.pieces)
    where = " at " + " ".join(result.pieces[p] for p in result.positions) if some else ""
    lines = [f"log P(target{where}): clean {result.clean:.3f}, corrupted {result.corrupted:.3f}"]
    lines.append(f"share of the difference moved by each head alone ({_how(result)}; 1 = all of it)")
    for k, kind in enumerate(KINDS):
        lines += ["", f"{kind}\t" + "\t".join(f"h{h}" for h in range(result.share.shape[2]))]
        for layer in range(result.share.shape[1] - 1, -1, -1):
            lines.append(f"layer {layer}\t" + "\t".join(map(_cell, result.share[k, layer])))
    lines += ["", "kind\tlayer\thead\tshare\tnats"]
    for kind, layer, head in result.order():
        k = KINDS.index(kind)
        lines.append(
            f"{kind}\t{layer}\t{head}\t{_cell(result.share[k, layer, head], 3)}\t{result.nats[k, layer, head]:+.3f}"
        )
    return "\n".join(lines) + "\n"


def _sender(text: str) -> Node:
    """KIND:LAYER:HEAD ("cross:1:1") as (kind, layer, head), or ffn:SIDE:LAYER ("ffn:decoder:1") as a
    feed-forward layer; anything else one line saying what is expected."""
    parts = text.split(":")
    if len(parts) == 3 and parts[0] == "ffn" and parts[1] in SIDES and parts[2].isdigit():
        return "ffn", parts[1], int(parts[2])
    if len(parts) != 3 or parts[0] not in KINDS or not all(p.isdigit() for p in parts[1:]):
        raise AttnlabError(
            f"--sender is KIND:LAYER:HEAD with KIND one of {', '.join(KINDS)} (e.g. cross:1:1), or ffn:SIDE:LAYER "
            f"(e.g. ffn:decoder:1); got {text!r}"
        )
    return parts[0], int(parts[1]), int(parts[2])


def _circuit_table(circuit: Circuit) -> str:
    """The two log-probabilities, then one line per path, the largest share first."""
    total = circuit.total
    lines = [f"log P(target): clean {total.clean:.3f}, corrupted {total.corrupted:.3f}"]
    lines.append(
        f"paths of at least {circuit.threshold:g} of the difference ({total.direction}), from the "
        f"{len(circuit.senders)} heads that move most and every part they reach; to output: a part's direct share"
    )
    lines += ["", "from\tto\tshare"] + [f"{node_name(a)}\t{node_name(b)}\t{share:.3f}" for a, b, share in circuit.edges]
    return "\n".join(lines) + "\n"


def _path_answer(paths: PathPatching) -> dict[str, object]:
    """Each head's total, direct and indirect share, and the sender's split, for JSON."""
    heads = []
    for row, direct, indirect in zip(paths.total.rows(), paths.direct.rows(), paths.indirect.rows(), strict=True):
        heads.append(
            {**{k: row[k] for k in ("kind", "layer", "head")}, "total": row["share"], "direct": direct["share"]}
            | {"indirect": indirect["share"]}
        )
    answer: dict[str, object] = {"heads": heads, "sender": list(paths.sender) if paths.sender else None}
    if paths.sender is not None:
        answer |= {"sender_total": paths.sender_total, "sender_direct": paths.sender_direct, "rest": paths.rest}
        answer |= {"through": [[node_name(node), share] for node, share in paths.through()]}
    return answer


def _path_tables(paths: PathPatching) -> str:
    """The log-probabilities, the direct and the indirect grid (top layer first), the heads by
    total share with their split, and the sender's receivers."""
    total = paths.total
    lines = [f"log P(target): clean {total.clean:.3f}, corrupted {total.corrupted:.3f}"]
    lines.append(f"each head's share of the difference split by path ({total.direction}; 1 = all of it)")
    for part in ("direct", "indirect"):
        share = getattr(paths, part).share
        lines += [
            "",
            f"{part}: " + ("every other head and feed-forward layer frozen" if part == "direct" else "total - direct"),
        ]
        for k, kind in enumerate(KINDS):
            lines.append(f"{kind}\t" + "\t".join(f"h{h}" for h in range(share.shape[2])))
            for layer in range(share.shape[1] - 1, -1, -1):
                lines.append(f"layer {layer}\t" + "\t".join(map(_cell, share[k, layer])))
    lines += ["", "kind\tlayer\thead\ttotal\tdirect\tindirect"]
    for kind, layer, head in total.order():
        at = (KINDS.index(kind), layer, head)
        cells = (_cell(getattr(paths, part).share[at], 3) for part in ("total", "direct", "indirect"))
        lines.append(f"{kind}\t{layer}\t{head}\t" + "\t".join(cells))
    if paths.sender is not None:
        split = f"total {paths.sender_total:.3f}, direct {paths.sender_direct:.3f}; through"
        lines += ["", f"{node_name(paths.sender)}: {split}"]
        lines += [f"  {node_name(node)}\t{share:.3f}" for node, share in paths.through()]
        lines.append(f"  rest\t{paths.rest:.3f}")
    return "\n".join(lines) + "\n"


def _how(result: HeadPatching | ResidualPatching | ResidualCorpus) -> str:
    """The direction, and that the shares are estimates where they are."""
    estimated = ", estimated from one gradient (attribution)" if result.method == "attribution" else ""
    return result.direction + estimated


def _cell(v: float, digits: int = 2) -> str:
    """A grid's cell: "-" where nothing was patched (NaN), and a share that rounds to zero as
    0.00, not -0.00 (a rounding error's sign, which reads as an effect)."""
    return "-" if v != v else f"{round(float(v), digits) + 0.0:.{digits}f}"


def _listed(grid: object) -> list[list[float | None]]:
    """A grid of shares for JSON: NaN (not patched) as None."""
    return [[None if v != v else float(v) for v in row] for row in grid]  # type: ignore[union-attr]


def _residual_tables(result: ResidualPatching) -> str:
    """The two grids of shares, top layer first, one column per piece."""
    lines = [f"log P(target): clean {result.clean:.3f}, corrupted {result.corrupted:.3f}"]
    lines.append(f"share of the difference moved by each layer's output at each position alone ({_how(result)})")
    sides = (
        ("encoder", result.encoder, result.source, ["embeddings"] + [f"layer {i}" for i in range(len(result.decoder))]),
        ("decoder", result.decoder, result.target, [f"layer {i}" for i in range(len(result.decoder))]),
    )
    for side, grid, pieces, rows in sides:
        if side == "encoder" and not result.encoder_patched:
            lines += ["", "encoder: not patched (the two sources have a different number of pieces)"]
            continue
        lines += ["", f"{side}\t" + "\t".join(pieces)]
        for name, row in reversed(list(zip(rows, grid, strict=True))):
            lines.append(f"{name}\t" + "\t".join(map(_cell, row)))
    return "\n".join(lines) + "\n"


def _spread_tables(spread: ResidualCorpus) -> str:
    """The encoder's mean shares by distance from the changed piece, top layer first, then the
    output pieces the difference lands on."""
    lines = [
        f"log P(target), the mean over {spread.pairs:,} pairs: clean {spread.clean:.3f}, corrupted {spread.corrupted:.3f}"
    ]
    lines.append(
        f"mean share of the difference moved by each encoder layer's output, by distance from the changed piece ({_how(spread)})"
    )
    lines += ["", "encoder\t" + "\t".join(f"{o:+d}" for o in spread.offsets)]
    rows = ["embeddings"] + [f"layer {i}" for i in range(len(spread.encoder) - 1)]
    for name, row in reversed(list(zip(rows, spread.encoder, strict=True))):
        lines.append(f"{name}\t" + "\t".join(_cell(v, 3) for v in row))
    lines += ["", f"output pieces taking more than {LANDS:.0%} of the difference (top decoder layer)\tpairs"]
    lines += [f"{piece}\t{count}" for piece, count in spread.landed[:20]]
    return "\n".join(lines) + "\n"
