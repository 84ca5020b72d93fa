"""Every benchmark script runs end to end in `--smoke` mode (tiny sizes, a few steps), so none of
them can rot between the hand-run measurements recorded in docs/BENCHMARKS.md. No timing is
asserted: the figures belong in the docs, the tests only prove the scripts still measure what
they claim (same work on both sides, the JSON keys the docs quote)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str) -> list[dict]:
    """Run benchmarks/NAME.py --smoke --json ARGS; the JSON objects it printed, one per line."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--smoke", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # the machine is shared: one thread per test
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def prepared_tiny(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k with a 1,000-piece vocabulary, the tiny preset's size."""
    from attnlab.data.prepared import prepare

    out = tmp_path_factory.mktemp("bench") / "m30k"
    prepare("multi30k", out, data_dir=data_dir, vocab_size=1000, echo=lambda _: None)
    return out


def test_train_throughput_smoke(prepared_tiny: Path) -> None:
    cases = run_script("train_throughput", "--data", str(prepared_tiny))
    assert [(c["preset"], c["dtype"]) for c in cases] == [("tiny", "fp32"), ("tiny", "bf16")]
    for case in cases:
        assert case["attnlab_tokens_per_s"] > 0 and case["peer_tokens_per_s"] > 0
        assert case["ratio"] == pytest.approx(case["attnlab_tokens_per_s"] / case["peer_tokens_per_s"], rel=1e-2)
        assert case["attnlab_mfu"] > 0 and case["peer_mfu"] > 0


@pytest.mark.parametrize("products", [True, False])
def test_emulated_bf16_is_left_out_of_the_default_rows(products: bool, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """On a CPU that only emulates bf16 its default rows would take minutes each (a 2,048² bf16
    product: 49 s) and measure PyTorch's fallback loop: they are left out, in one line."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import common

    monkeypatch.setattr(common, "bf16_products", lambda: products)
    dtypes, cpu = ["fp32", "bf16", "int8"], torch.device("cpu")
    assert common.without_emulated_bf16(dtypes, cpu) == (dtypes if products else ["fp32", "int8"])
    assert common.without_emulated_bf16(dtypes, cpu, keep=True) == dtypes  # a smoke run checks the bf16 code
    assert ("bf16 left out" in capsys.readouterr().err) is not products


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")  # nn.Transformer's eval fast path
def test_peer_is_the_same_model_as_attnlab(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nn.Transformer peer has attnlab's parameter count and, given attnlab's weights, its
    logits: the throughput ratio compares equal maths."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from train_throughput import TorchTransformerMT

    from attnlab.model.config import preset
    from attnlab.model.transformer import Transformer

    config = preset("tiny", attn_bias=True)  # (nn.MultiheadAttention's projections have biases)
    ours, peer = Transformer(config).eval(), TorchTransformerMT(config).eval()
    peer.embed.weight.data.copy_(ours.embed.weight)
    for mine, theirs in zip(ours.encoder["layers"], peer.core.encoder.layers, strict=True):
        a = mine.self_attn
        theirs.self_attn.in_proj_weight.data.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        theirs.self_attn.in_proj_bias.data.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        theirs.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
        theirs.linear1.load_state_dict(mine.ffn.w_1.state_dict())
        theirs.linear2.load_state_dict(mine.ffn.w_2.state_dict())
        theirs.norm1.load_state_dict(mine.res_attn.norm.state_dict())
        theirs.norm2.load_state_dict(mine.res_ffn.norm.state_dict())
    for mine, theirs in zip(ours.decoder["layers"], peer.core.decoder.layers, strict=True):
        for a, b in ((mine.self_attn, theirs.self_attn), (mine.cross_attn, theirs.multihead_attn)):
            b.in_proj_weight.data.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
            b.in_proj_bias.data.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
            b.out_proj.load_state_dict(a.w_o.state_dict())
        theirs.linear1.load_state_dict(mine.ffn.w_1.state_dict())
        theirs.linear2.load_state_dict(mine.ffn.w_2.state_dict())
        theirs.norm1.load_state_dict(mine.res_self.norm.state_dict())
        theirs.norm2.load_state_dict(mine.res_cross.norm.state_dict())
        theirs.norm3.load_state_dict(mine.res_ffn.norm.state_dict())
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    src = torch.randint(4, config.vocab_size, (3, 9))
    src[0, -2:] = config.pad_id
    tgt = torch.randint(4, config.vocab_size, (3, 7))
    with torch.no_grad():
        torch.testing.assert_close(peer(src, tgt), ours(src, tgt), atol=1e-4, rtol=1e-4)


def test_gpu_paper_runs_imports_with_what_a_gpu_image_holds() -> None:
    """A GPU rental's image has PyTorch, NumPy, sentencepiece, safetensors, sacrebleu and tqdm but
    not the app's or the text tasks' packages, and nothing can be installed there: the first GPU
    run (docs/BENCHMARKS.md, GPU round one) stopped at `import opencc`, then `rouge_score`. The
    trainer and this script import without them."""
    absent = ["opencc", "rouge_score", "panel", "bokeh", "ipywidgets", "duckdb", "pyarrow", "ctranslate2", "tornado"]
    code = (
        "import sys\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {absent!r}:\n"
        "            raise ImportError(f'no module named {name}')\n"
        "sys.meta_path.insert(0, Absent())\n"
        "sys.path.insert(0, 'benchmarks')\n"
        "import gpu_paper_runs, attnlab.train.commands\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_gpu_paper_runs_smoke(tmp_path: Path) -> None:
    cases = run_script("gpu_paper_runs", "--profile", str(tmp_path))
    assert [c["preset"].split()[0] for c in cases] == ["base", "big"]
    for case in cases:
        assert case["step_s"] > 0 and case["tgt_tokens_per_s"] > 0 and case["projected_hours"] > 0
        assert case["paper_steps"] == {"base": 100_000, "big": 300_000}[case["preset"].split()[0]]
        assert case["peer_step_s"] > 0 and case["ratio"] == pytest.approx(
            case["peer_step_s"] / case["step_s"], rel=0.01
        )
        assert case["host_waits_per_step"] is None  # counted on a GPU only: on a CPU nothing waits
        assert case["host_wait_sites"] == {} and case["variant"] == "dynamic"
    # where the time went: the kinds of kernel add up to the whole, the products among them
    profile = (tmp_path / "profile_base.txt").read_text().split("\n\n")[0].splitlines()[1:]
    shares = {line.split()[0]: float(line.split()[-1].rstrip("%")) for line in profile}
    assert sum(shares.values()) == pytest.approx(100, abs=0.5) and shares["matmul"] > 10


def test_a_profile_keeps_the_code_of_the_slowest_compiled_kernels(tmp_path: Path, monkeypatch) -> None:
    """`gpu_paper_runs --profile` copies the code of the kernels that took the most time out of
    Inductor's cache (GPU round three wanted the LayerNorm backward's Triton code, and the rental
    was over). On a CPU Inductor's C++ kernels show in a profile with `cpp.enable_kernel_profile`."""
    import torch
    import torch._inductor.config as inductor
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import common

    torch._dynamo.reset()
    # config.patch, not monkeypatch.setattr: undoing that deleted the setting from Inductor's
    # config, and every later compile in the session failed on "enable_kernel_profile does not exist"
    try:
        with inductor.patch({"cpp.enable_kernel_profile": True}):
            scaled_sums = torch.compile(lambda x: (x.relu() * 3).sum(1))
            x = torch.randn(64, 128)
            scaled_sums(x)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                scaled_sums(x)
    finally:
        torch._dynamo.reset()
    names = common.kernel_sources(prof.key_averages(), "self_cpu_time_total", tmp_path / "kernels")
    assert names and all(name.startswith("cpp_fused_") for name in names), names
    copied = sorted((tmp_path / "kernels").glob("00_*.py"))
    assert copied and all(names[0] in path.read_text() for path in copied)
    assert common.kernel_sources([], "self_cpu_time_total", tmp_path / "none") == []  # eager: nothing to copy


def _process_id() -> Callable[[], int]:
    """A `Worker`'s system whose call returns the id of the process it runs in."""
    return os.getpid


def _refused() -> Callable[[], int]:
    raise SystemExit("no such system")


def test_a_worker_runs_its_system_in_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoding and training benchmarks time each system in a process of its own (in one
    shared process each slowed the other: training round sixteen, decoding round ten); a system
    that cannot be built is its one line, at once."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import common

    worker = common.Worker(_process_id)
    try:
        pid, seconds = worker.timed()
        assert pid == worker.process.pid != os.getpid() and seconds >= 0
    finally:
        worker.close()
    assert worker.process.exitcode == 0
    with pytest.raises(SystemExit, match="^no such system$"):
        common.Worker(_refused)


def test_collate_smoke(prepared_tiny: Path) -> None:
    rows = run_script("collate", "--data", str(prepared_tiny))  # the script checks both build the same tensors
    assert [r["max_tokens"] for r in rows] == [25_000, 6_000]
    for row in rows:
        assert row["attnlab_ms"] > 0 and row["peer_ms"] > 0 and row["pairs_per_batch"] > 0
        assert row["ratio"] == pytest.approx(row["peer_ms"] / row["attnlab_ms"], rel=0.02)


def test_record_overhead_smoke() -> None:
    (result,) = run_script("record_overhead")
    assert result["recorded_ms"] > 0 and result["unrecorded_ms"] > 0 and result["plain_ms"] > 0
    assert set(result) >= {"recorded_over_unrecorded", "unrecorded_over_plain"}


def test_decode_smoke(data_dir: Path) -> None:  # (test2016's sources: skipped where the corpora are not)
    rows = run_script("decode")
    systems = {(r["setting"], r["system"], r["dtype"]) for r in rows}
    assert {(setting, "attnlab", d) for setting in ("test2016", "latency") for d in ("fp32", "bf16", "int8")} <= systems
    assert {("equal-work", "attnlab", d) for d in ("fp32", "bf16")} <= systems
    assert {("equal-work", "attnlab-uncached", d) for d in ("fp32", "bf16")} <= systems
    peers = {("equal-work", "marian", "fp32"), ("test2016", "ctranslate2", "fp32"), ("test2016", "ctranslate2", "int8")}
    peers |= {("equal-work", "ctranslate2", "fp32"), ("equal-work", "ctranslate2", "int8")}
    peers |= {("latency", "ctranslate2", "fp32"), ("latency", "ctranslate2", "int8")}
    assert peers <= systems  # transformers and ctranslate2 are installed by `make test`
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["tokens"] > 0 and row["beam"] == 4
        assert (row["setting"] == "latency") == ("ms_per_sentence" in row)


def test_local_attention_smoke() -> None:
    rows = run_script("local_attention")
    assert [row["n"] for row in rows] == [64, 256] and all(row["window"] == 8 for row in rows)
    for row in rows:
        for name in ("fused", "explicit", "local", "layer_global", "layer_local"):
            assert row[f"{name}_ms"] > 0 and row[f"{name}_mib"] > 0
    assert rows[1]["explicit_mib"] > 2 * rows[0]["explicit_mib"]  # the written-out n × n weights grow


@pytest.mark.skipif(
    not (ROOT / "checkpoints" / "multi30k-en-de" / "manifest.json").is_file(), reason="no bundled checkpoint"
)
def test_explorer_load_smoke() -> None:
    """1 and 2 Bokeh client sessions for 3 s against a real `attnlab explore` server: every
    click answered with the sentence's own translation, and the figures the docs quote."""
    rows = run_script("explorer_load")
    assert [row["sessions"] for row in rows] == [1, 2]
    for row in rows:
        assert row["errors"] == 0 and row["requests"] >= row["sessions"], row
        assert 0 < row["p50_s"] <= row["p95_s"] <= row["max_s"], row
        assert row["server_rss_mb_peak"] >= row["server_rss_mb_end"] > 100, row
        assert row["server_cpu_s_per_request"] > 0 and row["requests_per_s"] > 0, row
    assert rows[1]["slowdown"] > 0


def test_local_attention_runs_smoke(prepared_tiny: Path, tmp_path: Path) -> None:
    """Two two-step runs (r = 1 and global) go through the whole report: averaging, BLEU on the
    real test sets, training and decoding speed against global, head statistics per layer."""
    runs = [  # side by side: one thread each, two cores
        subprocess.Popen(
            [sys.executable, "-m", "attnlab.cli", "train", "--preset", "tiny", "--data", str(prepared_tiny)]
            + ["--out", str(tmp_path / name), "--max-steps", "2", "--save-every", "1", "--max-tokens", "500", *extra],
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for name, extra in (("r1", ["attn_window=1"]), ("global", []))
    ]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-2000:]
    rows = run_script("local_attention_runs", "--runs", str(tmp_path), "--prepared", str(prepared_tiny))
    assert [r["run"] for r in rows] == ["r1", "global"]
    for row in rows:
        assert row["updates"] == 2 and "tok:13a" in row["bleu_signature"]
        assert row["train_tok_s"] > 0 and row["decode_tok_s"] > 0
        assert [len(row["heads"][kind]) for kind in ("encoder", "decoder", "cross")] == [2, 2, 2]


def test_alignment_timeline_table_and_figure(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The AER tables of a run's checkpoints as a markdown table (one row per step, the best
    reading first) and, with Chromium, the explorer's timeline figure as a PNG."""
    from browser import CHROMIUM

    for step, aers in ((100, [0.9, 0.8]), (200, [0.9, 0.5])):  # head 1 of layer 0 becomes the aligner
        rows = [
            {"reading": f"head L0 H{h}", "method": "head", "layer": 0, "head": h, "aer": a} for h, a in enumerate(aers)
        ]
        table = {"set": "enfr", "pairs": 3, "rows": sorted(rows, key=lambda r: r["aer"])}
        (tmp_path / "probes" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "probes" / f"step_{step}" / "alignment.json").write_text(json.dumps(table))
    png = tmp_path / "aer.png"
    command = [sys.executable, str(ROOT / "benchmarks" / "alignment_timeline.py"), str(tmp_path)]
    command += ["--png", str(png)] if Path(CHROMIUM).exists() else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "| 100 | head L0 H1 | 80.0 | 90.0 | 80.0 |" in lines and "| 200 | head L0 H1 | 50.0 | 90.0 | 50.0 |" in lines
    if Path(CHROMIUM).exists():
        import numpy as np
        from PIL import Image

        colours = np.unique(np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3), axis=0)
        assert len(colours) > 20  # drawn lines, not a blank page (getdata() is deprecated in Pillow 12)
    empty = subprocess.run(
        [*command[:2], str(tmp_path_factory.mktemp("none"))], capture_output=True, text=True, cwd=ROOT
    )
    assert empty.returncode == 1 and "train with --align-gold" in empty.stderr and "Traceback" not in empty.stderr
