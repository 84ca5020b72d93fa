"""The Python API and the translate / parse / record / evaluate commands on a real checkpoint."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from attnlab.data.tokenizer import load_tokenizer
from attnlab.decode.search import greedy_search
from attnlab.decode.stepper import TransformerStepper
from attnlab.errors import AttnlabError, CheckpointError, ConfigError, ModelInputError
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer
from attnlab.record.recorder import record
from attnlab.record.trace import AttentionTrace

PY = sys.executable


@pytest.fixture(scope="module")
def checkpoint(data_dir: Path, tmp_path_factory) -> Path:
    """A random-weight tiny model over a real Multi30k vocabulary (structure, not quality)."""
    from attnlab.cli import main

    prep = tmp_path_factory.mktemp("api") / "prep"
    assert main(["data", "prepare", "multi30k", "--vocab-size", "1000", "--out", str(prep)]) == 0
    torch.manual_seed(3)
    vocab = load_tokenizer(prep).get_piece_size()
    model = Transformer(preset("tiny", vocab_size=vocab, n_layers=2))
    return save_checkpoint(prep.parent / "ckpt", model, prep / "spm.model", meta={"task": "translate"})


def test_translate_returns_text_tokens_score_and_trace(checkpoint: Path) -> None:
    model = attnlab.load(checkpoint)
    result = model.translate("A man rides a bike.", beam=4, record=True, max_len_b=10)
    assert isinstance(result.text, str) and result.tokens[-1] == "</s>"
    assert result.src_tokens[-1] == "</s>" and 1 <= len(result.hypotheses) <= 4  # fewer if the search stops early
    assert result.hypotheses[0] == dataclasses.replace(result, hypotheses=[])  # the best, without a cycle
    assert result.score >= result.hypotheses[-1].score
    trace = result.trace
    assert set(trace.kinds) == {"encoder", "decoder", "cross"}
    assert trace.attention("cross", -1).shape == (4, len(result.tokens), len(result.src_tokens))
    assert trace.model["weights_sha256"] and trace.model["checkpoint"] == str(checkpoint)
    batch = model.translate(
        ["Two dogs.", "A very long sentence about a red car on a street.", "Hi"], beam=2, max_len_b=5
    )
    assert len(batch) == 3 and batch[0].source == "Two dogs."
    single = [model.translate(s, beam=2, max_len_b=5).text for s in ("Two dogs.", "Hi")]
    assert [batch[0].text, batch[2].text] == single  # batching and order do not change results


def test_decoding_trace_equals_teacher_forced(checkpoint: Path) -> None:
    """Maps recorded step by step while decoding (with the cache) equal the teacher-forced maps."""
    api = attnlab.load(checkpoint)
    src_ids, _ = api.encode_source("A girl in a red dress jumps.")
    src = torch.tensor([src_ids])
    with torch.no_grad(), record(api.model) as rec:
        hyp = greedy_search(TransformerStepper(api.model, src), [12])[0]
    tgt = torch.tensor([[api.config.bos_id, *hyp.tokens[:-1]]])
    live = rec.traces(src, tgt, [api.pieces(src_ids)], [api.pieces(hyp.tokens)])[0]
    forced = api.translate(
        "A girl in a red dress jumps.", beam=1, max_len_b=12 - len(src_ids), record=True
    ).trace  # 12 with </s>
    for kind in ("encoder", "decoder", "cross"):
        for layer in range(2):
            assert np.allclose(live.attention(kind, layer), forced.attention(kind, layer), atol=1e-5)


def test_score_gives_reference_maps(checkpoint: Path) -> None:
    model = attnlab.load(checkpoint)
    scored = model.score("A dog runs.", "Ein Hund läuft.", record=True)
    assert scored.logprob < 0 and len(scored.token_logprobs) == len(scored.tokens)
    assert scored.trace.meta["teacher_forced"] and scored.trace.tgt_tokens == scored.tokens


def test_bad_input_is_one_line(checkpoint: Path, tmp_path: Path) -> None:
    model = attnlab.load(checkpoint)
    for bad in ("", "   \t"):
        with pytest.raises(ModelInputError, match="empty"):
            model.translate(bad)
    with pytest.raises(ModelInputError, match="at most"):
        model.translate("word " * 2000)
    long = model.translate("word " * 2000, beam=1, max_len_b=3, truncate=True)
    assert long.truncated and len(long.src_tokens) == model.config.max_len
    assert model.translate("日本語のテキスト ✓ ∑", beam=1, max_len_b=3).tokens  # unknown characters decode
    with pytest.raises(AttnlabError, match="not a parser"):
        model.parse("A sentence .")
    with pytest.raises(CheckpointError, match="not an attnlab checkpoint"):
        attnlab.load(tmp_path)
    with pytest.raises(CheckpointError, match="expected a checkpoint directory's path, got NoneType"):
        attnlab.load(None)  # was a TypeError from pathlib
    with pytest.raises(CheckpointError, match="got an empty one"):
        attnlab.load("")  # was ".: a run directory without a valid checkpoint"
    for dtype in (["fp32"], {"fp32"}, None, 32):  # a list was "TypeError: unhashable type: 'list'"
        with pytest.raises(AttnlabError, match=r"^dtype must be one of \['bf16', 'fp32', 'int8'\], got "):
            attnlab.load(checkpoint, dtype=dtype)


@pytest.mark.parametrize("bad", [-1, 99999, 1.0, True, "3", None])
def test_pieces_of_ids_outside_the_vocabulary_are_one_line(checkpoint: Path, bad: object) -> None:
    """`pieces([-1])` returned the last piece without a word; 99999 was an IndexError, 1.0 a TypeError;
    `detokenize` the same."""
    model = attnlab.load(checkpoint)
    for source in (False, True):
        with pytest.raises(ModelInputError, match=r"ids must be whole numbers in \[0, \d+\), got "):
            model.pieces([3, bad], source=source)
    with pytest.raises(ModelInputError, match=r"ids must be whole numbers in \[0, \d+\), got "):
        model.detokenize([3, bad], "a")  # (99999 was sentencepiece's IndexError)
    assert model.pieces([np.int64(3), 0]) == model.pieces([3, 0]) and model.pieces([]) == []


def test_load_reads_a_home_relative_path(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`attnlab.load("~/runs/x")` said "~/runs/x: not a directory" of a directory that exists."""
    monkeypatch.setenv("HOME", str(checkpoint.parent))
    assert attnlab.load(f"~/{checkpoint.name}").translate("A dog runs.", beam=1).text


def test_a_run_loads_its_newest_valid_checkpoint_warning_at_the_callers_line(checkpoint: Path, tmp_path: Path) -> None:
    """The damaged newest checkpoint is skipped with a warning under the caller's own line: it
    named `attnlab/decode/api.py` and showed its source line."""
    for step in (100, 200):
        shutil.copytree(checkpoint, tmp_path / "run" / "checkpoints" / f"step_{step}")
    (tmp_path / "run" / "checkpoints" / "step_200" / "model.safetensors").write_bytes(b"\0" * 1000)
    with pytest.warns(UserWarning) as said:
        model = attnlab.load(tmp_path / "run")
    assert model.path.endswith("step_100") and [w.filename for w in said] == [__file__] * 2
    assert re.match(r"skipping damaged checkpoint: .*step_200", str(said[0].message))
    assert str(said[1].message) == f"reading step_100, the newest checkpoint of {tmp_path / 'run'} that verifies"


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"beam": 0}, "beam must be"),
        ({"beam": -3}, "beam must be"),
        ({"beam": 2.5}, "beam must be"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": 400}, "must be a number from 0 to 10"),  # was an OverflowError
        ({"max_len_b": -100}, "max_len_b"),
        ({"max_len_a": float("inf")}, "max_len_a"),
        ({"max_len_a": 0.0, "max_len_b": 0}, "not both 0"),
        ({"n_best": 0}, "n_best"),
        ({"n_best": 5, "beam": 4}, "n_best 5 > beam 4"),  # returned what the beam had finished, often fewer
        ({"record": "no"}, "record must be True or False"),  # a true string: it recorded
        ({"truncate": "no"}, "truncate must be True or False"),  # cut an over-long input without a word
        ({"batch_tokens": 0}, "batch_tokens"),
        ({"patience": 0}, "patience must be a number > 0"),
        ({"patience": float("nan")}, "patience must be"),
        ({"patience": "1"}, "patience must be"),
        ({"patience": 1e6}, "≤ 1000"),
    ],
)
def test_search_settings_that_would_decode_something_else_are_refused(
    checkpoint: Path, setting: dict, match: str
) -> None:
    """Each of these once decoded without a word: beam ≤ 0 silently greedy, NaN α accepted,
    max_len_b = -100 an empty translation."""
    model = attnlab.load(checkpoint)
    with pytest.raises(ConfigError, match=match):
        model.translate("A dog runs.", **setting)


def test_a_target_too_long_to_score_is_refused_or_cut_visibly(checkpoint: Path) -> None:
    """`score` once cut an over-long target silently and reported the log-probability of the
    cut one as the reference's, with `truncated` False."""
    model = attnlab.load(checkpoint)
    long = "word " * 2000
    with pytest.raises(ModelInputError, match="the target has .* pieces; this model takes at most"):
        model.score("A dog.", long, record=False)
    cut = model.score("A dog.", long, record=True, truncate=True)
    assert cut.truncated and len(cut.tokens) == model.config.max_len
    # its text is what was scored (the explorer printed all 2,000 words above the views)
    assert long.startswith(cut.text) and len(cut.text) < len(long) / 2
    assert cut.trace.meta["output"] == cut.text
    assert not model.score("A dog.", "Ein Hund.", record=False).truncated
    with pytest.raises(ModelInputError, match="expected a target text, got NoneType"):
        model.score("A dog.", None)
    with pytest.raises(ConfigError, match="truncate must be True or False, got 'no'"):
        model.score("A dog.", long, record=False, truncate="no")  # cut it, as truncate=True
    assert model.score("A dog.", "Ein Hund.", record=np.bool_(False)).trace is None


@pytest.mark.parametrize(
    ("heads", "match"),
    [
        ({("sideways", 0): [0]}, "unknown attention kind"),
        ({("cross", 17): [0]}, "layer 17"),
        ({("cross", 0): [99]}, "head"),
        ({"cross": [0]}, "is \\(kind, layer\\)"),
        ({("cross", 2): 0}, "list of head indices"),
        ({("cross", 0): [True]}, "head True"),
        ({("cross", "0"): [0]}, "layer '0'"),
        ({("cross", 0.0): [0]}, "layer 0.0"),
        ([("cross", 0)], "dict"),
    ],
)
def test_ablating_heads_the_model_lacks_is_one_line(checkpoint: Path, heads: dict, match: str) -> None:
    """A misspelt kind or a layer out of range once ablated nothing without a word (the output
    looked like the heads did nothing); a head out of range raised an IndexError."""
    with pytest.raises(AttnlabError, match=match):
        attnlab.load(checkpoint).translate("A dog.", ablate_heads=heads)


def test_an_ablation_of_what_is_not_a_model_or_trace_or_with_its_own_settings_is_one_line(checkpoint: Path) -> None:
    """`ablation(m, t, heads, record=True)` was "multiple values for keyword argument 'record'";
    a None model or trace an AttributeError from deep inside."""
    from attnlab.decode.ablation import ablation

    model, heads = attnlab.load(checkpoint), {("cross", 0): [0]}
    trace = model.translate("A dog.", beam=1, max_len_b=5, record=True).trace
    for setting in ("record", "truncate", "ablate_heads"):
        with pytest.raises(AttnlabError, match=f"^ablation sets {setting} itself; pass search settings only"):
            ablation(model, trace, heads, **{setting: True})
    with pytest.raises(AttnlabError, match="the trace is a NoneType, not an AttentionTrace"):
        ablation(model, None, heads)
    with pytest.raises(AttnlabError, match=r"expected a model from attnlab.load\(...\), got NoneType"):
        ablation(None, trace, heads)
    assert ablation(model, trace, heads, beam=1, max_len_b=5).original_tokens == trace.tgt_tokens
    # a trace of another model of the same vocabulary ran without a word; an edited meta["text"]
    # was decoded in the trace's sentence's place
    other = attnlab.load(checkpoint)
    with torch.no_grad():
        other.model.decoder["layers"][0].ffn.w_1.weight.mul_(1.5)
    with pytest.raises(AttnlabError, match="the trace was recorded by another model"):
        ablation(other, trace, heads, beam=1, max_len_b=5)
    trace.meta["text"] = "The weather is nice today, and the children play in the garden."
    assert ablation(model, trace, {}, beam=1, max_len_b=5).tokens == trace.tgt_tokens


def test_a_head_named_twice_is_switched_off_once_whichever_its_names(checkpoint: Path) -> None:
    """("cross", 2) and ("cross", -1) are one layer of a 3-layer model: once only the first
    entry of the two was applied, without a word."""
    model = attnlab.load(checkpoint)
    top = model.config.n_layers - 1

    def logprob(heads: dict) -> float:
        with attnlab.ablate(model, heads):
            return model.score("A dog runs in the park.", "Ein Hund rennt im Park.", record=False).logprob

    both = logprob({("cross", top): [0, 1]})
    assert logprob({("cross", top): [0], ("cross", -1): [1]}) == pytest.approx(both, abs=1e-6)
    assert abs(both - logprob({("cross", top): [0]})) > 0.01  # head 1 matters here: the check can fail


def test_record_and_ablate_take_what_load_returns_and_refuse_a_layer_out_of_range(checkpoint: Path) -> None:
    model = attnlab.load(checkpoint)
    src = torch.tensor([model.encode_source("A dog.")[0]])
    with attnlab.ablate(model, {("cross", 0): [0]}), attnlab.record(model, kinds=["cross"], heads=[-1]) as rec:
        model.model(src, torch.tensor([[model.config.bos_id]]))
    assert rec.weights("cross", 0).shape[1] == 1
    with pytest.raises(AttnlabError, match="layer 7 does not exist"):  # `% n_layers` once recorded layer 1
        attnlab.record(model, layers=[7]).__enter__()
    with pytest.raises(AttnlabError, match="expected an attnlab model"):
        attnlab.record("checkpoints/multi30k-en-de").__enter__()


@pytest.mark.parametrize("bad", [None, b"A dog.", 42])
def test_translate_names_what_it_got_instead_of_text(checkpoint: Path, bad: object) -> None:
    with pytest.raises(ModelInputError, match="expected a text or a list of texts, got"):
        attnlab.load(checkpoint).translate(bad)


def test_cli_translate_refuses_bad_settings_in_one_line(checkpoint: Path) -> None:
    done = subprocess.run(
        [PY, "-m", "attnlab", "translate", "--checkpoint", str(checkpoint), "--max-len-b", "-100"],
        capture_output=True,
        text=True,
        input="A dog runs.\n",
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "max_len_b" in done.stderr


def test_cli_translate_keeps_one_line_per_input(checkpoint: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("A dog.\n\nTwo cats sleep.\n" + "x " * 1000 + "\n")
    done = subprocess.run(
        [
            PY,
            "-m",
            "attnlab",
            "translate",
            "--checkpoint",
            str(checkpoint),
            "--input",
            str(src),
            "--beam",
            "2",
            "--max-len-b",
            "4",
            "--dtype",
            "bf16",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr  # line 4 is too long: answered empty, and the status says a line failed
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    assert "line 2 is empty" in done.stderr and "line 4" in done.stderr
    bad = subprocess.run(
        [PY, "-m", "attnlab", "translate", "--checkpoint", str(tmp_path)], capture_output=True, text=True, input=""
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_an_output_spelling_a_line_break_stays_one_line(checkpoint: Path) -> None:
    """A model can emit the byte pieces of any character, U+001D or U+2028 as readily as a letter
    (a random one did), and str.splitlines() splits on those: `translate` printed the output of
    one input line as two."""
    model = attnlab.load(checkpoint)
    ids = model.target_tokenizer.encode("Ein\x1dHund\u2028läuft\r\n.")
    assert model.target_tokenizer.decode(ids).count("\n") == 1  # byte fallback spells them all
    assert model.detokenize(ids, "A dog runs.") == "Ein Hund läuft ."


def test_cli_record_writes_loadable_traces(checkpoint: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            PY,
            "-m",
            "attnlab",
            "record",
            "--checkpoint",
            str(checkpoint),
            "A dog.",
            "Two cats.",
            "--out",
            str(tmp_path),
            "--beam",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    traces = sorted(tmp_path.glob("*.trace"))
    assert len(traces) == 2 and AttentionTrace.load(traces[0]).src_tokens[-1] == "</s>"


def test_evaluate_bleu_equals_sacrebleu_command(data_dir: Path, tmp_path: Path) -> None:
    refs = data_dir / "multi30k" / "test2016.de"
    lines = refs.read_text().splitlines()
    hyp = tmp_path / "hyp.de"  # a degraded copy of the references: a non-trivial BLEU
    hyp.write_text("".join(" ".join(line.split()[: max(1, len(line.split()) * 2 // 3)]) + "\n" for line in lines))
    ours = subprocess.run(
        [PY, "-m", "attnlab", "evaluate", "--hyp", str(hyp), "--ref", str(refs), "--tokenized"],
        capture_output=True,
        text=True,
    )
    assert ours.returncode == 0, ours.stderr
    theirs = subprocess.run(
        [PY, "-m", "sacrebleu", str(refs), "-i", str(hyp), "-m", "bleu", "-b", "-w", "4"],
        capture_output=True,
        text=True,
    )
    exact = subprocess.run(
        [PY, "-m", "attnlab", "evaluate", "--hyp", str(hyp), "--ref", str(refs), "--json"],
        capture_output=True,
        text=True,
    )
    bleu_line = ours.stdout.splitlines()[0]
    assert bleu_line.startswith("BLEU = ") and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in bleu_line
    assert json.loads(exact.stdout)["bleu"] == pytest.approx(float(theirs.stdout.strip()), abs=1e-4)
    assert "NOT sacreBLEU" in ours.stdout


def test_a_task_attnlab_lacks_or_a_config_without_its_model_is_named(checkpoint: Path, tmp_path: Path) -> None:
    """meta.task "summarize" was read as a translator; a config.json without "model" said
    "not a usable attnlab config ('model')", a KeyError's repr."""
    import shutil

    from attnlab.model.checkpoint import read_config, update_meta

    edited = Path(shutil.copytree(checkpoint, tmp_path / "edited"))
    update_meta(edited, task="summarize")
    with pytest.raises(CheckpointError, match="meta.task must be translate or parse, not 'summarize'"):
        attnlab.load(edited)
    bare = Path(shutil.copytree(checkpoint, tmp_path / "bare"))
    (bare / "config.json").write_text(json.dumps({"meta": {}}))
    with pytest.raises(
        CheckpointError, match='config.json: not a usable attnlab config \\(it has no "model" section\\)'
    ):
        read_config(bare)  # (`load` names the edit first: the manifest's size and checksum)


def test_a_translator_whose_meta_says_parse_is_one_line(checkpoint: Path, tmp_path: Path) -> None:
    """An edited meta.task raised a ValueError (a traceback in every CLI) from the tree constraint."""
    import shutil

    from attnlab.model.checkpoint import update_meta

    edited = Path(shutil.copytree(checkpoint, tmp_path / "edited"))
    update_meta(edited, task="parse")
    with pytest.raises(CheckpointError, match="it is no parser"):
        attnlab.load(edited).translate("A dog.")


def test_a_score_means_one_thing_at_any_beam_and_for_a_reference(checkpoint: Path) -> None:
    """Greedy decoding reported the raw log P and `score()` the mean per token, while beam
    search reported log P / lp(Y): three numbers under one name that could not be compared."""
    from attnlab.decode.search import length_penalty

    model = attnlab.load(checkpoint)
    for beam in (1, 4):
        best = model.translate("A man rides a bike.", beam=beam, max_len_b=10)
        assert best.score == pytest.approx(best.logprob / length_penalty(len(best.tokens), 0.6), rel=1e-6)
        assert abs(best.score - best.logprob) > 1e-3  # the check can fail: lp(Y) ≠ 1 here
    reference = model.score("A man rides a bike.", best.text, record=False)  # the beam's own output, forced
    assert reference.tokens == best.tokens and reference.score == pytest.approx(best.score, abs=1e-4)


def test_generate_leaves_a_training_model_training(checkpoint: Path) -> None:
    """Validation through `generate` inside a training loop switched dropout off for good."""
    from attnlab.decode.search import generate

    net = attnlab.load(checkpoint).model
    src = torch.tensor([[5, 6, 3]])
    net.train()
    generate(net, src, beam=2, max_len_b=3)
    assert net.training
    net.eval()
    generate(net, src, beam=2, max_len_b=3)
    assert not net.training


def test_a_result_names_the_characters_the_vocabulary_lacks(checkpoint: Path) -> None:
    """The command line, the explorer and the widgets named them; `translate` and `score` from
    Python said nothing ("I am 25 years old." read "2" and "5" as byte pieces, and came out
    '2012 schreiben altes.')."""
    model = attnlab.load(checkpoint)
    assert model.translate("A dog runs .").unknown == [] == model.score("A dog runs .", "Ein Hund .").unknown
    found = model.translate(["A dog 我 runs 我 .", "A dog runs ."], beam=2)
    assert found[0].unknown == ["我"] == found[0].hypotheses[1].unknown and found[1].unknown == []
    assert model.score("我是", "Ein Hund .").unknown == ["我", "是"]


def test_a_model_left_training_scores_and_records_as_in_eval(checkpoint: Path) -> None:
    """After fine-tuning in a notebook the model is in train mode: `score` gave one pair -0.61,
    -0.89, -1.08 in three calls, and `translate(record=True)` drew dropout into its trace."""
    model = attnlab.load(checkpoint)
    scored, translated = model.score("A dog runs .", "Ein Hund rennt ."), model.translate("A dog runs .", record=True)
    model.model.train()
    for _ in range(3):
        again = model.score("A dog runs .", "Ein Hund rennt .")
        assert again.token_logprobs == scored.token_logprobs
        assert np.array_equal(again.trace.attention("cross", 0), scored.trace.attention("cross", 0))
        assert np.array_equal(
            model.translate("A dog runs .", record=True).trace.attention("decoder", 1),
            translated.trace.attention("decoder", 1),
        )
    assert model.model.training  # left as the caller had it


@pytest.mark.parametrize(
    ("src", "settings", "match"),
    [
        (torch.zeros(0, 4, dtype=torch.long), {}, "empty"),  # was a RuntimeError from min()
        (torch.tensor([5, 6, 3]), {}, "must be a \\(batch, length\\)"),  # a 1-D row: an IndexError
        (torch.tensor([[5, 6, 3], [0, 0, 0]]), {}, "row 1 is all padding"),  # was translated anyway
        (torch.tensor([[5, 6, 3]]), {"beam": 600}, "more than half"),  # a RuntimeError from view()
    ],
)
def test_generate_refuses_what_it_cannot_decode_in_one_line(
    checkpoint: Path, src: torch.Tensor, settings: dict, match: str
) -> None:
    from attnlab.decode.search import generate

    with pytest.raises(AttnlabError, match=match) as error:
        generate(attnlab.load(checkpoint).model, src, **settings)
    assert "\n" not in str(error.value)


def test_a_list_names_the_text_it_refuses_and_traces_say_their_precision(checkpoint: Path) -> None:
    model = attnlab.load(checkpoint)
    with pytest.raises(ModelInputError, match="text 2 of 3: the input is empty"):
        model.translate(["A dog.", "A cat.", " "])
    with pytest.raises(ModelInputError, match="^the input is empty"):  # one text: nothing to number
        model.translate(" ")
    result = model.translate("A dog.", beam=2, max_len_b=4, record_hypotheses=True)  # implies record
    assert all(h.trace is not None for h in result.hypotheses)
    assert result.trace.model["dtype"] == "float32"
    assert attnlab.load(checkpoint, dtype="bf16").translate("A dog.", record=True).trace.model["dtype"] == "bfloat16"


def test_results_hold_no_cycle(checkpoint: Path) -> None:
    """A result listed among its own hypotheses made ==, `in`, asdict and pandas recurse forever."""
    model = attnlab.load(checkpoint)
    a, b = model.translate(["A dog runs.", "A cat."], beam=2, max_len_b=5)
    assert a != b and a in [a] and dataclasses.asdict(a)["hypotheses"][0]["text"] == a.text
    assert a.hypotheses[0].tokens == a.tokens and a.hypotheses[0].score == a.score
    assert all(h.hypotheses == [] for h in a.hypotheses)


@pytest.mark.parametrize("text", ["\u200b", "\ufeff", "\x00", " \u200b\u2060 "])
def test_invisible_input_is_empty(checkpoint: Path, text: str) -> None:
    """Zero-width spaces, a BOM or NUL alone were "translated" into a sentence the model made up."""
    model = attnlab.load(checkpoint)
    with pytest.raises(ModelInputError, match="the input is empty"):
        model.translate(text)
    with pytest.raises(ModelInputError, match="the target is empty"):
        model.score("A dog.", text)


@pytest.mark.parametrize(("max_len_a", "max_len_b"), [(0.05, 0), (0.1, 0)])
def test_a_length_limit_without_room_is_refused(checkpoint: Path, max_len_a: float, max_len_b: int) -> None:
    """a · input + b < 1 leaves room for </s> only: an empty translation, silently; 1 is one piece."""
    model = attnlab.load(checkpoint)
    with pytest.raises(ConfigError, match="leaves no room for one token before </s>"):
        model.translate("A dog runs in the park.", max_len_a=max_len_a, max_len_b=max_len_b)
    assert len(model.translate("A dog runs in the park.", max_len_a=0.0, max_len_b=1).tokens) == 2  # a piece, </s>


def test_a_huge_length_limit_is_as_long_as_the_model_allows(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--max-len-a 1e308` was an OverflowError traceback (a · input was infinity before the model's
    cap): any limit past the model's max_len decodes as that limit does."""
    from attnlab.cli import main

    model = attnlab.load(checkpoint)
    text = "A dog runs in the park."
    capped = model.translate(text, beam=1, max_len_a=1e4)
    assert model.translate(text, beam=1, max_len_a=1e308) == capped
    assert (
        model.translate([text, "Hi"], beam=2, max_len_a=1e308, max_len_b=10**9)[0].text
        == model.translate(text, beam=2, max_len_a=1e4).text
    )
    source = tmp_path / "in.en"
    source.write_text(text + "\n")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--beam", "1"]
    assert main([*argv, "--max-len-a", "1e308"]) == 0
    assert capsys.readouterr().out == capped.text + "\n"


def test_evaluate_refuses_a_source_too_long_or_cuts_it_with_truncate(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaluate --checkpoint --src` scored the translations of cut sources, exit 0, not a word
    said: a line too long is refused as `translate` refuses it, or cut with --truncate, saying so."""
    from attnlab.cli import main

    room = attnlab.load(checkpoint).config.max_len - 1
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A dog runs.\n" + " ".join(["dog"] * (room + 50)) + "\n")
    ref.write_text("Ein Hund rennt.\nHund\n")
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "1", "--json"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"attnlab evaluate: error: {src}:2: the input has ") and "\n" not in error
    assert error.endswith(f" pieces; this model takes at most {room}")
    assert main([*argv, "--truncate"]) == 0
    captured = capsys.readouterr()
    notice = f"attnlab evaluate: warning: 1 of 2 lines cut to the {room} pieces this model takes (the first: line 2)"
    assert notice in captured.err.splitlines() and 0 <= json.loads(captured.out)["bleu"] <= 100
    assert main(["evaluate", "--hyp", str(ref), "--ref", str(ref), "--truncate"]) == 2  # nothing decoded to cut
    assert "--truncate is a decoding option" in capsys.readouterr().err


def test_evaluate_decodes_sources_from_stdin(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evaluate --src -` failed with "cannot read -: No such file", where `translate` reads stdin."""
    from attnlab.cli import main

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"A dog runs.\nTwo cats.\n")))
    ref, out = tmp_path / "ref.de", tmp_path / "out.de"
    ref.write_text("Ein Hund rennt.\nZwei Katzen.\n")
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--src", "-", "--ref", str(ref), "--beam", "1"]
    assert main([*argv, "--out", str(out), "--json"]) == 0
    model = attnlab.load(checkpoint)
    assert out.read_text() == "".join(model.translate(s, beam=1).text + "\n" for s in ("A dog runs.", "Two cats."))


@pytest.mark.parametrize("alpha", [float("nan"), -1, 1e6, "0.6", None])
def test_score_checks_alpha_as_translate_does(checkpoint: Path, alpha: object) -> None:
    model = attnlab.load(checkpoint)
    if alpha is None:  # the task's own α is fine
        assert math.isfinite(model.score("A dog", "Ein Hund", record=False).score)
        return
    with pytest.raises(ConfigError, match="alpha"):
        model.score("A dog", "Ein Hund", alpha=alpha, record=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", [{"alpha": "0.6"}, {"max_len_b": "5"}, {"max_len_a": None}, {"beam": True}])
def test_settings_of_the_wrong_type_are_one_line(checkpoint: Path, setting: dict) -> None:
    with pytest.raises(ConfigError):
        attnlab.load(checkpoint).translate("A dog", **setting)


def test_numpy_numbers_are_numbers(checkpoint: Path) -> None:
    model = attnlab.load(checkpoint)
    plain = model.translate("A dog runs.", beam=2, n_best=2, alpha=0.5, max_len_a=1.0, max_len_b=5)
    numpy = model.translate(
        "A dog runs.",
        beam=np.int64(2),
        n_best=np.int32(2),
        alpha=np.float64(0.5),
        max_len_a=np.float32(1),
        max_len_b=np.int64(5),
        batch_tokens=np.int64(100),  # refused, while beam=np.int64(2) was taken
    )
    assert [h.tokens for h in numpy.hypotheses] == [h.tokens for h in plain.hypotheses]


def test_a_home_directory_of_no_such_user_is_a_path_that_does_not_exist(tmp_path: Path) -> None:
    """`~name` of an unknown user stays as written, as a shell leaves it: `Path.expanduser` raised
    RuntimeError, so `translate --checkpoint '~nouser/x'` and `AttentionTrace.load` were tracebacks."""
    with pytest.raises(CheckpointError, match=r"^~no-such-user-attnlab/x: does not exist$"):
        attnlab.load("~no-such-user-attnlab/x")
    with pytest.raises(CheckpointError, match=r"^~no-such-user-attnlab/x\.trace: no such trace file$"):
        attnlab.AttentionTrace.load("~no-such-user-attnlab/x.trace")
    done = subprocess.run(
        [sys.executable, "-m", "attnlab", "translate", "--checkpoint", "~no-such-user-attnlab/x"],
        input="a dog\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "attnlab translate: error: ~no-such-user-attnlab/x: does not exist"
    ]


def test_weights_made_nan_in_memory_are_one_line(checkpoint: Path) -> None:
    """A checkpoint of NaN weights is refused when loaded; weights made NaN after it (a user's
    experiment) killed every hypothesis: an IndexError with beam 4, "⁇ ⁇ …" scored NaN with beam 1."""
    model = attnlab.load(checkpoint)
    with torch.no_grad():
        for parameter in model.model.decoder["layers"][-1].parameters():
            parameter.fill_(float("nan"))
    for call in (
        lambda: model.translate("A dog runs."),
        lambda: model.translate("A dog runs.", beam=1),
        lambda: model.score("A dog runs.", "Ein Hund läuft."),
    ):
        with pytest.raises(AttnlabError, match="the model computed NaN, not probabilities") as error:
            call()
        assert "\n" not in str(error.value)
