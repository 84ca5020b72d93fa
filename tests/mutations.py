"""Break each of the paper's rules on purpose and check that a test fails (a mutation audit).

    .venv/bin/python tests/mutations.py            # every mutation, ~7 minutes on 2 cores
    .venv/bin/python tests/mutations.py "post-norm" "Adam β2"

A test that cannot fail proves nothing (β2 0.99 in place of 0.98 once passed the whole suite).
Each mutation below replaces one line of the committed code (HEAD, unpacked into a temporary
directory, so the working tree is never touched) and runs the tests that guard that rule; it is
KILLED when one of them fails, SURVIVED when they all pass. The exit status is 1 if any survived.
Not part of `make test`: it runs the same tests again 44 times. Written by hand: the mutation
tools of PyPI (mutmut, cosmic-ray) mutate every operator of a module, thousands of runs here,
where this lists the rules of the paper one by one.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Mutation(NamedTuple):
    name: str  # the rule broken
    path: str  # the file changed
    old: str  # the line as written (must occur exactly once)
    new: str  # the line broken
    tests: tuple[str, ...]  # pytest arguments: the tests that guard the rule


REGIME, MODEL, SEARCH = "attnlab/train/regime.py", "attnlab/model/transformer.py", "attnlab/decode/search.py"
ALIGN, BATCHING, UPDATE = "attnlab/decode/alignment.py", "attnlab/data/batching.py", "attnlab/train/update.py"
LOSS_TESTS = ("tests/test_update.py", "tests/test_compile.py", "-k", "loss or smooth")
EQ3 = ("tests/test_train.py::test_learning_rate_is_eq3",)

MUTATIONS = (
    Mutation("Eq. (3) warm-up exponent", REGIME, "step * warmup**-1.5", "step * warmup**-1.0", EQ3),
    Mutation("Eq. (3) d_model exponent", REGIME, "scale * d_model**-0.5 *", "scale * d_model**-0.4 *", EQ3),
    Mutation("Eq. (3) from step 1", REGIME, "    step = max(step, 1)\n", "    step = max(step, 2)\n", EQ3),
    Mutation(
        "label smoothing over all V",
        REGIME,
        "smooth = log_z - x.mean(-1)",
        "smooth = log_z - x[..., 1:].mean(-1)",
        LOSS_TESTS,
    ),
    Mutation(
        "label smoothing weight",
        REGIME,
        "loss = (1.0 - eps) * nll + eps * smooth",
        "loss = (1.0 - eps / 2) * nll + eps * smooth",
        LOSS_TESTS,
    ),
    Mutation(
        "the loss skips padding",
        REGIME,
        "return torch.where(keep, loss, 0.0).sum(), torch.where(keep, nll, 0.0).sum()",
        "return loss.sum(), torch.where(keep, nll, 0.0).sum()",
        LOSS_TESTS,
    ),
    Mutation(
        "Adam β2",
        REGIME,
        "betas=(0.9, 0.98), eps=1e-9",
        "betas=(0.9, 0.99), eps=1e-9",
        ("tests/test_update.py::test_the_optimizer_is_the_papers_adam",),
    ),
    Mutation(
        "loss per target token",
        UPDATE,
        "(loss * self.world / total_tokens).backward()",
        "(loss * self.world / (total_tokens + 1)).backward()",
        ("tests/test_update.py",),
    ),
    Mutation(
        "tokens of the whole update",
        UPDATE,
        "(loss * self.world / total_tokens).backward()",
        "(loss * self.world / batch.tokens).backward()",
        ("tests/test_update.py",),
    ),
    Mutation(
        "sinusoids: sine on even channels",
        "attnlab/model/embedding.py",
        "table[:, sines] = torch.sin(pos * inv_freq)",
        "table[:, sines] = torch.cos(pos * inv_freq)",
        ("tests/test_model.py",),
    ),
    Mutation(
        "sinusoids: base 10000",
        "attnlab/model/embedding.py",
        "torch.pow(10000.0,",
        "torch.pow(1000.0,",
        ("tests/test_model.py",),
    ),
    Mutation(
        "Eq. (1) scale 1/√d_k",
        "attnlab/model/attention.py",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
        "scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.45",
        ("tests/test_model.py",),
    ),
    Mutation(
        "embeddings × √d_model",
        MODEL,
        "self.embed_scale = math.sqrt(config.d_model) if",
        "self.embed_scale = config.d_model**0.45 if",
        ("tests/test_model.py",),
    ),
    Mutation(
        "post-norm",
        MODEL,
        "        return self.norm(x + self.dropout(sublayer(x)))",
        "        return x + self.dropout(sublayer(self.norm(x)))",
        ("tests/test_model.py",),
    ),
    Mutation(
        "a position sees itself",
        MODEL,
        "dtype=torch.bool, device=device).tril()[None, None]",
        "dtype=torch.bool, device=device).tril(-1)[None, None]",
        ("tests/test_model.py",),
    ),
    Mutation(
        "dropout on the embeddings' sums",
        MODEL,
        "        return self.dropout(x + pos)",
        "        return x + pos",
        ("tests/test_dropout.py",),
    ),
    Mutation(
        "dropout on sub-layer outputs",
        MODEL,
        "        return self.norm(x + self.dropout(sublayer(x)))",
        "        return self.norm(x + sublayer(x))",
        ("tests/test_dropout.py",),
    ),
    Mutation(
        "P_drop 0.1",
        "attnlab/model/config.py",
        "    p_drop: float = 0.1  #",
        "    p_drop: float = 0.2  #",
        ("tests/test_model.py",),
    ),
    Mutation(
        "ε_ls 0.1",
        "attnlab/model/config.py",
        "    eps_ls: float = 0.1  #",
        "    eps_ls: float = 0.2  #",
        ("tests/test_model.py",),
    ),
    Mutation(
        "switched-off heads give 0",
        "attnlab/model/multihead.py",
        "out = out * head_mask.to(out.dtype).reshape(-1, self.n_heads, 1, 1)  # switched-off heads give 0",
        "out = out * (1 - head_mask.to(out.dtype)).reshape(-1, self.n_heads, 1, 1)",
        ("tests/test_record.py", "tests/test_compare.py"),
    ),
    Mutation(
        "batches within the token budget",
        BATCHING,
        "fits = np.arange(1, len(window) + 1) * window <= max_tokens",
        "fits = np.arange(1, len(window) + 1) * window <= max_tokens * 1.1",
        ("tests/test_batching.py",),
    ),
    Mutation(
        "a pair's size is its longer side",
        BATCHING,
        "self.sizes = np.maximum(np.asarray(src_lens, np.int64), np.asarray(tgt_lens, np.int64)) + 1",
        "self.sizes = np.asarray(src_lens, np.int64) + 1",
        ("tests/test_batching.py",),
    ),
    Mutation(
        "batches in random order",
        BATCHING,
        "batches = [batches[i] for i in rng.permutation(len(batches))]",
        "batches = list(batches)",
        ("tests/test_batching.py",),
    ),
    Mutation(
        "resume where it stopped",
        BATCHING,
        'self._epoch, self._position = int(state["epoch"]), read // self.world_size',
        'self._epoch, self._position = int(state["epoch"]), max(0, read // self.world_size - 1)',
        ("tests/test_batching.py",),
    ),
    Mutation(
        "average the last checkpoints",
        "attnlab/train/average.py",
        "listed = step_dirs(run_dir)[-last:]",
        "listed = step_dirs(run_dir)[:last]",
        ("tests/test_train.py", "-k", "average"),
    ),
    Mutation(
        "average: the mean",
        "attnlab/train/average.py",
        "return {name: (tensor / len(directories)).float()",
        "return {name: (tensor / len(directories) * 1.01).float()",
        ("tests/test_train.py::test_average_is_elementwise_mean",),
    ),
    Mutation(
        "length penalty (5 + |Y|) / 6",
        SEARCH,
        "return ((5.0 + length) / 6.0) ** alpha",
        "return ((5.0 + length) / 5.0) ** alpha",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "|Y| counts </s>",
        SEARCH,
        "score / length_penalty(t, alpha)",
        "score / length_penalty(t - 1, alpha)",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "input + 50",
        "attnlab/decode/api.py",
        '"translate": {"beam": 4, "alpha": 0.6, "max_len_b": 50}',
        '"translate": {"beam": 4, "alpha": 0.6, "max_len_b": 49}',
        ("tests/test_decode.py",),
    ),
    Mutation(
        "</s> only among the top beam (fairseq)",
        SEARCH,
        "enders = 2 * beam if patience is None else beam",
        "enders = beam",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "stop once beam have finished (fairseq)",
        SEARCH,
        "enough = math.inf if patience is None else",
        "enough = beam if patience is None else",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "patience counts endings among all 2·beam moves",
        SEARCH,
        "enders = 2 * beam if patience is None else beam",
        "enders = 2 * beam",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "2·beam moves a row",
        SEARCH,
        "row_lps, row_tokens, end_lps = moves(stepper, tokens, 2 * beam, eos)",
        "row_lps, row_tokens, end_lps = moves(stepper, tokens, beam, eos)",
        ("tests/test_decode.py",),
    ),
    Mutation(
        "recorded maps exact",
        "attnlab/record/recorder.py",
        "capture.weights.append(weights.detach().float().cpu())",
        "capture.weights.append(weights.detach().bfloat16().float().cpu())",
        ("tests/test_record.py",),
    ),
    Mutation(
        "AER: a sure link is possible",
        "attnlab/decode/aer.py",
        '    p = link_set(possible, "possible") | s  # a sure link is also a possible one',
        '    p = link_set(possible, "possible")',
        ("tests/test_alignment.py",),
    ),
    Mutation(
        "precision against possible links",
        "attnlab/decode/aer.py",
        '"precision": hit_possible / n_hyp if n_hyp else None,',
        '"precision": hit_sure / n_hyp if n_hyp else None,',
        ("tests/test_alignment.py",),
    ),
    Mutation(
        "Shift-Att reads the next row",
        ALIGN,
        "        return weights[1:], 1\n",
        "        return weights[:-1], 0\n",
        ("tests/test_alignment.py",),
    ),
)


STATS, TRACE = "attnlab/record/stats.py", "attnlab/record/trace.py"
STATS_TESTS = ("tests/test_record.py", "tests/test_profile.py")
VIEWS = (
    Mutation(
        "entropy in nats",
        STATS,
        "entropy = -(weights * logs).sum(-1)  #",
        "entropy = -(weights * logs).sum(-1) / 2  #",
        STATS_TESTS,
    ),
    Mutation(
        "distance |i - j|",
        STATS,
        "distance = (weights * np.abs(i - j)).sum(-1)",
        "distance = (weights * (i - j)).sum(-1)",
        STATS_TESTS,
    ),
    Mutation(
        "prev is key i - 1",
        STATS,
        "        diagonal(-1),\n        diagonal(1),",
        "        diagonal(1),\n        diagonal(-1),",
        STATS_TESTS,
    ),
    Mutation("first is key 0", STATS, "        weights[:, :, 0],", "        weights[:, :, -1],", STATS_TESTS),
    Mutation("diagonal within one key", STATS, "(np.abs(j - scaled) <= 1)", "(np.abs(j - scaled) <= 2)", STATS_TESTS),
    Mutation(
        "layer -1 is the top",
        TRACE,
        "index = layer + n_model_layers if layer < 0 else layer",
        "index = layer + n_model_layers - 1 if layer < 0 else layer",
        ("tests/test_record.py", "tests/test_trace_files.py"),
    ),
    Mutation(
        "a head's row, not its number",
        TRACE,
        "                return held.index(index)",
        "                return index",
        ("tests/test_viz.py",),
    ),
)
MUTATIONS += VIEWS  # what the views and profiles read of a trace (44 in all)


def unpacked_head(into: Path) -> None:
    """The committed tree (HEAD) in `into`: mutations never touch the working tree."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def run(mutation: Mutation, tree: Path) -> bool:
    """Apply, test, restore; True when a test failed (the mutation was caught)."""
    path = tree / mutation.path
    source = path.read_text()
    if source.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: the line to break occurs {source.count(mutation.old)} times in {path}")
    path.write_text(source.replace(mutation.old, mutation.new))
    try:
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutation.tests]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        path.write_text(source)
    lines = done.stdout.strip().splitlines()
    print(f"  {lines[-1] if lines else done.stderr.strip()[-200:]}", flush=True)
    return done.returncode == 1  # 1: tests failed; anything else (no tests, an error) is not a catch


def main(names: list[str]) -> int:
    chosen = [m for m in MUTATIONS if not names or m.name in names]
    if names and len(chosen) != len(names):
        raise SystemExit(f"unknown mutation; these exist: {', '.join(m.name for m in MUTATIONS)}")
    survived = []
    with tempfile.TemporaryDirectory(prefix="attnlab-mutations-") as tmp:
        tree = Path(tmp)
        unpacked_head(tree)
        for mutation in chosen:
            started = time.perf_counter()
            caught = run(mutation, tree)
            print(f"{'KILLED  ' if caught else 'SURVIVED'} {mutation.name} ({time.perf_counter() - started:.0f} s)")
            if not caught:
                survived.append(mutation.name)
    print(
        f"{len(chosen) - len(survived)} of {len(chosen)} mutations caught"
        + (f"; survived: {survived}" if survived else "")
    )
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
