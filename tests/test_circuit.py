"""Circuits (`attnlab.record.circuit`, `viz.circuit_figure`): the senders are the heads that move
most, every edge is a path patching share of its sender (direct to the output, or through a
receiver), edges under the threshold are left out, and the figure draws each edge once, as wide
as its share, on every component of the model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.patching import patch_paths
from attnlab.errors import AttnlabError
from attnlab.record.circuit import OUTPUT, Circuit, trace_circuit
from attnlab.record.trace import KINDS
from attnlab.viz.circuit import circuit_figure

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
CLEAN = "A man is sleeping on a bench."
CORRUPTED = "A woman is sleeping on a bench."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def circuit(model: Model) -> Circuit:
    trace = model.translate(CLEAN, record=True).trace
    return trace_circuit(model, trace, CORRUPTED, positions=[1], senders=5, threshold=0.03)


def test_every_edge_is_its_senders_path_share(model: Model, circuit: Circuit) -> None:
    """Each sender's edges are the direct share and the receivers' shares path patching gives
    that sender alone; none under the threshold; the largest first."""
    share = circuit.total.share
    by_size = sorted(circuit.total.order(), key=lambda h: -abs(share[KINDS.index(h[0]), h[1], h[2]]))
    assert circuit.senders == by_size[:5]
    for sender in circuit.senders[:2]:
        paths = patch_paths(model, CLEAN, CORRUPTED, positions=[1], sender=sender)
        expected = {OUTPUT: paths.direct.share[KINDS.index(sender[0]), sender[1], sender[2]]}
        expected |= {h: paths.receivers.share[KINDS.index(h[0]), h[1], h[2]] for h in paths.receivers.order()}
        expected |= {("ffn", "decoder", layer): v for layer, v in enumerate(paths.ffn[1]) if v == v}
        kept = {end: value for start, end, value in circuit.edges if start == sender}
        assert kept == pytest.approx({k: v for k, v in expected.items() if abs(v) >= 0.03}, abs=1e-6)
    sizes = [abs(value) for *_, value in circuit.edges]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= 0.03
    assert circuit.nodes[-1] == OUTPUT and set(circuit.senders) <= set(circuit.nodes)


def test_the_figure_draws_each_edge_once_as_wide_as_its_share(circuit: Circuit) -> None:
    fig = circuit_figure(circuit)
    paths = fig.select_one({"name": "paths"}).data_source.data
    assert len(paths["xs"]) == len(circuit.edges)
    widths = np.array(paths["width"])
    sizes = np.array([abs(v) for *_, v in circuit.edges])
    assert widths.max() == pytest.approx(10) and np.all(np.diff(widths) <= 1e-9)  # (edges come largest first)
    assert np.corrcoef(widths, sizes)[0, 1] > 0.999
    colours = {c for c, (*_, v) in zip(paths["color"], circuit.edges, strict=True) if v < 0}
    assert colours <= {"#b2182b"}
    first = circuit.edges[0]
    assert paths["tip"][0].endswith(f"{first[2]:+.3f}")
    _, layers, heads = circuit.total.share.shape
    skeleton = fig.select_one({"name": "skeleton"}).data_source.data
    assert len(skeleton["x"]) == 3 * layers * heads + 2 * layers  # every head and feed-forward layer
    nodes = fig.select_one({"name": "nodes"}).data_source.data
    assert len(nodes["x"]) == len(circuit.nodes)
    said = circuit_figure(circuit, words={"circuit.output": "salida"}).select_one({"name": "nodes"})
    assert "salida" in said.data_source.data["label"]


def test_refusals_are_one_line(model: Model) -> None:
    trace = model.translate(CLEAN, record=True).trace
    for bad in ({"senders": 0}, {"senders": 2.5}, {"threshold": 1.5}, {"threshold": -0.1}):
        with pytest.raises(AttnlabError, match="senders|threshold"):
            trace_circuit(model, trace, CORRUPTED, **bad)
    with pytest.raises(AttnlabError, match="circuit_figure draws"):
        circuit_figure({"edges": []})


def test_the_command_lists_the_paths() -> None:
    command = [sys.executable, "-m", "attnlab", "heads", "patch", "--checkpoint", str(CHECKPOINT)]
    command += ["--clean", CLEAN, "--corrupted", CORRUPTED, "--positions", "1", "--circuit", "3"]
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert len(answer["senders"]) == 3 and answer["threshold"] == 0.05
    assert ["cross L1 H1", "decoder FFN L1"] in [edge[:2] for edge in answer["edges"]]
    assert all(abs(edge[2]) >= 0.05 for edge in answer["edges"])
    assert "decoder FFN L1" in answer["parts"] and set(answer["parts"]["decoder FFN L1"]) == {"total", "direct"}
    refused = subprocess.run([*command, "--paths"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1


def test_every_node_it_reaches_is_followed(model: Model, circuit: Circuit) -> None:
    """Each head or feed-forward layer an edge reaches is patched in its turn and has its total
    and direct share (its own edges kept where they pass the threshold), unless `most` stops it;
    `most` equal to the senders follows the senders alone."""
    reached = {end for *_, end, _ in [(a, b, s) for a, b, s in circuit.edges] if end != OUTPUT}
    assert reached and reached <= set(circuit.shares)
    assert any(node[0] == "ffn" for node in circuit.shares)
    ffn = next(node for node in circuit.shares if node[0] == "ffn")
    paths = patch_paths(model, CLEAN, CORRUPTED, positions=[1], sender=ffn)
    assert circuit.shares[ffn] == pytest.approx((paths.sender_total, paths.sender_direct), abs=1e-6)
    trace = model.translate(CLEAN, record=True).trace
    alone = trace_circuit(model, trace, CORRUPTED, positions=[1], senders=5, threshold=0.03, most=5)
    assert set(alone.shares) == set(alone.senders) and {a for a, _, _ in alone.edges} <= set(alone.senders)
