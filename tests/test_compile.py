"""The compiled paths have no graph breaks (and so no host synchronisation inside them).

`torch._dynamo.explain` traces a function as `torch.compile` would and lists every place it had
to fall back to Python: an `.item()`, a `bool(tensor)`, boolean indexing (a shape that depends on
the data). Each break is also a host synchronisation, which on a GPU stalls the queue. Tracing
needs no compiler, so these tests are quick on a CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo

from attnlab import Transformer, preset
from attnlab.errors import ModelInputError
from attnlab.model.attention import BANDED_FROM
from attnlab.model.transformer import FeedForward, Residual
from attnlab.train.regime import compile_model, label_smoothed_loss, training_kernels


def _batch(src_len: int, tgt_len: int, padded: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 1000, (3, src_len), generator=g)
    tgt_in = torch.randint(4, 1000, (3, tgt_len), generator=g)
    tgt_out = torch.randint(4, 1000, (3, tgt_len), generator=g)
    if padded:
        src[0, src_len - 2 :] = 0
        tgt_out[1, tgt_len - 3 :] = 0
    return src, tgt_in, tgt_out


def _breaks(fn, *args) -> list[str]:
    dynamo.reset()
    explained = dynamo.explain(fn)(*args)
    return [
        f"{r.reason.splitlines()[0]} at {r.user_stack[-1].filename}:{r.user_stack[-1].lineno}"
        for r in explained.break_reasons
    ]


@pytest.mark.parametrize(("window", "attn_drop"), [(None, 0.0), (1, 0.0), (None, 0.2), (1, 0.2)])
@pytest.mark.parametrize("padded", [True, False])
def test_training_forward_and_loss_have_no_graph_break(window: int | None, attn_drop: float, padded: bool) -> None:
    """What `attnlab train --compile` compiles: the forward pass and the label-smoothed loss, in
    bf16 on the trainer's kernels; restricted attention on the banded kernel too (a sequence
    longer than BANDED_FROM windows); with the attention dropout of the parse preset too."""
    torch.manual_seed(0)
    config = preset("tiny", attn_window=window, p_attn_drop=attn_drop)
    model = Transformer(config).train()
    long = BANDED_FROM * (2 * (window or 1) + 1) + 5
    src, tgt_in, tgt_out = _batch(long if window else 9, 7, padded)

    scored = tgt_out.flatten().ne(config.pad_id).nonzero().squeeze(1)  # as `collate` finds them

    def step(src: torch.Tensor, tgt_in: torch.Tensor, scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        target = tgt_out.flatten()[scored]
        return label_smoothed_loss(model(src, tgt_in, scored), target, config.eps_ls, config.pad_id)

    with training_kernels("cpu", True), torch.autocast("cpu", torch.bfloat16):
        assert _breaks(step, src, tgt_in, scored) == []


def test_inference_forward_has_no_graph_break() -> None:
    model = Transformer(preset("tiny")).eval()
    src, tgt_in, _ = _batch(9, 7, padded=True)
    with torch.no_grad():
        assert _breaks(model, src, tgt_in) == []


def test_compiled_feed_forward_saves_no_bool_mask() -> None:
    """Inductor's CPU code writes bool tensors ~8x slower than ATen does (a (2040, 2048) ReLU
    mask: 16 ms against 2). Compiled with dynamic shapes, a ReLU over (B, L, d_ff) made it save
    its backward mask as one (`--compile model`, base bf16: 1.33 s a step instead of 1.03);
    over rows it saves the activation, which the next product keeps anyway."""
    torch.manual_seed(0)
    config = preset("tiny")
    block, ffn = Residual(config).train(), FeedForward(config)
    saved: list[torch.dtype] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.dtype)
        return t

    compiled = compile_model(lambda x: block(x, ffn))
    x = torch.randn(3, 7, config.d_model, requires_grad=True)
    with torch.autocast("cpu", torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compiled(x)
    out.float().sum().backward()
    assert torch.bfloat16 in saved and torch.bool not in saved
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_masked_loss_equals_the_sum_over_kept_targets() -> None:
    """The where()-sum that keeps the graph whole adds exactly the kept positions' terms."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 6, 50, generator=g)
    target = torch.randint(1, 50, (4, 6), generator=g)
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_loss(logits, target, 0.1, 0)
    lprobs = torch.log_softmax(logits.double(), -1)
    expected_nll = sum(-lprobs[b, t, target[b, t]] for b in range(4) for t in range(6) if target[b, t] != 0)
    expected_smooth = sum(-lprobs[b, t].mean() for b in range(4) for t in range(6) if target[b, t] != 0)
    assert nll.item() == pytest.approx(float(expected_nll), rel=1e-6)
    assert loss.item() == pytest.approx(float(0.9 * expected_nll + 0.1 * expected_smooth), rel=1e-6)
    assert nll.item() > 10  # padding would change it by a whole term (> 1 nat each)
    # and its gradient is §5.4's: softmax − q on kept positions (q = 0.9·one_hot + 0.1/V), 0 on padding
    logits.requires_grad_()
    label_smoothed_loss(logits, target, 0.1, 0)[0].backward()
    q = 0.9 * torch.nn.functional.one_hot(target, 50) + 0.1 / 50
    expected = (torch.softmax(logits.detach().double(), -1) - q) * target.ne(0)[..., None]
    assert torch.allclose(logits.grad.double(), expected, atol=1e-6)  # entries are ~1e-2


def test_compiled_loss_scatters_nothing_and_equals_the_eager_loss() -> None:
    """Compiled, the target's logit is picked by a where()-sum, not a gather: a gather's backward
    scatters into a fresh zeroed (N, V) float table that Inductor writes and reads again (3.3 GiB
    of an H200's peak memory at base's 25k positions; 1.3x the loss's time on a CPU). Neither
    graph gathers or scatters, and the loss, NLL and gradient are the eager ones."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[torch.fx.GraphModule] = []

    def keep(graph: torch.fx.GraphModule, _inputs):
        graphs.append(graph)
        return make_boxed_func(graph.forward)  # (unboxed, AOTAutograd warned of it)

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(40, 300, generator=g)
    target = torch.randint(1, 300, (40,), generator=g)
    target[:5] = 0
    compiled = torch.compile(label_smoothed_loss, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    dynamo.reset()
    x = logits.clone().requires_grad_()
    loss, nll = compiled(x, target, 0.1, 0)
    loss.backward()
    y = logits.clone().requires_grad_()
    eager_loss, eager_nll = label_smoothed_loss(y, target, 0.1, 0)
    eager_loss.backward()
    assert len(graphs) == 2  # forward, backward
    ops = {str(node.target) for graph in graphs for node in graph.graph.nodes if node.op == "call_function"}
    assert not [op for op in ops if "scatter" in op or "gather" in op], sorted(ops)
    ranges = [node.meta["val"].dtype for graph in graphs for node in graph.graph.nodes if "arange" in str(node.target)]
    assert ranges and set(ranges) == {torch.int32}, ranges  # ids compared in int32: half of int64's vectors
    torch.testing.assert_close((loss, nll), (eager_loss, eager_nll), rtol=1e-6, atol=0)
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-7)  # entries ~1e-3


def test_compiled_loss_keeps_the_vocabulary_a_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make_loss`'s compiled graph (where attnlab's loss kernel does not take the loss: a GPU,
    here `ATTNLAB_KERNELS=0`) serves every number of rows without recompiling, but knows the
    vocabulary's width: with V symbolic, each index into the (N, V) table divides by an unknown,
    and base's loss ran 2x slower on an H200 (docs/BENCHMARKS.md, GPU round three)."""
    from attnlab.train import regime

    monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    shapes: list[tuple] = []

    def keep(graph: torch.fx.GraphModule, _inputs):
        values = [node.meta["example_value"] for node in graph.graph.nodes if node.op == "placeholder"]
        shapes.append(tuple(next(v for v in values if isinstance(v, torch.Tensor)).shape))  # the logits
        return graph.forward

    compile_ = torch.compile
    monkeypatch.setattr(regime.torch, "compile", lambda fn, **kw: compile_(fn, backend=keep, **kw))
    dynamo.reset()
    loss_fn = regime.make_loss(compile=True)
    g = torch.Generator().manual_seed(3)
    with dynamo.config.patch(error_on_recompile=True):
        for rows in (7, 11, 30):
            logits = torch.randn(rows, 50, generator=g, requires_grad=True)
            target = torch.randint(1, 50, (rows,), generator=g)
            loss, nll = loss_fn(logits, target, 0.1, 0)
            torch.testing.assert_close((loss, nll), label_smoothed_loss(logits, target, 0.1, 0))
    assert len(shapes) == 1, shapes  # one graph for 7, 11 and 30 rows
    ((rows, vocab),) = shapes
    assert isinstance(rows, torch.SymInt) and vocab == 50 and isinstance(vocab, int)


@pytest.fixture(scope="module")
def prepared_tiny_train(data_dir, tmp_path_factory: pytest.TempPathFactory):
    """Multi30k with a 1,000-piece vocabulary, the tiny preset's size."""
    from attnlab.data.prepared import prepare

    out = tmp_path_factory.mktemp("compile") / "m30k"
    prepare("multi30k", out, data_dir=data_dir, vocab_size=1000, echo=lambda _: None)
    return out


def test_compiled_trainer_checks_ids_on_the_host(tmp_path, prepared_tiny_train) -> None:
    """Compiled, the model skips its own id checks; the trainer checks each batch before the
    compiled step, so a bad id is still a one-line error (and nothing is compiled for it)."""
    from attnlab.train.loop import TrainConfig, Trainer

    trainer = Trainer(
        TrainConfig(
            data=str(prepared_tiny_train), out=str(tmp_path / "run"), preset="tiny", compile="model", eval_sentences=0
        )
    )
    batch = next(trainer.batches())
    batch.src[0, 0] = trainer.config.vocab_size + 7
    with pytest.raises(ModelInputError, match="outside the vocabulary"):
        trainer.staged(batch)


def test_compile_mode_auto_compiles_where_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnlab.errors import ConfigError
    from attnlab.train import regime
    from attnlab.train.commands import config_from_args

    assert regime.compile_mode("auto", "cpu", regime.COMPILE_PAYS_FROM)[0] == "loss"
    assert regime.compile_mode("auto", "cpu", regime.COMPILE_PAYS_FROM - 1)[0] == "off"
    assert regime.compile_mode("auto", "cpu", regime.MODEL_PAYS_FROM, bf16=True)[0] == "model"
    assert regime.compile_mode("auto", "cpu", regime.MODEL_PAYS_FROM - 1, bf16=True)[0] == "loss"
    assert regime.compile_mode("auto", "cpu", 10**6, bf16=False)[0] == "loss"
    assert regime.compile_mode("auto", "cuda", regime.COMPILE_PAYS_FROM)[0] in ("model", "off")  # (off: no Triton)
    assert regime.compile_mode("model", "cpu", 10)[0] == "model"  # asked for: compiled however short
    assert regime.compile_mode("off", "cpu", 10**6)[0] == "off"
    assert regime.compile_mode(True, "cpu", 10)[0] == "model" and regime.compile_mode(False, "cpu", 10**6)[0] == "off"
    monkeypatch.setattr(regime.shutil, "which", lambda _: None)
    mode, note = regime.compile_mode("auto", "cpu", 10**6)
    assert mode == "off" and "no C++ compiler" in note and "\n" not in note
    assert regime.compile_mode("model", "cpu", 10**6)[0] == "off"
    with pytest.raises(ConfigError, match="compile must be one of"):
        regime.compile_mode("yes", "cpu", 10)
    base = ["--data", "d", "--out", "o"]
    assert config_from_args(base).compile == "auto"
    assert config_from_args([*base, "--compile"]).compile == "model"  # the flag as it was before
    assert config_from_args([*base, "--compile", "loss"]).compile == "loss"


def test_compiled_training_follows_the_eager_losses(tmp_path, prepared_tiny_train) -> None:
    """The same seed, batches and dropout masks: three updates compiled ("loss", then "model")
    give the eager losses to rounding (compiled sums run in another order: up to 1.1e-5 relative
    by the third update, whose Adam step divides by still-small moments). A changed loss, a lost
    dropout mask or compiled dropout drawing its own random stream moves them by 1e-3 or more
    (3.8e-3 seen; the updates move them by ~0.1).
    A compiled model calls dropout's kernel as one opaque operation (`attnlab::dropout_keep`),
    so it draws eager training's masks."""
    from attnlab.train.loop import TrainConfig, Trainer

    losses = {}
    for mode in ("off", "loss", "model"):
        trainer = Trainer(
            TrainConfig(
                data=str(prepared_tiny_train),
                out=str(tmp_path / mode),
                preset="tiny",
                compile=mode,
                eval_sentences=0,
                probes=0,
                max_tokens=400,
                warmup=10,
            )
        )
        batches, total = trainer.batches(), 0.0
        losses[mode] = []
        for _ in range(3):
            batch = next(batches)
            trainer.train_step([trainer.staged(batch)])
            losses[mode].append((trainer.acc["loss"] - total) / batch.n_tgt_tokens)  # this update's, per token
            total = trainer.acc["loss"]
    assert trainer.compile == "model"
    assert losses["loss"] == pytest.approx(losses["off"], rel=1e-4)
    assert losses["model"] == pytest.approx(losses["off"], rel=1e-4)


def test_compiled_dropout_without_kernels_traces_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernels are not built (or `ATTNLAB_KERNELS=0`), a compiled graph draws its
    masks with the PyTorch twin: still no graph break, and a real mask."""
    from attnlab.model.dropout import Dropout

    monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    dropout = Dropout(0.5).train()
    x = torch.ones(4, 64)
    assert _breaks(dropout, x) == []
    dynamo.reset()
    kept = torch.compile(dropout, backend="eager")(x)
    assert 0.3 < kept.ne(0).float().mean() < 0.7 and set(kept.unique().tolist()) == {0.0, 2.0}


def test_kernels_first_loaded_while_tracing_break_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine where the kernels are not built yet, the first compiled training step builds
    them while dynamo traces dropout: `kernels._built_for` runs outside the graph and its answer
    is kept as a constant, so that build (which dynamo cannot trace) breaks nothing."""
    from attnlab.model import kernels
    from attnlab.model.dropout import Dropout

    real = kernels.compiled

    def first_build(x: torch.Tensor) -> object:  # stands for `cpp_extension.load`, which dynamo cannot trace
        torch._dynamo.graph_break()
        return real(x)

    monkeypatch.setattr(kernels, "compiled", first_build)
    assert _breaks(Dropout(0.5).train(), torch.ones(4, 64)) == []
