"""What the served script checks before it builds a page: the app's own options (`panel serve
apps/explorer.py --args ...`) and how the server was started. When either is wrong, every
session gets a page that says why, and the server's log one line, instead of an explorer that
runs as it was not asked to.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

import panel as pn

from attnlab.app.explorer.language import session_language
from attnlab.app.explorer.store import TIME_LIMIT
from attnlab.app.i18n import DEFAULT, text
from attnlab.app.serve import check_directories_named, check_time_limit
from attnlab.errors import AttnlabError
from attnlab.model.cpu import check_threads


class _Refusing(argparse.ArgumentParser):
    """argparse's own messages, raised instead of printed with the usage and exited on: under
    `panel serve` that exit stopped the whole server."""

    def error(self, message: str) -> NoReturn:
        raise AttnlabError(message)


def arguments(argv: list[str]) -> argparse.Namespace:
    """The app's own options; anything else is refused, not ignored: a misspelt `--checkpoint`
    once served the bundled model in its place, and `--threads abc` stopped the server.
    `attnlab explore` checks its flags before Panel starts; this is for `panel serve` by hand."""
    parser = _Refusing(allow_abbrev=False, prog="explorer.py", add_help=False)  # -h would exit the server too
    parser.add_argument("--checkpoint", action="append", default=[])
    parser.add_argument("--checkpoint-root", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    args = parser.parse_args(argv)
    check_threads(args.threads)  # (the server died of 100000 at its first translation)
    check_time_limit(args.time_limit)  # (-5 and NaN were clamped to 0: no limit)
    check_directories_named(args.checkpoint, args.checkpoint_root)  # ("": the working directory as a root)
    return args


def refusal(argv: list[str] | None = None) -> pn.pane.Alert | None:
    """The page shown instead of the explorer, or None when it can serve.

    A server started with `--num-threads` (or $PANEL_NUM_THREADS): Panel then hands each of a
    session's events to a thread pool on its own, so a click can run before the text typed just
    before it reaches the session: measured with `benchmarks/explorer_load.py` against such a
    server, 28 of one session's 84 clicks showed the previous sentence's translation. Recording
    itself is per thread (`attnlab.model.hooks`); the order of a session's events is what threads
    break. Or options after `--args` that the app does not take (`arguments`)."""
    bad: AttnlabError | None = None
    try:
        arguments(sys.argv[1:] if argv is None else argv)
    except AttnlabError as error:
        bad = error
    if bad is None and not pn.config.nthreads:
        return None
    pn.extension(notifications=False)
    lang = session_language()
    if bad is None:
        log, shown = text("error.threaded_server", DEFAULT), text("error.threaded_server", lang)
    else:  # as code on the page: Markdown made "model.py" a link (.py is Paraguay's domain)
        log, shown = (
            text("error.bad_arguments", DEFAULT, error=bad),
            text("error.bad_arguments", lang, error=f"`{bad}`"),
        )
    print(f"explorer: refusing to serve: {log}", file=sys.stderr)
    return pn.pane.Alert(shown, alert_type="danger", css_classes=["attn-refusal"])
