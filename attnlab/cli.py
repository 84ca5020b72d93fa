"""`attnlab COMMAND ...`: each command lives in the module of its concept, as `cli(argv)`.

This file only dispatches and turns `AttnlabError` into a one-line message and exit status 2,
so that a user never sees a traceback for bad input.
"""

from __future__ import annotations

import importlib
import sys

from attnlab.errors import AttnlabError

COMMANDS: dict[str, tuple[str, str]] = {
    "presets": ("attnlab.presets", "list the model presets (Table 3) with parameter counts"),
    "flops": ("attnlab.flops", "model FLOPs per token and the paper's Table 2 cost estimate"),
    "data": ("attnlab.data", "prepare or download corpora (data prepare|download CORPUS)"),
    "train": ("attnlab.train", "train a model (the paper's regime; resumes a run directory)"),
    "average": ("attnlab.checkpoint", "average the last K checkpoints of a run"),
    "translate": ("attnlab.api", "translate lines from a file or stdin"),
    "parse": ("attnlab.api", "parse sentences into Penn-Treebank trees"),
    "record": ("attnlab.api", "record attention traces of sentences to disk"),
    "evaluate": ("attnlab.evaluate", "sacreBLEU/chrF, or bracket F1 for parsing"),
    "explore": ("attnlab.explore", "open the explorer web app"),
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
