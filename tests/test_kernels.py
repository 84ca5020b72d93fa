"""The decoding kernel (`attnlab.model.kernels`) and the key/value store it reads (`KVCache`)."""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from attnlab.decode.search import generate
from attnlab.model import kernels
from attnlab.model.config import preset
from attnlab.model.cpu import cpu_signature
from attnlab.model.transformer import KVCache, Transformer


def reference(q, k, v, slots, first: int, length: int, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (1) written out row by row in fp64, from the store as the docstring defines it."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64)
    for row in range(q.shape[0]):
        seen = range(first, length if lengths is None else min(length, int(lengths[row])))
        for head in range(q.shape[1] if seen else 0):
            keys = torch.stack([k[t, slots[row, t], head] for t in seen]).double()
            values = torch.stack([v[t, slots[row, t], head] for t in seen]).double()
            weights = torch.softmax(keys @ q[row, head].double() / math.sqrt(q.shape[-1]), dim=0)
            out[row, head] = weights @ values
    return out


def test_the_kernel_builds_here() -> None:
    """CI has a compiler: a kernel that stops building must fail here, not slow decoding down."""
    assert kernels.extension() is not None


VECTOR_USES = """#include "vec.h"
using namespace attnlab;
fvec e(fvec x) { return exp(x); }
float top(fvec x) { return largest(x); }
uint32_t bits(fvec x, float bound) { return above(x, bound); }
fvec wide(const c10::BFloat16* p) { return load(p); }
void narrow(c10::BFloat16* p, fvec x) { store(p, x); }
fvec bigger(fvec x, fvec y) { return x > y ? x : y; }
"""


@pytest.mark.skipif(platform.machine() != "x86_64" or shutil.which("g++") is None, reason="x86-64 and g++ only")
@pytest.mark.parametrize("arch", ["x86-64-v3", "x86-64-v4"])  # AVX2 (an AMD EPYC of the Zen 3 family), AVX-512
def test_vector_helpers_stay_whole_vectors_on_avx2_and_avx512(arch: str, tmp_path: Path) -> None:
    """csrc/vec.h's vectors are as wide as the CPU's registers: GCC expands a comparison or
    select on wider vectors lane by lane, which made e^x scalar on CPUs without AVX-512 and
    `log_softmax_top_k` 3.8x slower there. Compiled for either instruction set, no helper may
    draw GCC's warning that it expanded a vector operation piecewise."""
    from torch.utils import cpp_extension

    source = tmp_path / "uses.cpp"
    source.write_text(VECTOR_USES)
    csrc = Path(kernels.__file__).with_name("csrc")
    includes = [f"-I{path}" for path in [csrc, *cpp_extension.include_paths()]]
    command = ["g++", "-O3", f"-march={arch}", "-Wvector-operation-performance", "-Wno-psabi", "-c", str(source)]
    done = subprocess.run([*command, *includes, "-o", str(tmp_path / "uses.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "expanded" not in done.stderr, done.stderr


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("d_k, d_v", [(64, 64), (20, 36)])  # 20, 36: not whole vectors of 8 or 16
@pytest.mark.parametrize("first", [0, 3])  # 3: a restricted model's window
def test_cached_attention_reads_each_rows_history(dtype: torch.dtype, atol: float, d_k: int, d_v: int, first: int):
    """Both the kernel and its PyTorch twin give Eq. (1) over the positions that the slot table
    names, for random tables (a kernel reading slot i for row i, or ignoring `first`, fails)."""
    torch.manual_seed(0)
    rows, heads, capacity, length = 7, 3, 16, 9
    q = torch.randn(rows, heads, d_k).to(dtype)
    k, v = torch.randn(capacity, 10, heads, d_k).to(dtype), torch.randn(capacity, 10, heads, d_v).to(dtype)
    slots = torch.randint(0, 10, (rows, 12), dtype=torch.int32)
    want = reference(q, k, v, slots, first, length)
    for got in (
        kernels.cached_attention(q, k, v, slots, first, length),
        kernels.gathered_attention(q, k, v, slots, first, length),
    ):
        assert got.dtype == dtype and got.shape == (rows, heads, d_v)
        assert torch.allclose(got.double(), want, atol=atol), (got.double() - want).abs().max()


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_cached_attention_over_a_padded_source(dtype: torch.dtype, atol: float) -> None:
    """The encoder-decoder form: one slot (sentence) per row for every position (a stride of 0),
    a store laid out sentence-major (transposed strides), and per-row lengths; a row that sees
    no key gets zeros, not NaN."""
    torch.manual_seed(2)
    q = torch.randn(6, 2, 16).to(dtype)
    k, v = torch.randn(3, 9, 2, 16).to(dtype), torch.randn(3, 9, 2, 16).to(dtype)  # (sentences, Ls, h, d)
    sentence = torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.int32)[:, None].expand(-1, 9)
    lengths = torch.tensor([9, 9, 4, 4, 0, 1], dtype=torch.int32)
    store_k, store_v = k.transpose(0, 1), v.transpose(0, 1)  # position-major views, no copy
    want = reference(q, store_k, store_v, sentence, 0, 9, lengths)
    for attend in (kernels.cached_attention, kernels.gathered_attention):
        got = attend(q, store_k, store_v, sentence, 0, 9, lengths)
        assert torch.allclose(got.double(), want, atol=atol), (attend.__name__, (got.double() - want).abs().max())
    assert got[4].abs().sum() == 0 and got[5].abs().sum() > 0


def test_a_kernel_that_cannot_be_built_falls_back_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: object) -> None:
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr("torch.utils.cpp_extension.load", broken)
    monkeypatch.setattr(kernels, "_built_before", lambda *_: None)  # no build on disk
    monkeypatch.setattr(kernels, "_built", {})
    with pytest.warns(
        UserWarning, match=r"could not be built \(Ninja is required to load C\+\+ extensions\)"
    ) as caught:
        assert kernels.extension() is None
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    q, k, v = torch.randn(2, 1, 4), torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
    slots = torch.tensor([[1, 0, 1], [0, 0, 0]], dtype=torch.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process, not per call
        out = kernels.cached_attention(q, k, v, slots, 0, 3)
    assert torch.allclose(out.double(), reference(q, k, v, slots, 0, 3), atol=1e-6)


def test_a_build_is_announced_in_one_line_and_only_when_needed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compiling takes 30-60 s: a first decode or training step says why it waits; a process
    that finds the build on disk says nothing."""
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "_get_build_directory", lambda name, verbose: str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", lambda **_: "module")
    monkeypatch.setattr(cpp_extension, "_import_module_from_library", lambda *_: "module")
    for built in (False, True):
        if built:
            (tmp_path / f"{kernels.build_name(cpu_signature())}.so").touch()
        monkeypatch.setattr(kernels, "_built", {})
        assert kernels.extension() == "module"
        err = capsys.readouterr().err
        assert err == ("" if built else "attnlab: compiling its C++ kernels for this CPU, once (30-60 s)\n")


def test_a_lock_left_by_a_killed_process_stops_nothing(tmp_path: Path) -> None:
    """PyTorch's build lock, taken by every process to run ninja and left behind by one killed
    while it held it (0.2-2 s of every start): every later `train` and `translate` waited for it
    forever, without a word. A process that finds the build on disk imports it past the lock."""
    import sys

    from torch.utils import cpp_extension

    assert kernels.extension() is not None
    name = kernels.build_name(cpu_signature())
    shutil.copytree(cpp_extension._get_build_directory(name, verbose=False), tmp_path / name)
    (tmp_path / name / "lock").touch()
    done = subprocess.run(
        [sys.executable, "-c", "from attnlab.model.kernels import extension; assert extension() is not None"],
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "compiling" not in done.stderr, done.stderr


def test_a_build_waits_for_another_in_one_line_and_clears_a_lock_older_than_any_build(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    kernels._wait_or_clear(lock)  # none: nothing said
    lock.touch()
    with pytest.warns(UserWarning, match=f"waiting for another process's build .*remove {lock}"):
        kernels._wait_or_clear(lock)
    assert lock.exists()
    old = lock.stat().st_mtime - 20 * 60
    os.utime(lock, (old, old))
    with pytest.warns(UserWarning, match=f"removing {lock}, left by a build .* stopped 20 min ago"):
        kernels._wait_or_clear(lock)
    assert not lock.exists()


def test_builds_are_named_per_cpu() -> None:
    """A build for one CPU's instructions is never loaded on another (a shared home directory)."""
    intel = "x86_64|GenuineIntel|Xeon|avx512f amx_bf16"
    assert kernels.build_name(intel) == kernels.build_name(intel)
    assert kernels.build_name(intel) != kernels.build_name("x86_64|AuthenticAMD|EPYC|avx512f")
    assert kernels.build_name(intel) != kernels.build_name(intel.replace(" amx_bf16", ""))
    assert kernels.build_name(intel).startswith("attnlab_kernels_")


def test_two_checkouts_of_the_same_source_keep_their_own_builds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same source text in another folder (a second clone, a git worktree) gets a build of
    its own: sharing one name, each checkout's first use rebuilt the other's (80 s a time)."""
    here = kernels.build_name(cpu_signature())
    for name in ("SOURCES", "HEADERS"):
        copies = [tmp_path / path.name for path in getattr(kernels, name)]
        for path, copy in zip(getattr(kernels, name), copies, strict=True):
            copy.write_bytes(path.read_bytes())
        monkeypatch.setattr(kernels, name, copies)
    assert kernels.build_name(cpu_signature()) != here


@pytest.fixture(params=["kernel", "pytorch"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pytorch":
        monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    return request.param


def test_reorders_move_no_keys_and_steps_equal_a_full_forward(path: str) -> None:
    """Twenty steps of beam-like reorders (rows repeated, dropped, the batch growing from 3 to
    8 rows and shrinking, past the store's first 16 positions): a reorder rewrites only the slot
    table, and every step's logits equal an uncached forward of the reordered prefixes."""
    torch.manual_seed(1)
    model = Transformer(preset("tiny", n_layers=2)).eval()
    src = torch.randint(4, 1000, (8, 6))
    tokens = torch.full((3, 1), 2)
    rows_src = torch.arange(3)  # the source sentence of each row
    cache = KVCache()
    with torch.no_grad():
        memory, mask = model.encode(src), None
        for step in range(20):
            got = model.logits(model.decode(tokens[:, -1:], memory[rows_src], mask, cache))[:, -1]
            want = model(src[rows_src], tokens)[:, -1]
            assert torch.allclose(got, want, atol=1e-4), (step, (got - want).abs().max())
            rows = 8 if step < 12 else 4
            index = torch.randint(0, len(tokens), (rows,))
            kept = cache.layers[0]["self"]["k"].data_ptr()
            cache.reorder(index)
            assert cache.layers[0]["self"]["k"].data_ptr() == kept  # nothing moved but the slots
            assert cache.slots.shape == (rows, step + 1)
            tokens = torch.cat([tokens[index], torch.randint(4, 1000, (rows, 1))], dim=1)
            rows_src = rows_src[index]
    assert cache.layers[0]["self"]["k"].size(0) == 32  # grown once, by doubling


def test_the_kernel_decodes_what_pytorch_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Transformer(preset("tiny", n_layers=2)).eval()
    src = torch.randint(4, 1000, (3, 8))
    src[1, 6:] = 0
    with_kernel = generate(model, src, beam=4, max_len_b=12)
    monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    without = generate(model, src, beam=4, max_len_b=12)
    assert [[h.tokens for h in s] for s in with_kernel] == [[h.tokens for h in s] for s in without]
    assert [h.score for s in with_kernel for h in s] == pytest.approx([h.score for s in without for h in s], abs=1e-4)


@pytest.mark.parametrize("columns, k", [(8000, 8), (1000, 42), (70, 70), (5, 1), (200, 3)])
def test_top_k_gives_topk_s_values_in_one_pass(columns: int, k: int) -> None:
    """The kernel's top k equal `torch.topk`'s values for widths with and without a ragged end,
    k from 1 to every column; rows of -inf but one keep k entries (the search's forced </s>),
    and a tie keeps the earlier column."""
    torch.manual_seed(3)
    x = torch.randn(33, columns).log_softmax(-1)
    x[1] = float("-inf")
    x[1, columns - 1] = -2.0
    x[2] = 0.5  # all tied
    values, indices = kernels.top_k(x, k)
    want = x.topk(k, dim=1).values
    assert torch.equal(values, want)
    assert torch.equal(x.gather(1, indices), values)  # the columns hold those values
    assert indices[2].tolist() == list(range(k)) and indices[1, 0] == columns - 1
    assert torch.equal(indices[3:], x[3:].topk(k, dim=1).indices)  # no ties among random values


def test_a_source_padded_at_its_start_is_read_through_its_mask() -> None:
    """The kernel reads a padded source as per-row lengths, which holds for attnlab's batches
    (padded at the end); a mask of another shape keeps the matmul path and its exact mask."""
    torch.manual_seed(4)
    model = Transformer(preset("tiny", n_layers=2)).eval()
    src, tgt = torch.randint(4, 1000, (2, 7)), torch.randint(4, 1000, (2, 5))
    key_mask = (torch.arange(7)[None, :] >= torch.tensor([[0], [3]]))[:, None, None, :]  # row 1: the first 3 hidden
    with torch.no_grad():
        memory = model.encode(src, key_mask)
        full = model.logits(model.decode(tgt, memory, key_mask))
        cache = KVCache()
        steps = [model.logits(model.decode(tgt[:, t : t + 1], memory, key_mask, cache)) for t in range(5)]
    assert "lengths" not in cache.layers[0]["cross"]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("columns, k", [(8000, 8), (1000, 42), (70, 8), (6, 4)])  # 6 - 2 skipped: k fills up
def test_log_softmax_top_k_ranks_log_probabilities(dtype: torch.dtype, columns: int, k: int) -> None:
    """The fused kernel's k best equal `log_softmax` then `topk` with the skipped columns at -inf,
    to rounding (its own e^x), at widths with and without a ragged end; skipped columns count in
    the normaliser but are never chosen, even where largest; a row with fewer than k choosable
    columns is padded with -inf; `column`'s log-probability comes back whatever it is."""
    torch.manual_seed(5)
    logits = (torch.randn(40, columns) * 8).to(dtype)
    logits[1, 0] = 100.0  # a skipped column that would win
    logits[2] = -1e30  # e^x far below the polynomial's range for all but one
    logits[2, 3] = 0.0
    skip = torch.tensor([0, 2])
    values, indices, picked = kernels.log_softmax_top_k(logits, k, skip, 3)
    lprobs = logits.float().log_softmax(-1)
    assert torch.allclose(picked, lprobs[:, 3], atol=2e-5, rtol=1e-6)
    lprobs[:, skip] = float("-inf")
    want = lprobs.topk(k, dim=1).values
    assert torch.allclose(values, want, atol=2e-5, rtol=1e-6), (values - want).abs().max()
    chosen = min(k, columns - len(skip))
    assert torch.allclose(lprobs.gather(1, indices[:, :chosen]), values[:, :chosen], atol=2e-5, rtol=1e-6)
    assert not torch.isin(indices[:, :chosen], skip).any()
    assert torch.isinf(values[:, chosen:]).all()
    assert indices[1, 0] != 0 and indices[2, 0] == 3 and values[2, 0] == 0.0


def test_the_search_ranks_through_the_stepper_when_it_can() -> None:
    """`moves` takes a stepper's own `ranked` (the kernel's one pass) and reads `step`'s
    log-probabilities only from steppers without one (wrappers that change them)."""
    from attnlab.decode.search import moves
    from attnlab.decode.stepper import TransformerStepper

    class Ranks:
        def ranked(self, tokens: torch.Tensor, k: int, eos: int) -> tuple[int, int, int]:
            return (k, eos, 0)

        def step(self, tokens: torch.Tensor) -> torch.Tensor:
            raise AssertionError("read step's log-probabilities although the stepper ranks its own")

    assert moves(Ranks(), torch.zeros(1, 1), 8, 3) == (8, 3, 0)
    model = Transformer(preset("tiny", n_layers=2)).eval()
    stepper = TransformerStepper(model, torch.randint(4, 1000, (2, 6)))
    stepper.start(torch.arange(2))
    tokens = torch.full((2, 1), 2)
    with torch.no_grad():
        fused = moves(stepper, tokens, 8, 3)
        stepper.start(torch.arange(2))
        read = moves(type("Plain", (), {"step": stepper.step})(), tokens, 8, 3)
    assert torch.equal(fused[1], read[1])
    assert torch.allclose(fused[0], read[0], atol=1e-5) and torch.allclose(fused[2], read[2], atol=1e-5)


def test_grad_norm_is_the_norm_of_all_values_together() -> None:
    """The update's gradient norm: within 1e-7 of fp64's over tensors of every size the model has
    (a bias shorter than a vector, a tail past the last vector, a table of several chunks), where
    `get_total_norm`'s fp32 sums are 1.0e-6 off here (the kernel's 2e-8); a lost tail or chunk is
    far outside."""
    generator = torch.Generator().manual_seed(0)
    sizes = [(7,), (512,), (1000, 37), (300_001,), (3, 70_000)]
    grads = [torch.randn(size, generator=generator) for size in sizes]
    exact = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    norm = kernels.grad_norm(grads)
    assert norm.dtype == torch.float32 and norm.dim() == 0
    assert float(norm) == pytest.approx(exact, rel=1e-7)
    assert float(torch.nn.utils.get_total_norm(grads)) == pytest.approx(exact, rel=1e-5)  # the twin it stands for
    grads[3][-1] = float("nan")
    assert kernels.grad_norm(grads).isnan()  # a NaN reaches the finiteness check
    grads[3][-1] = float("inf")
    assert kernels.grad_norm(grads).isinf()
    assert kernels.grad_norm([g.bfloat16() for g in grads]) is None  # not fp32: `get_total_norm` then
    assert kernels.grad_norm([]) is None
