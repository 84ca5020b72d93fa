"""`attnlab explore [--checkpoint DIR ...] [--checkpoint-root DIR ...] [--port N]`: serve the
explorer (`apps/explorer.py`, run by `panel serve`) on this machine, offline.

Whoever reaches the port can open only what is under the checkpoint roots (the bundled
`checkpoints/`, each `--checkpoint`, each `--checkpoint-root`; `attnlab.app.roots`), and send
messages of at most `MAX_MESSAGE_BYTES` (bokeh's default is 20 MiB; the explorer reads 20,000
characters of a text anyway).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import socket
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from attnlab.app.checkpoints import ROOT, find_checkpoints
from attnlab.errors import ArgumentParser, AttnlabError, CheckpointError, ConfigError
from attnlab.model.checkpoint import user_path
from attnlab.model.cpu import check_threads
from attnlab.model.marian import is_marian

APP = ROOT / "apps" / "explorer.py"
HARDEN = ROOT / "apps" / "harden.py"  # run by `panel serve --setup`: `close_component_route`
MAX_MESSAGE_BYTES = 4 * 2**20  # a 200,000-character text in UTF-8 JSON is at most ~2.4 MiB


def close_component_route() -> None:
    """Let Panel's `/components/<module>/<class>/<attribute>/<path>` route read modules the
    server has imported only. The route serves a component's resource files and, to find the
    component, imported whatever module a request named (upstream Panel): any visitor could make
    the server import, and so run the top-level code of, any installed package
    (`/components/antigravity/...` opened a web browser on the server). The components a page
    uses are imported before it is served, so refusing the others (404) loses nothing.
    `attnlab explore` runs this before the server starts (`apps/harden.py`, `panel serve
    --setup`); the explorer app runs it too, for a server started without it."""
    from panel.io.server import ComponentResourceHandler  # lazy: panel, for the server only
    from tornado.web import HTTPError

    parse = ComponentResourceHandler.parse_url_path
    if getattr(parse, "imported_only", False):
        return

    def parse_url_path(self: ComponentResourceHandler, path: str) -> str:
        if path.split("/", 1)[0] not in sys.modules:
            raise HTTPError(404, "Module not found")
        return parse(self, path)

    parse_url_path.imported_only = True  # type: ignore[attr-defined]
    ComponentResourceHandler.parse_url_path = parse_url_path  # type: ignore[method-assign]


class _OneLineRefusal(logging.Filter):
    """Bokeh's own log record of a browser message it could not apply, as one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("error handling message") and record.args:
            error = record.args[-1] if isinstance(record.args, tuple) else record.args
            record.msg, record.args = "refused a browser's message: %s", (repr(error)[:200],)
            record.exc_info, record.exc_text = None, None
        return True


def one_line_refusals() -> None:
    """Log a browser message that Bokeh's server refuses before any of the app's code runs (a
    crafted request sending None for a text box's value, a string for a check box) in one line.
    Bokeh logged the whole message (up to `MAX_MESSAGE_BYTES`) and a traceback for each; the
    session goes on either way (Bokeh answers the browser with an error). Run where
    `close_component_route` runs."""
    logger = logging.getLogger("bokeh.server.protocol_handler")
    if not any(isinstance(f, _OneLineRefusal) for f in logger.filters):
        logger.addFilter(_OneLineRefusal())


class _ClosedPage(logging.Filter):
    """A page the browser had closed, in one line: asyncio's record of a message the server wrote
    to it; Tornado's of a page closed before Bokeh had opened its session (Bokeh's `on_close`
    fails an assertion on the missing session: a tab closed while the server was busy decoding
    another's sentence); and Panel's "Failed sending message", once a burst (one a message, forty
    for a page closed during a long decode)."""

    def __init__(self) -> None:
        super().__init__()
        self._last_failed_send = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        from tornado.iostream import StreamClosedError
        from tornado.websocket import WebSocketClosedError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, WebSocketClosedError | StreamClosedError) or _no_session_yet(error):
            record.msg, record.args = "a page was closed while the explorer updated it (%s)", (type(error).__name__,)
            record.exc_info, record.exc_text = None, None
        elif record.getMessage() == "Failed sending message as connection was closed":
            last, self._last_failed_send = self._last_failed_send, record.created
            return record.created - last > 5.0
        return True


def _no_session_yet(error: BaseException | None) -> bool:
    """Bokeh's `ServerConnection.session` asserting that the connection has its session."""
    if not isinstance(error, AssertionError) or error.__traceback__ is None:
        return False
    *_, where = traceback.extract_tb(error.__traceback__)
    return Path(where.filename).match("bokeh/server/connection.py") and where.name == "session"


def one_line_closed_pages() -> None:
    """Log a page closed while the server was writing to it in one line: a visitor closing a tab
    during an update is ordinary, and each was a traceback of Tornado's or a burst of warnings.
    Run where `close_component_route` runs."""
    for name in ("asyncio", "tornado.application", "panel.io.document"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ClosedPage) for f in logger.filters):
            logger.addFilter(_ClosedPage())


def free_port(address: str) -> int:
    """A TCP port free on `address` now (the kernel's choice for port 0)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
            probe.bind((address, 0))
            return probe.getsockname()[1]
    except OSError as error:
        raise ConfigError(f"--address {address}: cannot listen there ({error.strerror or error})") from None


def check_listen(address: str, port: int) -> None:
    """Bind `address`:`port` as the server will (tornado's `bind_sockets`: every address the name
    resolves to, SO_REUSEADDR) and let go at once; one line when it cannot. Panel said "ERROR:
    ERROR: -2" for an address that names no host, and both that and a port in use came after the
    line that gave the explorer's address, as if it were served there."""
    from tornado.netutil import bind_sockets  # lazy: tornado comes with panel, for the server only

    try:
        for bound in bind_sockets(port, address):
            bound.close()
    except OSError as error:
        raise ConfigError(
            f"--address {address} --port {port}: cannot listen there ({error.strerror or error})"
        ) from None


def url_host(address: str) -> str:
    """`address` as a URL names its host: an IPv6 address in brackets (`--address ::1` printed
    `http://::1:5006/explorer`, which no browser opens)."""
    return f"[{address}]" if ":" in address else address


def is_model_directory(path: Path) -> bool:
    """What `attnlab.load` opens: a checkpoint, a run directory (before its first checkpoint too:
    its log), or a Hugging Face Marian directory."""
    return (path / "manifest.json").is_file() or (path / "checkpoints").is_dir() or is_marian(path)


def check_directories_named(checkpoints: Sequence[str], roots: Sequence[str]) -> None:
    """Refuse an empty `--checkpoint` or `--checkpoint-root` (a shell variable never set, as in
    `--checkpoint "$CKPT"`), as `translate --checkpoint ''` is refused: "" is the working
    directory, which the server listed as a checkpoint and made a root every visitor could open.
    And a `--checkpoint-root` that is no directory: the app served without it, without a word."""
    for flag, paths in (("--checkpoint", checkpoints), ("--checkpoint-root", roots)):
        if any(not path.strip() for path in paths):
            raise CheckpointError(f"{flag}: expected a directory's path, got an empty one")
    for path in roots:
        if not user_path(path).is_dir():  # (a file was "no such directory")
            said = "a file, not a directory" if user_path(path).exists() else "no such directory"
            raise CheckpointError(f"--checkpoint-root {path}: {said}")


def check_time_limit(seconds: float) -> float:
    """`--time-limit` as `attnlab explore` and the served app (`panel serve ... --args`) take it:
    finite seconds ≥ 0 (0: no limit), else one line. The app once clamped -5 and NaN to 0, which
    is no limit at all, so a server started by hand let one request hold it for good."""
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"--time-limit must be a number of seconds ≥ 0 (0: no limit), got {seconds:g}")
    return seconds


def serve_command(
    checkpoints: Sequence[str],
    port: int,
    address: str,
    show: bool = False,
    threads: int = 1,
    roots: Sequence[str] = (),
    time_limit: float | None = None,
) -> list[str]:
    """The `panel serve` command line that runs the explorer."""
    if not APP.is_file():
        raise AttnlabError(f"the explorer app is missing ({APP}); attnlab explore runs from a source checkout")
    command = [sys.executable, "-m", "panel", "serve", str(APP), "--port", str(port), "--address", address]
    # Bokeh takes no IPv6 origin ("ERROR: ERROR: Invalid host value: ::1:5006", and the server never
    # started); none is needed: tornado lets a page's websocket from its own host and port through.
    origins = [f"localhost:{port}"] if ":" in address else [f"{address}:{port}", f"localhost:{port}"]
    for origin in origins:
        command += ["--allow-websocket-origin", origin]
    command += ["--websocket-max-message-size", str(MAX_MESSAGE_BYTES), "--setup", str(HARDEN)]
    if show:
        command.append("--show")
    command += ["--args", "--threads", str(threads)]
    if time_limit is not None:  # else the explorer's own (`store.TIME_LIMIT`)
        command += ["--time-limit", f"{time_limit:g}"]
    for path in checkpoints:
        command += ["--checkpoint", str(path)]
    for path in roots:
        command += ["--checkpoint-root", str(path)]
    return command


def cli(argv: list[str]) -> int:
    """`attnlab explore [--checkpoint DIR ...] [--checkpoint-root DIR ...] [--port N]`: serve the explorer."""
    from attnlab.app.explorer.store import TIME_LIMIT  # lazy: imports panel, which `serve_command` needs not

    parser = ArgumentParser(
        allow_abbrev=False,
        prog="attnlab explore",
        description="Open the explorer: translate or parse, and look at every attention head (works offline).",
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        help="checkpoint or run directory (repeatable); the bundled ones are always listed",
    )
    parser.add_argument(
        "--checkpoint-root",
        action="append",
        default=[],
        help="a directory whose checkpoints visitors may open by path (repeatable); the bundled checkpoints/ "
        "and each --checkpoint are roots too, nothing else is, whatever --address",
    )
    parser.add_argument("--port", type=int, default=5006, help="TCP port, 1-65535 (0: any free one; default 5006)")
    parser.add_argument("--address", default="127.0.0.1", help="interface to listen on (default: this machine only)")
    parser.add_argument("--show", action="store_true", help="open a browser tab")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for decoding (default 1: fastest for one sentence on shared cores)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        help=f"seconds of decoding one request may take (default {TIME_LIMIT:g}; 0: no limit): the server decodes "
        "one request at a time, so a long text at a wide beam would hold up every visitor",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the panel serve command instead of running it")
    args = parser.parse_args(argv)
    if args.time_limit is not None:
        check_time_limit(args.time_limit)
    if not args.address.strip():  # ("$HOST" unset) panel: "ERROR: ERROR: Empty host value", after the address line
        raise ConfigError("--address: expected an interface's address (0.0.0.0: every one), got an empty one")
    if not 0 <= args.port <= 65535:  # panel said "ERROR: ERROR: " and exited 1
        raise ConfigError(f"--port must be from 0 (any free port) to 65535, got {args.port}")
    if args.port == 0:  # chosen here: panel's own choice is known only to its log, and the page's
        args.port = free_port(args.address)  # websocket origin (allowed as ADDRESS:PORT) would be ":0"
    check_threads(args.threads)  # (< 1 was taken as 1 without a word; 100000 crashed the server)
    check_directories_named(args.checkpoint, args.checkpoint_root)
    for path in args.checkpoint:  # (a damaged checkpoint is listed: the page says what is wrong with it)
        if not user_path(path).exists():
            raise CheckpointError(f"{path}: no such directory")
        if not user_path(path).is_dir():  # a file was listed as a checkpoint
            raise CheckpointError(f"{path} is a file; --checkpoint names a checkpoint or run directory")
        if not is_model_directory(user_path(path)):  # an empty or unrelated one was served, as a model
            raise CheckpointError(f"{path}: not an attnlab checkpoint, run directory or Marian model")
    if not args.checkpoint and not find_checkpoints():
        print(
            "attnlab explore: no bundled checkpoints yet; pass --checkpoint DIR or --checkpoint-root DIR",
            file=sys.stderr,
        )
    command = serve_command(
        args.checkpoint, args.port, args.address, args.show, args.threads, args.checkpoint_root, args.time_limit
    )
    if args.dry_run:
        print(shlex.join(command))
        return 0
    check_listen(args.address, args.port)
    print(f"attnlab explore: http://{url_host(args.address)}:{args.port}/explorer", file=sys.stderr)
    sys.stderr.flush()
    if os.name == "posix":  # become the server: Ctrl-C and kill reach it directly, no orphan left
        os.execv(command[0], command)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
