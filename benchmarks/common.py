"""Helpers the benchmark scripts share: where they ran, how they time, which data they read.

Every script prints a one-line description of the machine (CPU model, threads, torch version and
the load average at the start), because these machines are shared: a figure measured while
another job was running must say so, and only ratios against a peer measured in the same run
are comparable across runs.

The scripts import these helpers as `from common import ...`: running a script as
`python benchmarks/NAME.py` puts this directory first on sys.path, so no package is needed.
"""

from __future__ import annotations

import argparse
import atexit
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from attnlab.model.cpu import BF16_EMULATED, bf16_products
from attnlab.model.flops import measure_matmul_peak
from attnlab.model.memory import keep_freed_memory


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (platform.processor() is empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: torch.device, clock_kind: str = "wall") -> str:
    """One line: hardware, threads, torch version, the clock read, and the load average when the
    run started."""
    if device.type == "cuda":
        hardware = f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    else:
        hardware = f"{cpu_model()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{hardware}; torch {torch.__version__}; {clock_kind} clock; load average {load} at start"


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock interval covers the work it claims to."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def add_clock_argument(parser: argparse.ArgumentParser) -> None:
    """`--clock wall|cpu`, the same in every benchmark (see `clock`)."""
    parser.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "cpu"],
        help="wall, or cpu: CPU seconds, robust to other jobs (1 thread)",
    )


def clock(kind: str) -> Callable[[], float]:
    """The timer a benchmark reads: "wall" (time.perf_counter), or "cpu" (time.process_time).

    The CPU seconds of this process are what a shared machine does not inflate: another job on
    the same cores delays the wall clock but not the work done here. They equal the wall time of
    an idle machine only when the process computes on one thread (a multi-threaded process sums
    its threads, spin-waits included), so "cpu" insists on `OMP_NUM_THREADS=1`.
    """
    if kind == "wall":
        return time.perf_counter
    if torch.get_num_threads() != 1:
        raise SystemExit("--clock cpu measures one thread: run with OMP_NUM_THREADS=1")
    return time.process_time


def matmul_peak(dtype: torch.dtype, device: torch.device, now: Callable[[], float], size: int = 2048) -> float:
    """FLOP/s of the fastest of a second's square matrix multiplies: the MFU denominator, as
    `attnlab.model.flops.measure_matmul_peak` measures it for the trainer. The fastest, not their
    mean: a peak is what the machine can do, and on a shared machine a burst from a neighbour
    during that second once made the mean 265 GFLOP/s in bf16 while the same run's base training
    step sustained 293 of model FLOPs, an MFU of 110% (training round eleven). The benchmark's own
    clock is read, so that on a busy machine the "cpu" clock depresses neither the peak nor the
    figures divided by it."""
    return measure_matmul_peak(dtype, size, 1.0, device, now)


def without_emulated_bf16(dtypes: list[str], device: torch.device, keep: bool = False) -> list[str]:
    """`dtypes` less bf16 on a CPU that only emulates it (`attnlab.model.cpu.bf16_products`: a
    2,048² bf16 product took 49 s there), said on stderr; `keep` (a smoke run: a few tiny steps
    that check the bf16 code runs) keeps it."""
    if keep or device.type != "cpu" or bf16_products() or "bf16" not in dtypes:
        return dtypes
    print(f"# bf16 left out: {BF16_EMULATED} (asking for bf16 measures it anyway)", file=sys.stderr)
    return [dtype for dtype in dtypes if dtype != "bf16"]


def median(values: list[float]) -> float:
    """Median, the statistic every script reports: one slow outlier (another job's burst) does
    not move it, unlike the mean."""
    return statistics.median(values)


def prepared_multi30k(data: str | None, vocab_size: int) -> Path:
    """A prepared Multi30k EN-DE directory: `data` if given, else one prepared now into a
    temporary directory (about two seconds; the corpus is found as `attnlab data prepare` finds
    it: $ATTNLAB_DATA or ../shared/data)."""
    if data:
        return Path(data)
    from attnlab.data.prepared import prepare

    out = Path(tempfile.mkdtemp(prefix="attnlab-bench-m30k-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    prepare("multi30k", out, vocab_size=vocab_size, echo=lambda _: None)
    return out


def inductor_cache() -> Path:
    """Where Inductor writes the code it generates ($TORCHINDUCTOR_CACHE_DIR, else its default)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # lazy: only a profile reads it

        return Path(cache_dir())
    except ImportError:  # an older torch: its default, /tmp/torchinductor_USER
        user = os.environ.get("USER") or str(os.getuid())
        return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir()) / f"torchinductor_{user}")


def kernel_sources(events: Iterable, key: str, out: Path, count: int = 6, cache: Path | None = None) -> list[str]:
    """Copy the generated source of the `count` compiled kernels that took the most time (`events`:
    a profile's `key_averages()`, ranked by their `key` time) from Inductor's cache into `out`, and
    return their names. Why a fused kernel is slow is read in its source (its block sizes, what it
    loads), and a rented GPU is gone before anyone looks: the profile names the kernels
    (triton_per_fused_..., or graph_0_cpp_fused_... on a CPU with `cpp.enable_kernel_profile`), and
    the cache's Python modules hold their code (Triton functions, or C++ in a string, with the
    graph that launches them). A kernel in several modules (variants, earlier runs) gets the
    newest three."""
    ranked = sorted(events, key=lambda event: -(getattr(event, key, 0) or 0))
    names = [re.sub(r"^graph_\d+_", "", event.key) for event in ranked]
    names = list(dict.fromkeys(n for n in names if n.startswith(("triton_", "cpp_fused_"))))[:count]
    if not names:
        return []
    modules = sorted((cache or inductor_cache()).rglob("*.py"), key=lambda path: -path.stat().st_mtime)
    texts = {path: path.read_text(errors="replace") for path in modules}
    out.mkdir(parents=True, exist_ok=True)
    for rank, name in enumerate(names):
        holding = [path for path, text in texts.items() if re.search(rf"\b{re.escape(name)}\b", text)][:3]
        for copy, path in enumerate(holding):
            shutil.copyfile(path, out / f"{rank:02d}_{name[:80]}_{copy}.py")
    return names


class Worker:
    """A system in a process of its own, called like the others; it times itself.

    A user runs one system per process, and two systems sharing one process slow each other in
    ways that belong to neither. Decoding: translating with CTranslate2 in this process left
    PyTorch's products slower for the rest of it (fp32 `F.linear` 190 -> 135 GFLOP/s, attnlab's
    bf16 decoding of test2016 4.2 -> 5.5 s), and attnlab's three precisions in one process kept
    page-faulting 13-29k pages a round (5.7-6.5 s) where alone each settles at none (5.2-5.3 s;
    decoding round ten). Training: base bf16 alternated with `nn.Transformer` in one process took
    2.45-2.79 s a step against 2.30-2.50 s alone, the peer 3.61-3.82 s against 3.37-3.71 s, with
    no page faults (training round sixteen). A child inherits nothing of this process's state: it
    forks from a server process that has only imported `PRELOAD` (Python's "forkserver"; a
    spawned child took 1.2-1.7 s to import torch and attnlab again, a forked one 0.01 s, and a
    decoding run builds about twenty systems). So `make(*args)`, a module-level function, builds
    the system there (the thread count and `keep_freed_memory` set first, as attnlab's commands
    set them) and returns its call. The constructor waits until the child has built it, so that
    one system's building (a compile, warm-up steps) never overlaps another's timing. The child
    times each call on the parent's clock kind, so `--clock cpu` counts the child's CPU seconds.
    """

    PRELOAD = ["torch", "attnlab", "attnlab.decode", "attnlab.train"]

    def __init__(self, make: Callable[..., Callable[[], object]], *args: object, clock_kind: str = "wall") -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(self.PRELOAD)  # read when the server starts, at the first Worker
        self.connection, child = context.Pipe()
        setup = (torch.get_num_threads(), clock_kind)
        self.process = context.Process(target=_serve, args=(child, setup, make, args), daemon=True)
        self.process.start()
        self._answer()  # built

    def timed(self) -> tuple[object, float]:
        """Run the system once: what its call returned and the seconds it took."""
        self.connection.send("run")
        return self._answer()

    def __call__(self) -> object:
        return self.timed()[0]

    def close(self) -> None:
        """End the child (it stops when its end of the pipe closes) and wait for it."""
        self.connection.close()
        self.process.join(timeout=60)

    def _answer(self) -> tuple[object, float]:
        try:
            ok, value = self.connection.recv()
        except EOFError:
            raise SystemExit(f"a benchmark process ended with exit code {self.process.exitcode}") from None
        if not ok:
            raise SystemExit(value)
        return value


def _serve(
    connection: Connection, setup: tuple[int, str], make: Callable[..., Callable[[], object]], args: tuple[object, ...]
) -> None:
    """The child's loop: build the system, say so, then one timed call per "run" until the parent goes."""
    threads, clock_kind = setup
    torch.set_num_threads(threads)
    keep_freed_memory()
    now = clock(clock_kind)
    try:
        run = make(*args)
    except SystemExit as error:
        connection.send((False, str(error)))
        return
    connection.send((True, None))
    while _next(connection) == "run":
        start = now()
        try:
            value = run()
        except SystemExit as error:
            connection.send((False, str(error)))
            return
        connection.send((True, (value, now() - start)))


def _next(connection: Connection) -> str:
    """The parent's next request; "stop" once it has gone (its end of the pipe closed)."""
    try:
        return connection.recv()
    except EOFError:
        return "stop"
