"""Head importance (`attnlab.record.importance`, `attnlab.decode.importance`; Michel et al. 2019) and the pruning curve: the
gradient is the log-likelihood's derivative in each head's gate (checked by finite differences),
one per sentence even in a batch, the exact measure is what switching the head off costs, the
order is least important first after each layer's ℓ2 normalisation, the curve decodes with those
heads off, and bad input is one line.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pytest
import torch
from test_explorer_views import decode, explorer, lab  # noqa: F401 (the module's fixture)
from test_patching_views import one_line

from attnlab.decode.ablation import token_logprobs
from attnlab.decode.api import Model
from attnlab.decode.evaluate import bleu_chrf
from attnlab.decode.importance import head_importance, pruning_curve
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_MASKS, attached
from attnlab.record import ablate
from attnlab.record.equation import trace_ids
from attnlab.record.importance import HeadImportance, trace_importance
from attnlab.record.recorder import hook_point
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
SOURCES = [
    "A little girl climbs into a wooden playhouse.",
    "Two dogs run through the snow.",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
]
REFERENCES = [
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Zwei Hunde laufen durch den Schnee.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt Fenster.",
]


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


def log_likelihood(model: Model, src: torch.Tensor, tgt: torch.Tensor, gates: dict) -> float:
    """A pair's teacher-forced log-likelihood, computed in the model's own precision, with some
    heads' gates set ({(kind, layer): (h,) gate values})."""
    modules = {hook_point(m): m for m in model.model.attention_modules()}
    with torch.no_grad(), attached(HEAD_MASKS, {modules[point]: g for point, g in gates.items()}):
        lprobs = torch.log_softmax(model.model(src[None], torch.cat([tgt.new_tensor([2]), tgt[:-1]])[None]), -1)
    return float(lprobs[0].gather(-1, tgt[:, None]).sum())


def test_the_gradient_is_the_derivative_in_the_heads_gate() -> None:
    """Central differences of the log-likelihood in single gates match the recorded gradient.
    In float64: the log-likelihood is curved enough near a gate of 1 that differences over ±0.01
    are 10% off the derivative, and fp32 rounding swamps smaller steps. A gradient of the wrong
    quantity, or a gate that does not reach the head's output, fails by far more (gradients here:
    0.05-2 nats per unit gate)."""
    model = load(CHECKPOINT)
    model.model.double()
    assert model.config.bos_id == 2
    trace = model.score(SOURCES[0], REFERENCES[0]).trace
    src, tgt = (torch.tensor(ids) for ids in trace_ids(model, trace))
    importance = trace_importance(model, trace)
    eps = 1e-4
    for kind, layer, head in [("encoder", 1, 3), ("decoder", 0, 1), ("cross", 2, 2), ("cross", 0, 0)]:
        up, down = (
            torch.ones(model.config.n_heads, dtype=torch.float64),
            torch.ones(model.config.n_heads, dtype=torch.float64),
        )
        up[head], down[head] = 1 + eps, 1 - eps
        slope = (
            log_likelihood(model, src, tgt, {(kind, layer): up})
            - log_likelihood(model, src, tgt, {(kind, layer): down})
        ) / (2 * eps)
        recorded = importance.gradient[KINDS.index(kind), layer, head]
        assert recorded == pytest.approx(abs(slope), rel=0.01, abs=1e-3), (kind, layer, head)


def test_each_sentence_has_its_own_gates_in_a_batch(model: Model) -> None:
    """The corpus score is the mean of each sentence's |gradient|: one gate shared by a batch
    would give |sum| instead, smaller wherever the sentences pull a gate opposite ways."""
    together = head_importance(model, SOURCES, REFERENCES)
    alone = [trace_importance(model, model.score(s, r).trace) for s, r in zip(SOURCES, REFERENCES, strict=True)]
    np.testing.assert_allclose(together.gradient, np.mean([a.gradient for a in alone], axis=0), rtol=1e-4, atol=1e-5)
    assert together.sentences == 3 and together.tokens == sum(a.tokens for a in alone)
    assert together.ablation is None


def test_exact_importance_is_the_log_likelihood_lost_without_the_head(model: Model) -> None:
    """`exact` measures log P(y|x) − log P(y|x; head off) one head at a time, as the ablation view
    scores it token by token; and the gradient, its first-order estimate, ranks heads alike."""
    importance = head_importance(model, SOURCES[:1], REFERENCES[:1], exact=True)
    trace = model.score(SOURCES[0], REFERENCES[0]).trace
    ids = trace_ids(model, trace)
    full = sum(token_logprobs(model, *ids))
    for kind, layer, head in [("encoder", 1, 3), ("cross", 2, 1)]:
        off = sum(token_logprobs(model, *ids, {(kind, layer): [head]}))
        assert importance.ablation[KINDS.index(kind), layer, head] == pytest.approx(full - off, abs=1e-3)
    assert importance.order("ablation") != importance.order("gradient")  # two measures, not one read twice


def test_the_gradient_ranks_heads_as_switching_them_off_does(model: Model) -> None:
    """On 60 dev sentences the first-order estimate and the exact cost agree on which heads matter
    (Spearman 0.83 on 200 sentences); a gradient of the wrong quantity would not."""
    lines = [(ROOT.parent / "shared" / "data" / "multi30k" / f"valid.{lang}") for lang in ("en", "de")]
    if not lines[0].exists():
        pytest.skip("the shared Multi30k copy is not here")
    sources, references = (path.read_text(encoding="utf-8").splitlines()[:60] for path in lines)
    importance = head_importance(model, sources, references, exact=True)
    ranks = [np.argsort(np.argsort(a.ravel())) for a in (importance.gradient, importance.ablation)]
    assert np.corrcoef(*ranks)[0, 1] > 0.6


def test_a_column_or_an_array_of_sentences_is_read_as_its_list(model: Model) -> None:
    """A notebook's pandas column or NumPy array of sentences was "The truth value of a Series is
    ambiguous" (head importance, the pruning curve, corpus patching); a generator is named."""
    import pandas as pd

    from attnlab.decode.patching import corpus_patching

    frame = pd.DataFrame({"en": SOURCES[:2], "de": REFERENCES[:2]})
    listed = head_importance(model, SOURCES[:2], REFERENCES[:2]).gradient
    assert np.array_equal(head_importance(model, frame.en, frame.de).gradient, listed)
    assert np.array_equal(head_importance(model, frame.en.to_numpy(), np.array(REFERENCES[:2])).gradient, listed)
    with pytest.raises(AttnlabError, match="^expected a list of source sentences, got generator$"):
        head_importance(model, (s for s in SOURCES))
    curve = pruning_curve(model, [("cross", 0, 0)], SOURCES[:2], REFERENCES[:2], [0, 1], beam=1)
    assert pruning_curve(model, [("cross", 0, 0)], frame.en, frame.de, [0, 1], beam=1) == curve
    clean = pd.Series([SOURCES[2]])
    patched = corpus_patching(model, clean, clean.str.replace("A man", "A woman"))
    assert np.array_equal(
        patched.share,
        corpus_patching(model, [SOURCES[2]], [SOURCES[2].replace("A man", "A woman")]).share,
        equal_nan=True,
    )


def test_a_blank_reference_is_refused_by_the_pruning_curve(model: Model) -> None:
    """Blank references gave a curve of BLEU 0.00 against ref_len 0, as `evaluate` refuses them."""
    with pytest.raises(AttnlabError, match="^reference 1 is empty: its output would be scored against nothing$"):
        pruning_curve(model, [("cross", 0, 0)], SOURCES[:2], [REFERENCES[0], " "], [0], beam=1)


def test_heads_off_in_the_trace_stay_off(model: Model) -> None:
    """A trace recorded with heads off is weighed with them off: their gates read 0 and the rest
    are the gradients of the ablated model, not of the whole one."""
    heads = {("encoder", 1): [3], ("cross", 2): [2]}
    trace = model.translate(SOURCES[1], record=True, ablate_heads=heads).trace
    importance = trace_importance(model, trace)
    assert importance.gradient[0, 1, 3] == importance.gradient[2, 2, 2] == 0
    pair = trace_ids(model, trace)
    whole = head_importance(model, [SOURCES[1]], [model.target_tokenizer.decode(pair[1][:-1])])
    assert np.abs(importance.gradient - whole.gradient).max() > 0.05
    with ablate(model.model, heads):
        again = head_importance(model, [SOURCES[1]], [model.target_tokenizer.decode(pair[1][:-1])])
    np.testing.assert_allclose(importance.gradient, again.gradient, rtol=1e-4, atol=1e-5)


def test_weights_are_left_as_they_were(model: Model) -> None:
    """Only the gates' gradients are taken: a server's shared model keeps no `.grad` and its mode."""
    head_importance(model, SOURCES[:2], REFERENCES[:2])
    assert all(p.grad is None for p in model.model.parameters())
    assert not model.model.training


def test_order_is_least_important_first_after_layer_normalisation() -> None:
    gradient = np.zeros((3, 2, 2))
    gradient[0, 0] = [3.0, 4.0]  # normalised: 0.6, 0.8
    gradient[0, 1] = [0.1, 0.0]  # 1.0 and 0: small gradients, but the layer's one head that acts
    gradient[1] = [[1.0, 1.0], [1.0, 1.0]]
    gradient[2] = [[2.0, 1.0], [1.0, 2.0]]
    importance = HeadImportance(gradient, None, 1, 1)
    norms = np.linalg.norm(importance.normalized(), axis=-1)
    np.testing.assert_allclose(norms[norms > 0], 1.0)
    order = importance.order()
    assert order[0] == ("encoder", 1, 1) and order[-1] == ("encoder", 1, 0)
    assert order.index(("encoder", 0, 0)) < order.index(("encoder", 0, 1))
    with pytest.raises(AttnlabError, match="with exact=True"):
        importance.order("ablation")
    across = importance.order(per_layer=False)  # as measured: encoder layer 1's heads (0.1, 0) are the least
    assert across[:2] == [("encoder", 1, 1), ("encoder", 1, 0)] and across[-1] == ("encoder", 0, 1)
    assert len(importance.rows()) == 12 and {r["kind"] for r in importance.rows()} == set(KINDS)


def test_pruning_decodes_with_the_first_heads_off(model: Model) -> None:
    """Row k is the test set decoded with the first k heads of the order off: row 0 is the model's
    own BLEU, and the most important heads off change it."""
    order = head_importance(model, SOURCES, REFERENCES).order()
    rows = pruning_curve(model, order[::-1], SOURCES, REFERENCES, [0, 12], beam=1)
    plain = [r.text for r in model.translate(SOURCES, beam=1)]
    assert rows[0]["bleu"] == pytest.approx(bleu_chrf(plain, REFERENCES)["bleu"])
    assert rows[1]["off"] == 12 and len(rows[1]["heads"]) == 12 and rows[1]["bleu"] < rows[0]["bleu"] - 5
    assert "tok:13a" in rows[0]["bleu_signature"]
    with pytest.raises(AttnlabError, match="from 0 to 35"):
        pruning_curve(model, order, SOURCES, REFERENCES, [36])


def test_pruning_a_part_of_the_heads_counts_its_share_of_the_model(model: Model) -> None:
    """An order of the cross-attention's 12 heads alone can switch all 12 off (24 heads still
    decode): their share is 12 of the model's 36, not 100%; NumPy steps count as Python's; an
    order with a head the model lacks, or one head twice, is one line before any decoding."""
    cross = [h for h in head_importance(model, SOURCES, REFERENCES).order() if h[0] == "cross"]
    rows = pruning_curve(model, cross, SOURCES, REFERENCES, np.array([6, 12]), beam=1)
    assert [(r["off"], r["share"]) for r in rows] == [(6, 6 / 36), (12, 12 / 36)]
    assert type(rows[0]["off"]) is int
    off: dict[tuple[str, int], list[int]] = {}
    for kind, layer, head in cross:
        off.setdefault((kind, layer), []).append(head)
    every = [r.text for r in model.translate(SOURCES, beam=1, ablate_heads=off)]
    assert len(cross) == 12 and rows[1]["bleu"] == pytest.approx(bleu_chrf(every, REFERENCES)["bleu"])
    for order, said in (
        ([("cross", 3, 0)], r"heads of the model as \(kind, layer, head\), got \('cross', 3, 0\)"),
        ([("cross", 0, 0), ["cross", 0, 0]], "each head once"),
        (["cross"], "got 'cross'"),
    ):
        with pytest.raises(AttnlabError, match=said):
            pruning_curve(model, order, SOURCES, REFERENCES, [0])


def test_refusals_are_one_line(model: Model) -> None:
    with pytest.raises(AttnlabError, match="as many references"):
        head_importance(model, SOURCES, REFERENCES[:2])
    with pytest.raises(AttnlabError, match="^line 2: the input has 2400 pieces"):  # which of the lines
        head_importance(model, [SOURCES[0], " ".join(["word"] * 1200)], REFERENCES[:2])
    with pytest.raises(AttnlabError, match="^line 1: "):
        head_importance(model, SOURCES[:1], [""])
    with pytest.raises(AttnlabError, match="exact must be True or False"):
        head_importance(model, SOURCES, REFERENCES, exact="yes")
    with pytest.raises(AttnlabError, match="one or more source"):
        head_importance(model, [])
    with pytest.raises(AttnlabError, match="attnlab.load"):
        head_importance(model.model, SOURCES)
    with pytest.raises(AttnlabError, match="not int8"):
        head_importance(load(CHECKPOINT, dtype="int8"), SOURCES[:1], REFERENCES[:1])
    other = load(ROOT / "checkpoints" / "multi30k-en-de-r3").score(SOURCES[0], REFERENCES[0]).trace
    with pytest.raises(AttnlabError, match="recorded by another model"):
        trace_importance(model, other)


def test_the_command_prints_heads_and_the_curve(tmp_path: Path) -> None:
    """`attnlab heads importance` end to end: tables by default, JSON with --json, and a flag
    that needs another one refused in one line."""
    src, ref = tmp_path / "s.en", tmp_path / "r.de"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "attnlab", "heads", "importance", "--checkpoint", str(CHECKPOINT)]
    common = [*command, "--src", str(src), "--tgt", str(ref)]
    pruning = [
        "--prune-src",
        str(src),
        "--prune-ref",
        str(ref),
        "--prune-every",
        "18",
        "--beam",
        "1",
        "--across-layers",
    ]
    run = subprocess.run([*common, *pruning], capture_output=True, text=True, check=True)
    assert "18 of 36 heads off: BLEU" in run.stderr  # each decode said as it ends: a whole test set takes minutes
    out = run.stdout
    lines = out.splitlines()
    assert lines[0].split("\t") == ["kind", "layer", "head", "gradient", "normalized", "ablation"]
    assert len([line for line in lines[1:37] if line.count("\t") == 5]) == 36
    assert (
        lines[38].startswith("off\tshare\tBLEU") and lines[39].startswith("0\t0%") and lines[40].startswith("18\t50%")
    )
    assert lines[-1].startswith("# nrefs:1|")
    report = json.loads(subprocess.run([*common, "--json", "--exact"], capture_output=True, text=True).stdout)
    assert report["sentences"] == 3 and len(report["heads"]) == 36 and report["heads"][0]["ablation"] is not None
    refused = subprocess.run([*common, "--order-by", "ablation"], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0 and "--exact" in refused.stderr
    refused = subprocess.run([*common, "--across-layers"], capture_output=True, text=True)
    assert refused.returncode == 2 and "give --prune-src and --prune-ref" in refused.stderr
    # refused before the heads are weighed: --beam 0 was, after the pass; --prune-every 36 printed "0 off" alone
    for flags, said in (
        (["--beam", "0"], "error: beam must be a whole number ≥ 1 (1: greedy), got 0"),
        (["--prune-every", "36"], "error: --prune-every 36 ≥ the model's 36 heads: the curve would hold 0 off only"),
    ):
        refused = subprocess.run([*common, *pruning[:4], *flags], capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stderr.strip().endswith(said) and "weighed" not in refused.stderr


# -- the figure and the explorer's Head ablation tab ----------------------------------------------------
def test_the_figure_shows_every_head_with_its_value(model: Model) -> None:
    from bokeh.events import Tap
    from bokeh.models import TapTool

    from attnlab import viz
    from attnlab.app.i18n import text
    from attnlab.app.words import figure_words
    from attnlab.record.lens import logit_lens

    importance = head_importance(model, SOURCES[:1], REFERENCES[:1], exact=True)
    picked: list[tuple[str, int, int]] = []
    fig = viz.importance_figure(importance, on_select=lambda *head: picked.append(head))
    data = fig.select_one({"name": "cells"}).data_source.data
    np.testing.assert_array_equal(data["value"], importance.gradient.ravel())
    digits = 2 if importance.gradient.max() >= 0.1 else 3 if importance.gradient.max() >= 0.01 else 4
    assert data["label"][0] == f"{importance.gradient[0, 0, 0]:.{digits}f}" and fig.name == "head-importance"
    assert fig.select_one({"name": "kinds"}).data_source.data["text"] == ["encoder", "decoder", "cross"]
    # cross-attention is the third block of 4 heads and a gap: x 10-14; layer 2 is y 2-3
    for x, y in (
        (12.5, 2.5),
        (4.5, 0.5),
        ("1", 0.5),
        (float("nan"), 0.5),
        (float("inf"), 0.5),
        (-0.1, 0.5),
        (0.5, 3.2),
    ):
        fig._trigger_event(Tap(fig, x=x, y=y))
    assert picked == [("cross", 2, 2)]  # x 4.5 is the gap between encoder and decoder blocks
    # a tap opens and does not select: a selection faded every other cell (and the logit lens's)
    assert fig.select_one(TapTool).behavior == "inspect"
    lens = viz.lens_figure(logit_lens(model, model.score(SOURCES[0], REFERENCES[0]).trace), on_select=print)
    assert lens.select_one(TapTool).behavior == "inspect"
    exact = viz.importance_figure(importance, measure="ablation", words=figure_words("zh"))
    np.testing.assert_array_equal(
        exact.select_one({"name": "cells"}).data_source.data["value"], importance.ablation.ravel()
    )
    assert exact.title.text == text("figure.importance_title_ablation", "zh")
    with pytest.raises(
        AttnlabError, match="^importance_figure draws what attnlab's head importance returns, got dict$"
    ):
        viz.importance_figure({})
    with pytest.raises(AttnlabError, match="with exact=True"):
        viz.importance_figure(head_importance(model, SOURCES[:1], REFERENCES[:1]), measure="ablation")


def test_small_importances_are_written_to_two_significant_digits(model: Model) -> None:
    """The bundled parser's heads weigh 0.003-0.03: at two decimals a dozen cells read 0.00 and
    the line named one of them least important. The cells and the line write the largest with two
    significant digits (up to four decimals)."""
    from attnlab import viz

    importance = head_importance(model, SOURCES[:1], REFERENCES[:1])
    for top, largest in ((0.03, "0.030"), (0.0042, "0.0042"), (1.7, "1.70")):
        scaled = replace(importance, gradient=importance.gradient / importance.gradient.max() * top)
        labels = viz.importance_figure(scaled).select_one({"name": "cells"}).data_source.data["label"]
        assert max(labels, key=float) == largest


def test_the_ablation_tab_weighs_the_heads_and_a_tap_picks_one(lab: dict[str, Path]) -> None:  # noqa: F811
    """Opening Head ablation draws the open output's importance; a tap on a cell adds that head to
    the heads to switch off, once; an int8 model's tab says why it has none, in one line."""
    from bokeh.events import Tap

    from attnlab.app.i18n import text

    shown = explorer(lab, tiny="translate")
    assert shown.ablation.importance.object is None  # a hidden tab weighs nothing
    shown.tabs.active = 4
    fig = shown.ablation.importance.object
    store = shown.store
    expected = trace_importance(store.model, store.trace)
    np.testing.assert_allclose(fig.select_one({"name": "cells"}).data_source.data["value"], expected.gradient.ravel())
    assert "Most important here:" in shown.ablation.importance_note.object
    heads = store.model.config.n_heads
    for _ in range(2):
        fig._trigger_event(Tap(fig, x=2 * (heads + 1) + 1.5, y=0.5))  # cross-attention, layer 0, head 1
    assert shown.ablation.choice.value == ["cross L0 H1"]
    shown.ablation.ablate()
    assert shown.ablation.effect.objects and not store.error
    decode(shown, "the dog runs .", "der hund läuft .")  # a reference: it is what is weighed, and said so
    assert html.escape(text("ablation.importance_reference")) in shown.ablation.importance_note.object
    assert one_line(shown.ablation.importance.object.title.text) == text("figure.importance_title_reference")
    with pytest.raises(AttnlabError, match="not int8"):
        trace_importance(load(lab["translate"], dtype="int8"), store.trace)


def test_a_parser_is_weighed_on_trees_or_on_prepared_targets(lab: dict[str, Path]) -> None:  # noqa: F811
    """A parser's references are Penn trees, or linearised as `data prepare ptb` writes them
    (`)NP` closing each phrase): both are the same target pieces, so the same importance."""
    parser = load(lab["parse"])
    tree = "(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))"
    linear = parser.target_tokenizer.decode(parser.encode_target(tree)[0])
    assert ")NP" in linear and linear != tree
    by_tree = head_importance(parser, ["The dog barks ."], [tree])
    np.testing.assert_allclose(head_importance(parser, ["The dog barks ."], [linear]).gradient, by_tree.gradient)
    assert by_tree.gradient.max() > 0


# -- a corpus profile's importance column and the Corpus tab ---------------------------------------------
def test_a_profile_keeps_each_sentences_importance(model: Model, tmp_path: Path) -> None:
    """`heads profile --importance`: each row is that sentence's |gradient| for that head, so the
    Corpus tab's mean per head is the corpus importance (Michel et al.'s I_h); without it there is
    no such column, and an int8 model is refused before any decoding."""
    from attnlab.decode.profile import profile, read_profile, write_profile

    table = profile(model, SOURCES, REFERENCES, importance=True)
    write_profile(table, tmp_path / "p.parquet", {"checkpoint": "multi30k-en-de", "mode": "reference"})
    read = read_profile(tmp_path / "p.parquet")
    assert "importance" in read.stats
    expected = head_importance(model, SOURCES, REFERENCES)  # the same pairs, as the profile reads them
    for k, kind in enumerate(KINDS):
        layers, grid = read.grid("importance", kind)
        np.testing.assert_allclose(grid, expected.gradient[k], rtol=1e-4, atol=1e-5)
    first = trace_importance(model, model.score(SOURCES[0], REFERENCES[0]).trace).gradient
    rows = read.table.filter(pa.compute.equal(read.table["sentence"], 0)).to_pylist()
    assert len(rows) == 36 and all(
        r["importance"] == pytest.approx(first[KINDS.index(r["kind"]), r["layer"], r["head"]], rel=1e-4, abs=1e-5)
        for r in rows
    )
    assert "importance" not in profile(model, SOURCES[:1]).column_names
    with pytest.raises(AttnlabError, match="not int8"):
        profile(load(CHECKPOINT, dtype="int8"), SOURCES, importance=True)
    with pytest.raises(AttnlabError, match="importance must be True or False"):
        profile(model, SOURCES, importance="yes")


def test_the_corpus_tab_offers_a_profiles_importance(lab: dict[str, Path]) -> None:  # noqa: F811
    """A profile written with importance offers it as a statistic, in the page's words, and its
    grids are the mean importance per head."""
    from attnlab.app.i18n import text
    from attnlab.decode.profile import profile, write_profile

    translator = load(lab["translate"])
    table = profile(translator, ["the dog runs .", "a girl sits on a red bike ."], importance=True)
    write_profile(
        table, lab["root"] / "profiles" / "weighed.parquet", {"checkpoint": "tiny-translator", "mode": "translate"}
    )
    shown = explorer(lab, tiny="translate")
    assert shown.corpus.open("profiles/weighed.parquet")
    assert shown.corpus.stat.options[text("figure.importance")] == "importance"
    shown.corpus.stat.value = "importance"
    cross = shown.corpus.grids.objects[2].object
    assert text("figure.importance") in cross.title.text and cross.name.endswith("cross")


def test_an_imported_marian_model_is_weighed_on_its_own_vocabularies(tmp_path: Path) -> None:
    """Separate source and target vocabularies and a logits bias: the exact cost of a head is
    still the log-likelihood its ablation loses on the trace's own output (reading the target
    pieces through the source vocabulary would score other pieces)."""
    from marian_models import make_marian

    marian = load(make_marian(tmp_path / "separate", "separate-untied"))
    trace = marian.translate("the dog runs in the park", record=True).trace
    importance = trace_importance(marian, trace, exact=True)
    ids = trace_ids(marian, trace)
    full = sum(token_logprobs(marian, *ids))
    off = sum(token_logprobs(marian, *ids, {("cross", 0): [1]}))
    assert importance.ablation[2, 0, 1] == pytest.approx(full - off, abs=1e-4)
    assert importance.gradient.shape == (3, marian.config.n_layers, marian.config.n_heads)


def test_importance_snapshots_read_only_whole_tables(tmp_path: Path) -> None:
    """The training timeline reads `probes/step_N/importance.json`; a file cut short, of another
    shape, with NaN, or not a regular file is left out (its step drawn without importance)."""
    from attnlab.app.checkpoints import importance_snapshots

    good = np.arange(24, dtype=float).reshape(3, 2, 4)
    tables = {
        1: json.dumps({"pairs": 2, "gradient": good.tolist()}),
        2: json.dumps({"pairs": 2, "gradient": good.tolist()})[:30],  # a run killed while writing (it is not)
        3: json.dumps({"gradient": good[:2].tolist()}),  # two kinds
        4: json.dumps({"gradient": [[[float("nan")]]] * 3}),
        5: json.dumps({"rows": []}),
    }
    for step, content in tables.items():
        (tmp_path / "probes" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "probes" / f"step_{step}" / "importance.json").write_text(content)
    (tmp_path / "probes" / "step_6").mkdir()
    (tmp_path / "probes" / "step_6" / "importance.json").symlink_to("/dev/zero")
    read = importance_snapshots(tmp_path)
    assert list(read) == [1]
    np.testing.assert_array_equal(read[1], good)


# -- two models: the Compare tab and compare_models ------------------------------------------------------
def test_the_compare_tab_weighs_both_models_heads_when_asked(lab: dict[str, Path]) -> None:  # noqa: F811
    """Its third box adds each model's head importance on the same output, the second weighed on
    the first's output; with this model's heads off as the second, those heads read 0 and the
    others are the ablated model's, not the whole one's."""
    from attnlab.app.explorer.compare import ABLATED
    from attnlab.app.i18n import text

    shown = explorer(lab, tiny="translate", restricted="restricted")
    shown.tabs.active = 5
    shown.compare.second.value = "restricted"
    assert all(p.object is None for p in shown.compare.importance_panes)
    shown.compare.importances.value = True
    first, second = (p.object for p in shown.compare.importance_panes)
    assert (first.name, second.name) == ("compare-importance-first", "compare-importance-second")
    assert second.title.text == text("compare.importance_title", name="B")
    c = shown.compare.comparison
    expected = trace_importance(shown.compare.second_model, c.second_on_first.trace).gradient.ravel()
    np.testing.assert_allclose(second.select_one({"name": "cells"}).data_source.data["value"], expected)
    tops = [f.select_one({"name": "cells"}).glyph.fill_color.transform.high for f in (first, second)]
    assert (
        tops[0]
        == tops[1]
        == pytest.approx(max(expected.max(), trace_importance(shown.store.model, c.first.trace).gradient.max()))
    )
    shown.tabs.active = 4  # pick a head to switch off, and compare this model without it
    shown.ablation.add_head("cross", 1, 2)
    shown.tabs.active = 5
    shown.compare.second.value = ABLATED
    ablated = shown.compare.importance_panes[1].object
    values = np.asarray(ablated.select_one({"name": "cells"}).data_source.data["value"]).reshape(3, 2, 4)
    assert values[2, 1, 2] == 0 and not shown.store.error
    shown.compare.importances.value = False
    assert all(p.object is None for p in shown.compare.importance_panes)


def test_compare_models_weighs_both_models_heads(model: Model) -> None:
    from attnlab import widgets

    heads = {("cross", 2): [1, 2]}
    shown = widgets.compare_models(model, text="A man sits on a bike .", heads_off=heads)
    assert shown.figures["importance_second"] is None
    shown.show_importances.value = True
    c = shown.comparison
    for role, side in (("first", c.first), ("second", c.second_on_first)):
        data = shown.figures[f"importance_{role}"].select_one({"name": "cells"}).data_source.data["value"]
        np.testing.assert_allclose(data, trace_importance(model, side.trace).gradient.ravel())
    second = np.asarray(shown.figures["importance_second"].select_one({"name": "cells"}).data_source.data["value"])
    assert (second.reshape(3, 3, 4)[2, 2, [1, 2]] == 0).all() and not shown.errors.message
    figures = [shown.figures[f"importance_{role}"] for role in ("first", "second")]
    tops = [f.select_one({"name": "cells"}).glyph.fill_color.transform.high for f in figures]
    assert tops[0] == tops[1]  # one colour scale for both models
    shown.show_importances.value = False
    assert shown.figures["importance_first"] is None
