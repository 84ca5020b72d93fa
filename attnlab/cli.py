"""`attnlab COMMAND ...`: the command table. Each command lives in the room of its concept, as
`cli(argv)` (or `cli_COMMAND(argv)` where one module holds several); the module is imported only
when its command runs, so `attnlab --help` starts fast.

This file only dispatches and turns `AttnlabError` into a one-line message and exit status 2,
so that a user never sees a traceback for bad input.
"""

from __future__ import annotations

import importlib
import sys
import warnings

from attnlab.errors import AttnlabError

COMMANDS: dict[str, tuple[str, str]] = {
    "presets": ("attnlab.model.presets", "list the model presets (Table 3) with parameter counts"),
    "flops": ("attnlab.model.flops", "model FLOPs per token and the paper's Table 2 cost estimate"),
    "data": ("attnlab.data.commands", "prepare or download corpora (data prepare|download CORPUS)"),
    "train": ("attnlab.train.commands", "train a model (the paper's regime; resumes a run directory)"),
    "average": ("attnlab.train.average", "average the last K checkpoints of a run"),
    "translate": ("attnlab.decode.commands", "translate lines from a file or stdin"),
    "parse": ("attnlab.decode.commands", "parse sentences into Penn-Treebank trees"),
    "record": ("attnlab.decode.commands", "record attention traces of sentences to disk"),
    "align": ("attnlab.decode.commands", "word alignments (Pharaoh i-j) from teacher-forced cross-attention"),
    "evaluate": ("attnlab.decode.evaluate", "sacreBLEU/chrF, bracket F1 for parsing, or AER for alignment"),
    "heads": ("attnlab.decode.profile", "head statistics over a whole corpus (heads profile|query)"),
    "explore": ("attnlab.app.serve", "open the explorer web app"),
    "import": ("attnlab.decode.interop", "convert a Hugging Face Marian / OPUS-MT directory to a checkpoint"),
    "export": ("attnlab.decode.interop", "write a checkpoint as a CTranslate2 model (pip install attnlab[serve])"),
}


def usage() -> str:
    lines = ["usage: attnlab COMMAND [options]   (attnlab COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<10} {doc}" for name, (_, doc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"attnlab: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    with warnings.catch_warnings():  # a warning is a line for the user too, not a source location
        warnings.showwarning = lambda message, *_: print(f"attnlab {command}: warning: {message}", file=sys.stderr)
        return _run(command, rest)


def _run(command: str, rest: list[str]) -> int:
    module = importlib.import_module(COMMANDS[command][0])
    runner = getattr(module, "cli_" + command, None) or module.cli
    try:
        return int(runner(rest) or 0)
    except AttnlabError as error:
        print(f"attnlab {command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnlab {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
