"""Bad input to `flops`, `presets`, `record` and `translate` is one line on stderr and status 2,
found before anything is written: never a traceback, a division by zero, or traces of two runs
mixed in one directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"
needs_bundled = pytest.mark.skipif(
    not (BUNDLED / "manifest.json").is_file(), reason="the bundled checkpoints/multi30k-en-de is not here"
)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    named = (f"attnlab {argv[0]}", f"attnlab {' '.join(argv[:2])}")  # a nested command whole: `attnlab heads profile`
    assert error.split(": error: ")[0] in named and "\n" not in error, error
    return error


@pytest.mark.parametrize(
    "command", [["flops", "--json"], ["flops", "--preset", "big"]]
)  # (presets: the same path, slower)
def test_a_full_disk_on_stdout_is_one_line_and_a_closed_pipe_quiet(command: list[str]) -> None:
    """`attnlab presets > /dev/full` and `attnlab presets --json | head -1` were OSError and
    BrokenPipeError tracebacks, as was flops (every command's answer goes through the same stdout).
    A closed pipe is then no line at all and status 141, as `yes | head` leaves `yes`: the reader
    stopped on purpose, and a shell pipeline is not an error."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "attnlab", *command], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert (
        done.returncode == 2
        and done.stderr == f"attnlab {command[0]}: error: cannot write to stdout: No space left on device\n"
    )
    pipe = subprocess.Popen(
        [sys.executable, "-m", "attnlab", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pipe.stdout.close()  # as `head` does once it has read its lines (here before the first, so it does not race)
    assert pipe.wait(timeout=60) == 141
    assert pipe.stderr.read() == ""


def test_flops_needs_sentences_of_at_least_one_token(capsys: pytest.CaptureFixture[str]) -> None:
    """--tgt-len 0 was a ZeroDivisionError; a negative length gave negative FLOPs."""
    for flag, value in (("--tgt-len", "0"), ("--src-len", "-3"), ("--tgt-len", "-1")):
        assert "sentence lengths must be ≥ 1 token" in refused(capsys, ["flops", flag, value])
    assert main(["flops", "--tgt-len", "1", "--src-len", "1", "--json"]) == 0


def test_flops_refuses_sentences_longer_than_any_model_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """--src-len 10^20 printed float rounding noise as if exact (and with attn_window set, it
    would have counted keys for 10^20 positions, one at a time)."""
    for flag, value in (("--src-len", "100000000000000000000"), ("--tgt-len", "65537")):
        said = refused(capsys, ["flops", flag, value])
        assert "sentence lengths must be at most 65,536 tokens, the most positions a model takes (max_len)" in said
    assert main(["flops", "--src-len", "65536", "--tgt-len", "65536", "--json"]) == 0


def test_flops_counts_restricted_attention_and_quotes_table_2_only_for_the_papers_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """small-r1 counted as many FLOPs as small (the window was ignored, and the trainer's MFU of
    a restricted model with it); `base d_model=1024` printed base's Table 2 cost."""
    from attnlab.model.config import preset
    from attnlab.model.flops import forward_flops_per_target_token, keys_per_query

    assert keys_per_query(5, preset("tiny", attn_window=1)) == (2 + 3 + 3 + 3 + 2) / 5
    assert keys_per_query(5, preset("tiny", attn_window=4)) == keys_per_query(5, preset("tiny")) == 5
    small, r1 = preset("small"), preset("small-r1")
    h, d = small.n_heads, small.d_k + small.d_v
    saved = small.n_layers * 2 * h * d * (32 * (32 - keys_per_query(32, r1)) + 32 * (32 - keys_per_query(32, r1)))
    assert forward_flops_per_target_token(small) - forward_flops_per_target_token(r1) == pytest.approx(saved / 32)
    capsys.readouterr()
    assert main(["flops", "--preset", "base"]) == 0 and "Table 2" in capsys.readouterr().out
    assert main(["flops", "--preset", "base", "d_model=1024"]) == 0 and "Table 2" not in capsys.readouterr().out


def test_explore_refuses_a_port_that_cannot_be(capsys: pytest.CaptureFixture[str]) -> None:
    """--port 70000 reached panel, which said "ERROR: ERROR: " and exited 1."""
    for port in ("70000", "-1"):
        assert "--port must be from 0" in refused(capsys, ["explore", "--port", port, "--dry-run"])
    for threads in ("0", "-2"):  # (taken as 1 without a word)
        assert "--threads must be ≥ 1" in refused(capsys, ["explore", "--threads", threads, "--dry-run"])


def test_more_threads_than_cores_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`heads profile --threads 100000` died of a segmentation fault (libgomp: "Thread creation
    failed") after reading its inputs and loading the model; `explore --threads 100000` started
    a server that would die so at its first translation. More threads than cores only slow
    torch down: refused in one line, before the model, the server or the page."""
    from attnlab.app.explorer import refusal

    monkeypatch.setattr(torch, "set_num_threads", lambda n: pytest.fail(f"{n} threads were set"))
    too_many = str((os.cpu_count() or 1) + 1)
    said = f"--threads {too_many} is more than this machine's {os.cpu_count()} CPU cores"
    profile = ["heads", "profile", "--checkpoint", str(tmp_path / "none"), "--src", str(tmp_path / "none.en")]
    assert said in refused(capsys, [*profile, "--out", str(tmp_path / "p.parquet"), "--threads", too_many])
    assert said in refused(capsys, ["explore", "--threads", too_many, "--dry-run"])
    page = refusal(["--threads", too_many])  # `panel serve apps/explorer.py --args --threads N` by hand
    assert page is not None and said in page.object
    assert capsys.readouterr().err.count("\n") == 1


def test_explore_port_0_names_the_port_it_serves_on(capsys: pytest.CaptureFixture[str]) -> None:
    """--port 0 reached panel as 0: the address printed said ":0", and the page's websocket
    origin was allowed as 127.0.0.1:0, which no page has. A free port is chosen first."""
    assert main(["explore", "--port", "0", "--dry-run"]) == 0
    command = capsys.readouterr().out.split()
    port = command[command.index("--port") + 1]
    assert int(port) > 0 and f"127.0.0.1:{port}" in command and f"localhost:{port}" in command


def test_explore_refuses_an_address_or_port_it_cannot_listen_on_before_the_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port in use, or an address not on this machine, reached panel: after the line giving
    the explorer's address, as if it were served there, it said "Cannot start Bokeh server" (or
    "ERROR: ERROR: -2" for a name that is no host) and exited 1. One line now, before panel."""
    import socket

    monkeypatch.setattr(os, "execv", lambda *args: pytest.fail(f"the server was started: {args}"))
    monkeypatch.setattr(subprocess, "call", lambda *args: pytest.fail(f"the server was started: {args}"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        said = refused(capsys, ["explore", "--port", port])
    assert said.endswith(f"--address 127.0.0.1 --port {port}: cannot listen there (Address already in use)")
    said = refused(capsys, ["explore", "--address", "198.51.100.7"])  # TEST-NET-2: no machine's own
    assert "--address 198.51.100.7 --port 5006: cannot listen there" in said
    for empty in ("", " "):  # (`--address "$HOST"`, HOST unset) panel: "ERROR: ERROR: Empty host value"
        said = refused(capsys, ["explore", "--address", empty, "--dry-run"])
        assert said.endswith("--address: expected an interface's address (0.0.0.0: every one), got an empty one")


def test_explore_refuses_an_empty_checkpoint_or_root(capsys: pytest.CaptureFixture[str]) -> None:
    """`attnlab explore --checkpoint "$CKPT"` with CKPT never set listed the working directory as
    a checkpoint and made it a root: every visitor could open whatever lay below it (and
    `--checkpoint-root ""` did the same). Refused, as `translate --checkpoint ''` is, by
    `attnlab explore` and by the served app started by hand."""
    from attnlab.app.explorer import refusal

    for flag in ("--checkpoint", "--checkpoint-root"):
        said = refused(capsys, ["explore", flag, str(BUNDLED), flag, " ", "--dry-run"])
        assert said.endswith(f"{flag}: expected a directory's path, got an empty one")
        page = refusal([flag, ""])
        assert page is not None and f"{flag}: expected a directory's path, got an empty one" in page.object
        assert capsys.readouterr().err.count("\n") == 1
    missing = str(BUNDLED / "no-such-root")  # the served app went on without it, without a word
    assert refused(capsys, ["explore", "--checkpoint-root", missing, "--dry-run"]).endswith(
        f"--checkpoint-root {missing}: no such directory"
    )
    page = refusal(["--checkpoint-root", missing])
    assert page is not None and f"--checkpoint-root {missing}: no such directory" in page.object
    a_file = str(BUNDLED / "manifest.json")  # a file is there: it was "no such directory"
    capsys.readouterr()
    assert refused(capsys, ["explore", "--checkpoint-root", a_file, "--dry-run"]).endswith(
        f"--checkpoint-root {a_file}: a file, not a directory"
    )


def test_explore_refuses_a_directory_that_holds_no_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An empty or unrelated `--checkpoint` directory was served and listed as a model, where
    every other command refuses it; a run before its first checkpoint and a damaged checkpoint
    (the page says what is wrong with it) are still listed."""
    (tmp_path / "empty").mkdir()
    said = refused(capsys, ["explore", "--checkpoint", str(tmp_path / "empty"), "--dry-run"])
    assert said.endswith(f"{tmp_path / 'empty'}: not an attnlab checkpoint, run directory or Marian model")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "manifest.json").write_text("{")
    for listed in ("run", "damaged"):
        assert main(["explore", "--checkpoint", str(tmp_path / listed), "--dry-run"]) == 0
        assert f"--checkpoint {tmp_path / listed}" in capsys.readouterr().out


def test_explore_serves_on_an_ipv6_address(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`explore --address ::1` never served: bokeh takes no IPv6 websocket origin ("ERROR: ERROR:
    Invalid host value: ::1:5006", exit 1), and the address printed, http://::1:5006/explorer, was
    none a browser opens. No such origin is passed (a page's own host needs none) and the address
    is printed in brackets."""
    import shlex

    from bokeh.server.util import create_hosts_allowlist

    from attnlab.app import serve

    assert main(["explore", "--address", "::1", "--dry-run"]) == 0
    command = shlex.split(capsys.readouterr().out)
    origins = [command[i + 1] for i, word in enumerate(command) if word == "--allow-websocket-origin"]
    assert origins == ["localhost:5006"] and create_hosts_allowlist(origins, 5006)  # what the server parses
    started: list[list[str]] = []
    monkeypatch.setattr(serve, "check_listen", lambda address, port: None)  # (a machine may have no IPv6)
    monkeypatch.setattr(os, "execv", lambda path, command: started.append(command))
    monkeypatch.setattr(subprocess, "call", lambda command: started.append(command) or 0)
    main(["explore", "--address", "::1", "--port", "5007"])
    assert capsys.readouterr().err == "attnlab explore: http://[::1]:5007/explorer\n" and started


def test_explore_passes_its_time_limit_and_refuses_a_bad_one(capsys: pytest.CaptureFixture[str]) -> None:
    for limit in ("-1", "nan", "-inf"):
        assert "--time-limit must be a number of seconds" in refused(
            capsys, ["explore", f"--time-limit={limit}", "--dry-run"]
        )
    assert main(["explore", "--time-limit", "12.5", "--dry-run"]) == 0
    assert "--args --threads 1 --time-limit 12.5" in capsys.readouterr().out


def test_the_served_explorer_takes_what_explore_passes_and_refuses_anything_else(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`panel serve apps/explorer.py --args --chekpoint DIR` served the bundled model in DIR's
    place without a word, and `--args --threads abc` stopped the whole server with argparse's
    usage. Every session now gets a page that names the option, and the log one line."""
    from attnlab.app.explorer import refusal
    from attnlab.app.explorer.startup import arguments
    from attnlab.app.serve import serve_command

    runs = str(tmp_path)  # (a root must be a directory)
    command = serve_command(["ckpt"], 5006, "127.0.0.1", threads=2, roots=[runs], time_limit=3)
    passed = command[command.index("--args") + 1 :]
    args = arguments(passed)
    assert (args.checkpoint, args.checkpoint_root, args.threads, args.time_limit) == (["ckpt"], [runs], 2, 3.0)
    assert refusal(passed) is None
    for argv, named in (
        (["--chekpoint", "x"], "unrecognized arguments: --chekpoint x"),
        (["--checkpoint-r", "x"], "unrecognized arguments: --checkpoint-r x"),  # not guessed
        (["--threads", "abc"], "argument --threads: invalid int value: 'abc'"),
        (["--time-limit"], "argument --time-limit: expected one argument"),
        (["-h"], "unrecognized arguments: -h"),  # argparse's help would have stopped the server
    ):
        page = refusal(argv)
        assert page is not None and f"(`{named}`)" in page.object, argv
        log = capsys.readouterr().err
        assert (
            log.startswith("explorer: refusing to serve: This server was started with options") and log.count("\n") == 1
        ), log


def test_the_served_explorer_refuses_a_time_limit_that_is_no_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """`panel serve apps/explorer.py --args --time-limit -5` (or nan) served with no limit at
    all: the app clamped the value to 0, which means none, so one request could hold the server
    for good. Refused as `attnlab explore --time-limit -5` is, on the page and in one log line."""
    from attnlab.app.explorer import app, refusal

    for limit in ("-5", "nan", "inf"):
        page = refusal(["--time-limit", limit])
        assert page is not None and "--time-limit must be a number of seconds ≥ 0 (0: no limit)" in page.object
        assert capsys.readouterr().err.count("\n") == 1
    assert refusal(["--time-limit", "0"]) is None and app(["--time-limit", "2.5"]).store.time_limit == 2.5


@needs_bundled
def test_an_endless_input_is_refused_not_read_forever(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`translate --input /dev/zero` grew to 6 GB in 12 s and on; a text is read whole, up to 256 MiB
    (NULs are refused at their first block as no text: an endless text is `yes`'s)."""
    from attnlab.data import corpora

    said = "/dev/zero: not text, a NUL byte at byte 0"
    assert said in refused(capsys, ["translate", "--checkpoint", str(BUNDLED), "--input", "/dev/zero"])
    with subprocess.Popen(["yes", "A dog runs ."], stdout=subprocess.PIPE) as yes:  # and on stdin
        done = subprocess.run(
            [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(BUNDLED)],
            stdin=yes.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
        yes.kill()
    assert (
        done.returncode == 2
        and done.stderr.strip()
        == "attnlab translate: error: stdin holds over 256 MiB of text; split it into smaller files"
    )
    monkeypatch.setattr(corpora, "MAX_TEXT_BYTES", 10)
    (tmp_path / "ten.txt").write_text("123456789\n")
    assert corpora.read_text(tmp_path / "ten.txt") == ["123456789"]
    (tmp_path / "eleven.txt").write_text("1234567890\n")
    with pytest.raises(corpora.DataError, match="holds over 0 MiB of text"):
        corpora.read_text(tmp_path / "eleven.txt")


def test_ctrl_c_while_a_command_loads_is_interrupted_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first second or two of a command imports PyTorch; Ctrl-C then was a traceback."""
    import attnlab.cli

    def pressed(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(attnlab.cli.importlib, "import_module", pressed)
    assert main(["presets"]) == 130
    assert capsys.readouterr().err == "attnlab presets: interrupted\n"


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler of its own for `signum` (Linux: SigCgt in its status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


@needs_bundled
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads a process's signal mask from /proc")
def test_sigterm_stops_a_command_with_one_line() -> None:
    """A scheduler's or `timeout`'s SIGTERM ended a command without a word (`train` in its
    start-up left an empty --out and nothing in the job's log). Sent once the command has taken
    the signal, here while `translate` waits for stdin, it is one line and the shell's status."""
    command = [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(BUNDLED)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as running:
        for _ in range(600):
            if running.poll() is not None or catches(running.pid, signal.SIGTERM):
                break
            time.sleep(0.05)
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=60)
    assert running.returncode == 128 + signal.SIGTERM and err == "attnlab translate: stopped by SIGTERM\n", err


def test_presets_names_the_vocabulary_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """ModelConfig's rules (the pad, bos and eos ids inside the vocabulary; at most 2**24 pieces,
    where 2**63 was a 43-line overflow traceback from torch.empty) said of --vocab-size."""
    for size in ("0", "3", "16777217", "9223372036854775808"):
        assert refused(capsys, ["presets", "--vocab-size", size]).startswith(
            f"attnlab presets: error: --vocab-size {size}: "
        )
    assert main(["presets", "--vocab-size", "4", "--json"]) == 0  # pad 0, unk 1, bos 2, eos 3


@needs_bundled
@pytest.mark.parametrize("closed", ["at start", "later"])
def test_a_closed_stdin_is_one_line(
    closed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`translate <&-` and `evaluate --ref - <&-` were AttributeError tracebacks ('NoneType' object
    has no attribute 'buffer'): Python leaves sys.stdin None when it starts with stdin closed."""
    import io

    gone = io.TextIOWrapper(io.BytesIO())
    gone.close()
    monkeypatch.setattr("sys.stdin", None if closed == "at start" else gone)
    said = "stdin (-) is closed, so there is nothing to read: name an input file instead"
    assert refused(capsys, ["translate", "--checkpoint", str(BUNDLED)]).endswith(said)
    (tmp_path / "hyp").write_text("A dog runs .\n")
    assert refused(capsys, ["evaluate", "--hyp", str(tmp_path / "hyp"), "--ref", "-"]).endswith(said)


@needs_bundled
def test_record_refuses_an_empty_reference_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty reference on line 2 was "the target is empty" (which line?) after 00000.trace was
    written."""
    out = tmp_path / "traces"
    reference = tmp_path / "ref.de"
    reference.write_text("Ein Hund.\n\n")
    argv = ["record", "--checkpoint", str(BUNDLED), "A dog.", "A cat.", "--reference", str(reference)]
    assert refused(capsys, [*argv, "--out", str(out)]).endswith(f"{reference}:2: the reference is empty")
    assert not out.exists()
    both = ["record", "--checkpoint", str(BUNDLED), "--input", "-", "--reference", "-", "--out", str(out)]
    assert "--input and --reference both read stdin" in refused(capsys, both)  # the second read nothing
    assert refused(capsys, ["record", "--checkpoint", str(BUNDLED), "A dog.", " ", "--out", str(out)]).endswith(
        "sentence 2: the sentence is empty"
    )
    long = " ".join(["dog"] * 1200)  # over the model's 1,023 pieces: found before the first trace is written
    assert "sentence 2: the input has" in refused(
        capsys, ["record", "--checkpoint", str(BUNDLED), "A dog.", long, "--out", str(out)]
    )
    assert not out.exists()
    reference.write_text("Ein Hund.\n" + " ".join(["Hund"] * 1200) + "\n")  # a reference too long: found first too
    assert refused(capsys, [*argv, "--out", str(out)]).startswith(
        f"attnlab record: error: {reference}:2: the target has"
    )
    assert not out.exists()


@needs_bundled
def test_record_does_not_mix_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second run into the same --out left the first run's 00001.trace beside its own 00000."""
    out = tmp_path / "traces"
    record = ["record", "--checkpoint", str(BUNDLED), "--beam", "1", "--out", str(out)]
    assert main([*record, "A dog.", "A cat."]) == 0
    (out / "notes.txt").write_text("mine")
    assert "already holds 2 traces of an earlier run; pass --force" in refused(capsys, [*record, "A bird."])
    assert sorted(path.name for path in out.iterdir()) == ["00000.trace", "00001.trace", "notes.txt"]
    assert main([*record, "A bird.", "--force"]) == 0
    assert sorted(path.name for path in out.iterdir()) == ["00000.trace", "notes.txt"]


@needs_bundled
def test_record_checks_the_beam_before_replacing_an_earlier_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`record ... --out DIR --force --beam 0` deleted DIR's earlier traces, then refused the beam."""
    out = tmp_path / "traces"
    record = ["record", "--checkpoint", str(BUNDLED), "A dog.", "--out", str(out), "--force"]
    assert main([*record, "--beam", "1"]) == 0
    for beam, said in (("0", "beam must be a whole number ≥ 1 (1: greedy), got 0"), ("5000", "beam 5000 is more")):
        assert said in refused(capsys, [*record, "--beam", beam])
        assert sorted(path.name for path in out.iterdir()) == ["00000.trace"]


@needs_bundled
def test_translate_says_which_lines_truncate_cuts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`translate --truncate` cut over-long lines without a word, where `evaluate --truncate` says so."""
    model = Transformer(preset("tiny", vocab_size=8000, max_len=16))  # 15 pieces a line
    checkpoint = save_checkpoint(tmp_path / "ck", model, BUNDLED / "spm.model", meta={"task": "translate"})
    lines = tmp_path / "in.en"
    lines.write_text("A dog.\n\n" + "A dog runs. " * 10 + "\n")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(lines), "--beam", "1", "--truncate"]
    assert main(argv) == 0
    said = capsys.readouterr().err.splitlines()
    assert "attnlab translate: warning: 1 of 3 lines cut to the 15 pieces this model takes (the first: line 3)" in said
    assert main(argv[:-1]) == 1  # without --truncate: refused, that line alone
    assert not any("warning" in line for line in capsys.readouterr().err.splitlines())


@needs_bundled
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_translate_to_a_full_disk_is_one_line_and_to_a_closed_pipe_quiet(tmp_path: Path) -> None:
    """`translate > /dev/full` was an OSError traceback (ENOSPC), as a closed pipe was; then a
    closed pipe (`| head` done reading) was "error: cannot write to stdout: Broken pipe", exit 2."""
    translate = [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(BUNDLED), "--beam", "1"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            translate, input="A dog runs.\n", stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert done.stderr.strip() == "attnlab translate: error: cannot write to stdout: No space left on device"
    pipe = subprocess.Popen(translate, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pipe.stdout.close()  # the reader gone before the first line, so that the test does not race it
    _, stderr = pipe.communicate("A dog runs.\n", timeout=120)
    assert (pipe.returncode, stderr) == (141, "")


@pytest.mark.parametrize(
    "argv, error",
    [
        (["presets", "--vocab", "100"], "unrecognized arguments: --vocab 100"),
        (["flops", "--tgt", "5"], "unrecognized option --tgt (did you mean --tgt-len?); flags are spelled in full"),
        (["data", "prepare", "multi30k", "--out", "x", "--vocab", "1000"], "unrecognized arguments: --vocab 1000"),
        (["train", "--warm", "10"], "unrecognized option --warm (did you mean --warmup?); flags are spelled in full"),
        (["average", "run", "--out", "x", "--prob"], "unrecognized arguments: --prob"),
        (["translate", "--checkpoint", "x", "--trunc"], "unrecognized arguments: --trunc"),
        (["parse", "--checkpoint", "x", "--trunc"], "unrecognized arguments: --trunc"),
        (["record", "--checkpoint", "x", "--for"], "unrecognized arguments: --for"),
        (["align", "--checkpoint", "x", "--thresh", "0.1"], "unrecognized arguments: --thresh 0.1"),
        (["evaluate", "--hy", "x"], "unrecognized arguments: --hy x"),
        (["heads", "query", "x", "--form", "json"], "unrecognized arguments: --form"),
        (["explore", "--addr", "127.0.0.1"], "unrecognized arguments: --addr 127.0.0.1"),
        (["import", "marian", "x", "--out", "y", "--for"], "unrecognized arguments: --for"),
        (["export", "ctranslate2", "x", "--out", "y", "--quant", "int8"], "unrecognized arguments: --quant int8"),
    ],
)
def test_an_abbreviated_flag_is_refused_not_guessed(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse's default took `--vocab 1000` for --vocab-size and `--trunc` for --truncate without
    a word: a typo of one flag silently set another, and `data prepare` ran on the guess."""
    monkeypatch.chdir(tmp_path)  # where the guessing commands would write
    code = main(argv)
    said = capsys.readouterr().err.strip().splitlines()
    # one line: argparse's usage block above it once pushed it half a screen down
    named, message = said[0].split(": error: ", 1) if len(said) == 1 else ("", "")
    assert code == 2 and named in (f"attnlab {argv[0]}", f"attnlab {' '.join(argv[:2])}"), said  # as typed
    assert message.startswith(error), said
    assert said[0].endswith("--help lists the options)") or "did you mean" in said[0]
