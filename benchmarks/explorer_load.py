"""The explorer under load: N concurrent sessions translating against one `attnlab explore` server.

Starts the server exactly as `attnlab explore` does (`attnlab.app.serve.serve_command`: `panel
serve apps/explorer.py`, one torch thread) on 127.0.0.1 with one checkpoint (default the bundled
`checkpoints/multi30k-en-de`), then, for each N, opens N sessions over the Bokeh protocol (the
document and websocket messages a browser exchanges, spoken by a small asyncio client, without a
browser's rendering cost on the measuring machine). Each session sends `DocumentReady` (the
explorer then opens the checkpoint and decodes its example, not timed), and from a common start
it repeatedly types one of the sentences below, clicks Translate and waits until the status line
reports the new run (decoding, recording, head statistics and every view of the open tab are
updated by then), for `--duration` seconds. Between a reply and its next click a session waits
a random "think" time, uniform in [0.5, 1.5] x `--think` (a person reads the output before
typing the next sentence); `--think 0` is a closed loop that measures capacity.

Reported per N: requests, errors (no reply within `--timeout`, a refused input, a lost
connection, or an output that is not the sentence's own translation -- which would mean sessions
see each other's results), p50 / p95 / max latency from click to updated status, throughput,
server (and client) CPU seconds per request, and the server's RSS (peak while the N sessions
ran, and at the end).
The server decodes one request at a time (sessions share one model, read only, and recording
hooks are per model), so under load latency is queueing: about N x the one-session time at
`--think 0`. There is no peer to divide by; the reference is the same server with one session
(`slowdown` = p50 at N / p50 at N=1).

    .venv/bin/python benchmarks/explorer_load.py --sessions 1,5,20 --duration 60 --think 5

The load average is printed at the start and the end of each N: these machines are shared.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import panel  # noqa: F401  (registers Panel's bokeh models, so the client can read the explorer's document)
import psutil
import torch
from bokeh.client.util import websocket_url_for_server_url
from bokeh.client.websocket import WebSocketClientConnectionWrapper
from bokeh.document import Document
from bokeh.events import ButtonClick, DocumentReady
from bokeh.protocol import Protocol
from bokeh.protocol.receiver import Receiver
from bokeh.util.token import generate_jwt_token, generate_session_id
from common import machine
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

import attnlab.app.explorer.keys  # noqa: F401  (registers the arrow keys' data model, which the page holds)
from attnlab.app.checkpoints import BUNDLED, ROOT
from attnlab.app.serve import free_port, serve_command
from attnlab.decode.loading import load

# Written for this benchmark (not from a corpus): short scenes of the kind Multi30k describes.
SENTENCES = [
    "A man in a green jacket is riding a bicycle along the river.",
    "Two small dogs are running through the snow.",
    "A woman is reading a book on a bench in the park.",
    "Three children are playing football on the beach.",
    "An old man is selling fruit at a market stall.",
    "A girl in a yellow dress is jumping over a puddle.",
    "A group of people are waiting for the bus in the rain.",
    "A boy is climbing a tree in his garden.",
    "A cook is cutting vegetables in a busy kitchen.",
    "Two women are talking in front of a red door.",
    "A black cat is sleeping on a warm windowsill.",
    "A man with a guitar is singing on a street corner.",
    "The children are painting a picture together at school.",
    "A worker in an orange vest is fixing the road.",
    "A young couple is walking their dog at night.",
    "A little boy is eating an ice cream in the sun.",
]
STATUS_RUN = re.compile(r"data-run='(\d+)'")
OUTPUT = re.compile(r"<div class='attn-output'[^>]*>(.*?)</div>", re.S)  # (with the output's lang)


@dataclass
class Tally:
    """What the sessions of one N measured."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Session:
    """One explorer session, driven over the Bokeh protocol by a coroutine.

    `bokeh.client.pull_session` would do the same, but its connection awaits itself once per
    message received and overflows Python's stack after a few hundred messages (a minute of one
    session here); this client reads messages in a loop, and all sessions share one event loop."""

    def __init__(self, index: int, expected: dict[str, str], tally: Tally, args: Any) -> None:
        self.expected, self.tally, self.args = expected, tally, args
        self.rng = random.Random(index)
        self.order = SENTENCES[index % len(SENTENCES) :] + SENTENCES[: index % len(SENTENCES)]
        self.protocol = Protocol()
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.run = 0  # the last run number the status line showed
        self.changed = asyncio.Event()  # set by each new status line (or a lost connection)
        self.failed = ""  # a status line that says the input was not decoded, or a lost connection

    async def connect(self, url: str) -> None:
        """Open the websocket as BokehJS does, pull the document and send DocumentReady."""
        token = generate_jwt_token(generate_session_id())
        self.raw = await websocket_connect(
            HTTPRequest(websocket_url_for_server_url(url)), subprotocols=["bokeh", token], max_message_size=2**26
        )
        self.socket = WebSocketClientConnectionWrapper(self.raw)  # what bokeh's Message.send writes to
        self.receiver = Receiver(self.protocol)
        if (await self._read()).msgtype != "ACK":
            raise ConnectionError("no ACK from the server")
        await self.protocol.create("PULL-DOC-REQ").send(self.socket)
        reply = await self._read()
        while reply.msgtype != "PULL-DOC-REPLY":
            reply = await self._read()
        self.doc = Document()
        reply.push_to_document(self.doc)
        models = {cls: m for m in self.doc.models for cls in (getattr(m, "css_classes", None) or [])}
        self.status, self.go = models["attn-status"], models["attn-go"]
        self.source, self.output = models["attn-source"], models["attn-output-pane"]
        self.status.on_change("text", self._on_status)
        self.doc.callbacks.on_change_dispatch_to(self)  # our own changes and events go to the server
        self.tasks = [asyncio.create_task(self._reader()), asyncio.create_task(self._writer())]
        self.doc.callbacks.send_event(DocumentReady())  # what BokehJS sends once the page is drawn

    async def _read(self) -> Any:
        while True:
            fragment = await self.raw.read_message()
            if fragment is None:
                raise ConnectionError("the server closed the connection")
            message = await self.receiver.consume(fragment)
            if message is not None:
                return message

    async def _reader(self) -> None:
        try:
            while True:
                message = await self._read()
                if message.msgtype == "PATCH-DOC":
                    message.apply_to_document(self.doc, self)
        except ConnectionError:
            self.failed = "connection lost"
            self.changed.set()

    async def _writer(self) -> None:
        while True:
            await (await self.outbox.get()).send(self.socket)

    def _document_patched(self, event: Any) -> None:
        """Bokeh's hook for changes to the document: send ours (not the server's) in order."""
        if event.setter is not self:
            self.outbox.put_nowait(self.protocol.create("PATCH-DOC", [event]))

    def _on_status(self, _attr: str, _old: str, new: str) -> None:
        text = html.unescape(new)
        found = STATUS_RUN.search(text)
        if found is not None:
            self.run = int(found.group(1))
        elif "not decoded" in text:
            self.failed = "input not decoded"
        self.changed.set()

    async def wait_for_run(self, run: int, timeout: float) -> None:
        """Until the status line shows `run`; raises on a refusal, a lost connection, a timeout."""
        deadline = time.perf_counter() + timeout
        while self.run < run:
            if self.failed:
                raise RuntimeError(self.failed)
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.perf_counter()))

    async def drive(self, url: str, warm: asyncio.Queue[None], start: asyncio.Event) -> None:
        """Connect and warm up (not timed), then click from `start` for `--duration` seconds."""
        try:
            await self.connect(url)
            await self.wait_for_run(1, timeout=180)  # the checkpoint opened and its example decoded
        except (OSError, RuntimeError, TimeoutError) as error:
            self.tally.errors.append(f"session did not start: {type(error).__name__}: {error}")
            return
        finally:
            warm.put_nowait(None)
        await start.wait()
        deadline = time.perf_counter() + self.args.duration
        await asyncio.sleep(self.rng.uniform(0, self.args.think))  # sessions do not click in step
        count = 0
        while time.perf_counter() < deadline:
            sentence = self.order[count % len(self.order)]
            count += 1
            self.source.value = sentence  # as typing does: the text reaches the server before the click
            awaited, clicked = self.run + 1, time.perf_counter()
            self.doc.callbacks.send_event(ButtonClick(self.go))
            try:
                await self.wait_for_run(awaited, self.args.timeout)
            except (RuntimeError, TimeoutError) as error:
                self.tally.errors.append(str(error) or f"no reply within {self.args.timeout:g} s")
                break
            seconds = time.perf_counter() - clicked
            shown = OUTPUT.search(html.unescape(self.output.text or ""))
            got = html.unescape(shown.group(1)).strip() if shown else ""
            if got == self.expected[sentence]:
                self.tally.latencies.append(seconds)
            else:  # another session's result, or none
                self.tally.errors.append(f"wrong output for {sentence!r}: {got[:60]!r}")
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.args.think)
        self.close()

    def close(self) -> None:
        for task in getattr(self, "tasks", []):
            task.cancel()
        if hasattr(self, "raw"):
            self.raw.close()


class Server:
    """`attnlab explore`'s command on a free port of 127.0.0.1; its RSS sampled in the background."""

    def __init__(self, checkpoint: Path, log: Path) -> None:
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}/explorer"
        command = serve_command([str(checkpoint)], self.port, "127.0.0.1")
        self.log = log.open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        self.psutil = psutil.Process(self.process.pid)
        deadline = time.time() + 120
        while True:
            if self.process.poll() is not None or time.time() > deadline:
                self.stop()
                raise SystemExit(f"the explorer server did not start; see {log}")
            try:
                urllib.request.urlopen(self.url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.3)
        self.peak = 0.0
        self._sampling = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def rss_mb(self) -> float:
        processes = [self.psutil, *self.psutil.children(recursive=True)]
        return sum(p.memory_info().rss for p in processes) / 2**20

    def cpu_seconds(self) -> float:
        times = self.psutil.cpu_times()
        return times.user + times.system

    def _sample(self) -> None:
        while self.process.poll() is None:
            try:
                self.peak = max(self.peak, self.rss_mb())
            except psutil.Error:
                return
            time.sleep(0.25)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation, as numpy's default."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def measure(server: Server, sessions: int, expected: dict[str, str], args: Any) -> dict[str, Any]:
    """N sessions for `args.duration` seconds; the figures of one row."""
    return asyncio.run(_measure(server, sessions, expected, args))


async def _measure(server: Server, sessions: int, expected: dict[str, str], args: Any) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    tally, start, warm = Tally(), asyncio.Event(), asyncio.Queue()
    server.peak = server.rss_mb()
    running = [Session(i, expected, tally, args) for i in range(sessions)]
    drivers = [asyncio.create_task(s.drive(server.url, warm, start)) for s in running]
    for _ in running:
        await warm.get()
    cpu_before, client_before, started = server.cpu_seconds(), time.process_time(), time.perf_counter()
    start.set()
    await asyncio.gather(*drivers)
    wall = time.perf_counter() - started
    latencies = tally.latencies
    end_rss = server.rss_mb()
    server.peak = max(server.peak, end_rss)  # sampled every 0.25 s: the last reading counts too
    requests = len(latencies) + len(tally.errors)
    return {
        "sessions": sessions,
        "duration_s": args.duration,
        "think_s": args.think,
        "requests": requests,
        "errors": len(tally.errors),
        "error_examples": sorted(set(tally.errors))[:3],
        "p50_s": round(percentile(latencies, 0.5), 3),
        "p95_s": round(percentile(latencies, 0.95), 3),
        "max_s": round(max(latencies, default=float("nan")), 3),
        "mean_s": round(statistics.fmean(latencies), 3) if latencies else float("nan"),
        "requests_per_s": round(len(latencies) / wall, 2),
        "server_cpu_s_per_request": round((server.cpu_seconds() - cpu_before) / max(1, len(latencies)), 3),
        "client_cpu_s_per_request": round((time.process_time() - client_before) / max(1, len(latencies)), 3),
        "server_rss_mb_peak": round(server.peak, 1),
        "server_rss_mb_end": round(end_rss, 1),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,5,20", help="comma-separated session counts, run in turn")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of clicking per session count")
    parser.add_argument("--think", type=float, default=5.0, help="mean seconds between a reply and the next click")
    parser.add_argument("--timeout", type=float, default=60.0, help="a reply later than this is an error")
    parser.add_argument("--checkpoint", type=Path, default=BUNDLED / "multi30k-en-de")
    parser.add_argument("--log", type=Path, default=ROOT / "test-artifacts" / "explorer-load-server.log")
    parser.add_argument("--json", action="store_true", help="one JSON object per session count")
    parser.add_argument("--smoke", action="store_true", help="1 and 2 sessions for 3 s: checks the script runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sessions, args.duration, args.think, args.timeout = "1,2", 3.0, 0.3, 60.0
    counts = [int(n) for n in args.sessions.split(",")]
    torch.set_num_threads(1)  # as the server decodes: the expected outputs are computed the same way
    print(f"# {machine(torch.device('cpu'))}", file=sys.stderr)
    model = load(args.checkpoint)
    expected = {s: model.translate(s, beam=4, alpha=0.6).text.strip() for s in SENTENCES}
    del model
    args.log.parent.mkdir(parents=True, exist_ok=True)
    server = Server(args.checkpoint, args.log)
    rows = []
    try:
        print(f"# server RSS before any session: {server.rss_mb():.0f} MiB", file=sys.stderr)
        for sessions in counts:
            row = measure(server, sessions, expected, args)
            if rows and rows[0]["sessions"] == 1 and rows[0]["p50_s"] > 0:
                row["slowdown"] = round(row["p50_s"] / rows[0]["p50_s"], 2)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(
                    f"N={sessions:>3}  requests {row['requests']:>4}  errors {row['errors']}  "
                    f"p50 {row['p50_s']:.2f} s  p95 {row['p95_s']:.2f} s  max {row['max_s']:.2f} s  "
                    f"{row['requests_per_s']:.2f} req/s  server CPU {row['server_cpu_s_per_request']:.2f} s/req  "
                    f"RSS peak {row['server_rss_mb_peak']:.0f} MiB  load {row['load_average_before']:.2f}"
                    f"->{row['load_average_after']:.2f}",
                    flush=True,
                )
    finally:
        server.stop()
    return 1 if any(row["errors"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
