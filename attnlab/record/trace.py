"""`AttentionTrace`: the one contract between the model, the CLI, the widgets and the app.

A trace holds, for one sentence pair, the attention weights of every recorded head per kind
(§3.2.3: "encoder" self-attention, masked "decoder" self-attention, encoder-decoder "cross")
and layer, as (heads, q_len, k_len) float32 arrays, with the token pieces, the masks that were
applied and the identity of the model. It saves to a single safetensors file (arrays) whose
metadata holds the rest as JSON: lossless, versioned, and loading never executes code.
"""

from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load, save

from attnlab.errors import AttnlabError, CheckpointError, ConfigError, json_loads
from attnlab.model.checkpoint import user_path
from attnlab.publish import temporary_sibling
from attnlab.record.trace_checks import as_mask, as_weights, outside_softmax, switched_off

KINDS = ("encoder", "decoder", "cross")
FORMAT = "attnlab-trace"
VERSION = 1
BOS, EOS = "<s>", "</s>"


def not_recorded(kind: str, layer: object, held: list[int], top: int) -> AttnlabError:
    """The refusal of a layer not held, naming those held both ways, counted from the first and
    from the top of the model's `top` layers (`--layer -4` of a three-layer model listed [0, 1, 2])."""
    return AttnlabError(
        f"layer {layer!r} of {kind} attention was not recorded (recorded: {held}, or from the top: "
        f"{[n - top for n in held]})"
    )


@dataclass
class AttentionTrace:
    """Attention of one sentence pair.

    Rows of "decoder" and "cross" maps are target positions labelled by the piece produced
    there (`tgt_tokens`, ending in </s>); "decoder" keys are the decoder's inputs
    (`tgt_input_tokens`: <s> then the produced pieces shifted right).
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    maps: dict[str, list[np.ndarray]]  # kind -> per recorded layer (heads, q_len, k_len)
    masks: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> (q_len, k_len) bool, True = allowed
    layers: dict[str, list[int]] = field(default_factory=dict)  # kind -> model layer index of each map
    heads: list[int] | None = None  # model head index of each map row; None = all heads
    model: dict[str, Any] = field(default_factory=dict)  # config, weights_sha256, checkpoint
    meta: dict[str, Any] = field(default_factory=dict)  # free: text, score, task, step, ...

    def __post_init__(self) -> None:
        for name in ("maps", "masks", "layers"):  # None or a list was an AttributeError ('items', 'setdefault')
            if not isinstance(getattr(self, name), dict):
                raise AttnlabError(
                    f"a trace's {name} is a dict by attention kind, got {type(getattr(self, name)).__name__}"
                )
        for kind, maps in self.maps.items():
            if kind not in KINDS:
                raise AttnlabError(f"unknown attention kind {kind!r}; choose from {KINDS}")
            self.layers.setdefault(kind, list(range(len(maps))))
        self.maps = {kind: [as_weights(kind, m) for m in maps] for kind, maps in self.maps.items()}
        self.masks = {kind: as_mask(kind, mask) for kind, mask in self.masks.items()}
        # Every accessor reads a kind's first map (n_heads, mask, repr): refuse a trace without
        # one here, once, rather than let each of them fail in its own way.
        empty = [kind for kind, maps in self.maps.items() if len(maps) == 0]
        if not self.maps or empty:
            raise AttnlabError(f"a trace needs attention maps (none given for {', '.join(empty) or 'any kind'})")
        damage = self._damage()  # a trace made by hand with 1 token for 3 maps' rows failed in the views
        if damage:
            raise AttnlabError(damage)

    # -- reading ------------------------------------------------------------------------------
    @property
    def kinds(self) -> list[str]:
        """The attention kinds recorded, in the model's order (encoder, decoder, cross)."""
        return [kind for kind in KINDS if kind in self.maps]

    @property
    def tgt_input_tokens(self) -> list[str]:
        """What the decoder read at each position, the rows of its maps: <s>, then the target shifted right."""
        return [BOS, *self.tgt_tokens[:-1]] if self.tgt_tokens else []

    def n_layers(self, kind: str = "encoder") -> int:
        """How many of `kind`'s layers the trace holds (`layers[kind]` names them), not the model's depth."""
        return len(self._maps(kind))

    @property
    def n_heads(self) -> int:
        """Heads each map holds, its rows (`heads` names them where only some were recorded)."""
        first = next(iter(self.maps.values()))
        return first[0].shape[0]

    def attention(self, kind: str, layer: int) -> np.ndarray:
        """(heads, q_len, k_len) weights of `kind` at model layer `layer` (negative: from the top),
        read-only: a caller's `w[:, :, -1] = 0` changed the trace, its statistics and its file."""
        view = self._maps(kind)[self.layers[kind].index(self.layer_index(kind, layer))].view()
        view.flags.writeable = False
        return view

    def layer_index(self, kind: str, layer: int) -> int:
        """The model's index of `layer` (negative: from the model's top), which views name; a
        layer this trace did not record, or one that is not a whole number (True and 1.0 were
        read as layer 1, "1" and None failed as TypeErrors), is a one-line error."""
        self._maps(kind)
        if not whole_number(layer):
            raise AttnlabError(f"a layer is a whole number, got {layer!r}")
        layer = int(layer)
        layers = self.layers[kind]
        n_model_layers = int(self.model.get("config", {}).get("n_layers", max(layers) + 1))
        index = layer + n_model_layers if layer < 0 else layer
        if index not in layers:
            raise not_recorded(kind, layer, layers, n_model_layers)
        return index

    def head_row(self, head: int) -> int:
        """The row of the maps that holds the model's head `head` (negative: from the model's last
        head): a trace recorded with `heads=[2, 3]` holds head 2 in row 0, and a view asked for
        "head 0" must not be shown head 2. A head this trace lacks is a one-line error."""
        held = list(self.heads) if self.heads is not None else list(range(self.n_heads))
        n_model_heads = int(self.model.get("config", {}).get("n_heads", max(held, default=-1) + 1))
        if whole_number(head):
            index = int(head) + n_model_heads if head < 0 else int(head)
            if index in held:
                return held.index(index)
        raise AttnlabError(
            f"head {head!r} does not exist in this trace: it holds heads {', '.join(map(str, held))} "
            f"(from the last: {', '.join(str(h - n_model_heads) for h in held)})"
        )

    def mask(self, kind: str) -> np.ndarray:
        """(q_len, k_len) bool, True where attending was allowed (a mask set after the trace was
        made is checked here, as the constructor checks it: a float one failed in the views)."""
        self._maps(kind)
        if kind in self.masks:
            return as_mask(kind, self.masks[kind])
        q, k = self._maps(kind)[0].shape[1:]
        return np.tril(np.ones((q, k), bool)) if kind == "decoder" else np.ones((q, k), bool)

    @property
    def heads_off(self) -> dict[tuple[str, int], list[int]]:
        """{(kind, layer): [heads]} switched off while this trace was recorded (`meta["heads_off"]`),
        the one reading of it that every view and re-reading shares, checked each time: `meta` is
        free to edit, and rollout (a TypeError on [1, 2], head 9 of 4 heads ignored) and the
        heatmap's title (a TypeError on "abc") each read it their own way."""
        config = self.model.get("config", {})
        n_layers = config.get("n_layers") or 1 + max(max(self.layers[kind]) for kind in self.maps)
        held = self.heads if self.heads is not None else range(self.n_heads)
        n_heads = config.get("n_heads") or 1 + max(held, default=-1)
        return switched_off(self.meta.get("heads_off", []), KINDS, n_layers, n_heads)

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of `kind`'s maps; a kind this trace lacks is a one-line error
        (an encoder-only trace gave cross attention's labels as ([], its source))."""
        self._maps(kind)
        return {
            "encoder": (self.src_tokens, self.src_tokens),
            "decoder": (self.tgt_tokens, self.tgt_input_tokens),
            "cross": (self.tgt_tokens, self.src_tokens),
        }[kind]

    def _maps(self, kind: str) -> list[np.ndarray]:
        if kind not in KINDS:
            raise AttnlabError(f"unknown attention kind {kind!r}; choose from {KINDS}")
        if kind not in self.maps:
            raise AttnlabError(f"this trace has no {kind} attention (it has: {', '.join(self.kinds) or 'none'})")
        return self.maps[kind]

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temp file + rename) as safetensors + JSON metadata, after the checks
        `load` makes: a file this writes always loads back."""
        if not isinstance(path, str | os.PathLike):  # e.g. `result.trace.save(None)`
            raise CheckpointError(f"expected a path to write the trace to, got {type(path).__name__}")
        given = os.fspath(path)
        path = user_path(given)
        if path.is_dir() or given.endswith(("/", os.sep)):  # Path() drops the trailing "/" of "newdir/"
            raise CheckpointError(
                f"{given or repr(given)} names a directory: name the trace file to write (e.g. {path / 'trace.trace'})"
            )
        if path.exists() and not path.is_file():  # the rename below put the trace in a device's place
            raise CheckpointError(f"{given} is not a regular file (a device, a pipe?): name the trace file to write")
        damage = self._damage()
        if damage:
            raise CheckpointError(f"{path}: cannot save a damaged trace ({damage})")
        tensors = {
            f"{kind}.{i}": np.ascontiguousarray(m, dtype=np.float32)
            for kind in self.maps
            for i, m in enumerate(self.maps[kind])
        }
        tensors.update({f"mask.{kind}": np.ascontiguousarray(m).astype(np.uint8) for kind, m in self.masks.items()})
        info = {
            "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens,
            "layers": self.layers,
            "heads": self.heads,
            "model": self.model,
            "meta": self.meta,
        }
        metadata = {
            "format": FORMAT,
            "version": str(VERSION),
            "info": json.dumps({k: _plain(v, k) for k, v in info.items()}),
        }
        data = save(tensors, metadata=metadata)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary_sibling(path, directory=False)
        except OSError as error:  # a read-only place, a file where a directory should be
            raise CheckpointError(f"{path}: cannot write the trace here ({error.strerror or error})") from None
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except BaseException as error:
            tmp.unlink(missing_ok=True)
            if isinstance(error, OSError):  # a full disk: one line, and no half-written file left behind
                raise CheckpointError(f"{path}: cannot write the trace ({error.strerror or error})") from None
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> AttentionTrace:
        """Read a trace file; anything else (damaged, foreign, another version) is a one-line error."""
        if not isinstance(path, str | os.PathLike):  # e.g. `show(None)` in a notebook
            raise CheckpointError(f"expected a trace or a .trace file's path, got {type(path).__name__}")
        path = user_path(path)
        try:
            if not path.is_file():
                raise CheckpointError(f"{path}: no such trace file")
            raw = path.read_bytes()
        except OSError as error:  # another user's file (mode 0600), or in a directory we may not enter
            raise CheckpointError(f"{path}: cannot read the trace ({error.strerror or error})") from None
        try:
            tensors = load(raw)
            header_len = int.from_bytes(raw[:8], "little")
            metadata = json_loads(raw[8 : 8 + header_len]).get("__metadata__") or {}
        except Exception as error:  # safetensors raises several types for damaged files
            raise CheckpointError(f"{path}: not a readable trace file ({type(error).__name__})") from None
        if not isinstance(metadata, dict):  # safetensors lets any JSON through here
            raise CheckpointError(f"{path}: not an attnlab trace (metadata is not a mapping)")
        if metadata.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not an attnlab trace (format {metadata.get('format')!r})")
        if metadata.get("version") != str(VERSION):
            raise CheckpointError(
                f"{path}: trace format version {metadata.get('version')} is not supported (this attnlab reads {VERSION})"
            )
        try:
            info = json_loads(metadata["info"])
            maps: dict[str, list[np.ndarray]] = {}
            for kind in KINDS:
                count = sum(1 for name in tensors if name.startswith(kind + "."))
                if count:
                    maps[kind] = [tensors[f"{kind}.{i}"] for i in range(count)]
            masks = {name[5:]: tensors[name] for name in tensors if name.startswith("mask.")}  # 0/1: as_mask
            trace = cls(
                src_tokens=info["src_tokens"],
                tgt_tokens=info["tgt_tokens"],
                maps=maps,
                masks=masks,
                layers={k: list(v) for k, v in info["layers"].items()},
                heads=info["heads"],
                model=info["model"],
                meta=info["meta"],
            )
        except (KeyError, ValueError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{path}: damaged trace metadata ({error})") from None
        except AttnlabError as error:  # no maps at all
            raise CheckpointError(f"{path}: damaged trace ({error})") from None
        damage = trace._damage()
        if damage:
            raise CheckpointError(f"{path}: damaged trace ({damage})")
        return trace

    def _damage(self) -> str | None:
        """What would make the accessors fail, or the views draw nonsense, on a trace read from or
        written to a file (None: nothing), as the recorder writes traces: tokens are strings, each
        kind's maps are finite weights in [0, 1], (heads, q, k) with q and k the token counts, one
        model layer index per map (increasing, within the model's n_layers), a piece or more on
        each side a kind reads, boolean masks (q, k), and `meta["heads_off"]` the model's heads."""

        def listed(items: Any, kind: type) -> bool:
            return isinstance(items, list) and all(isinstance(i, kind) and not isinstance(i, bool) for i in items)

        if not (listed(self.src_tokens, str) and listed(self.tgt_tokens, str)):
            return "tokens are not lists of strings"
        if not (isinstance(self.model, dict) and isinstance(self.model.get("config", {}), dict)):
            return "the model's description is not a mapping"
        n_layers = self.model.get("config", {}).get("n_layers")  # None: a trace made by hand
        if not (n_layers is None or (listed([n_layers], int) and n_layers >= 1)) or not isinstance(self.meta, dict):
            return "the model's n_layers is not a positive integer, or meta is not a mapping"
        if not (self.heads is None or (listed(self.heads, int) and len(set(self.heads)) == len(self.heads))):
            return "head indices are not distinct integers"
        # Heads the model lacks, or rows past its n_heads, were labelled and counted as its heads
        # (`head_row(-1)` of a file saying n_heads 2 over 4 rows opened head 1, not head 3).
        n_heads = self.model.get("config", {}).get("n_heads")  # None: a trace made by hand
        if not (n_heads is None or (listed([n_heads], int) and n_heads >= 1)):
            return f"the model's n_heads is not a positive integer, got {n_heads!r}"
        if self.heads and (min(self.heads) < 0 or max(self.heads) >= (n_heads or max(self.heads) + 1)):
            return f"head indices {self.heads} are not within [0, {n_heads or 'n_heads'})"
        if not self.maps or any(len(maps) == 0 for maps in self.maps.values()):  # emptied after construction
            return "no attention maps"
        pieces = {"source": len(self.src_tokens), "target": len(self.tgt_tokens)}
        sides = {"encoder": ("source", "source"), "decoder": ("target", "target"), "cross": ("target", "source")}
        sizes = {kind: (pieces[q], pieces[k]) for kind, (q, k) in sides.items()}
        first = np.shape(next(iter(self.maps.values()))[0])  # np.shape: `save` also sees maps made by hand
        heads = len(self.heads) if self.heads is not None else (n_heads or (first[0] if first else -1))
        for kind, maps in self.maps.items():
            layers = self.layers.get(kind)
            if not listed(layers, int) or len(layers) != len(maps):
                return f"{kind} layer indices do not match its maps"
            top = n_layers if n_layers is not None else layers[-1] + 1
            if layers != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= top:
                return f"{kind} layer indices {layers} are not distinct, increasing and within [0, {top})"
            # An encoder-only trace has no target pieces; a kind that reads none had empty axes,
            # whose (0, 0) ranges bokeh refused, and head_stats raised an IndexError.
            empty = [side for side in dict.fromkeys(sides[kind]) if not pieces[side]]
            if empty:
                return f"{kind} attention needs at least one {' piece and one '.join(empty)} piece"
            if any(np.shape(m) != (heads, *sizes[kind]) for m in maps):
                return f"{kind} maps are not (heads, {sizes[kind][0]}, {sizes[kind][1]})"
            if not all(np.isfinite(m).all() for m in maps):
                return f"{kind} maps hold NaN or infinite weights"
            outside = outside_softmax(kind, maps, layers, self.heads)
            if outside:
                return outside
        try:  # what a user may edit after `load`, checked here as the accessors check it when read
            for kind, mask in self.masks.items():
                as_mask(kind, mask)
            _ = self.heads_off
        except AttnlabError as error:
            return str(error)
        if any(kind not in self.maps or np.shape(mask) != sizes[kind] for kind, mask in self.masks.items()):
            return "a mask does not match its maps"
        return None

    def __eq__(self, other: object) -> bool:
        """The same sentence pair, maps and description, arrays compared by value (the generated
        `==` asked numpy for the truth of an array): `load(trace.save(path)) == trace`."""
        if not isinstance(other, AttentionTrace):
            return NotImplemented
        fields = ("src_tokens", "tgt_tokens", "maps", "masks", "layers", "heads", "model", "meta")
        return all(_same(getattr(self, name), getattr(other, name)) for name in fields)

    def __repr__(self) -> str:
        shape = ", ".join(f"{kind}: {len(self.maps[kind])}×{self.maps[kind][0].shape}" for kind in self.kinds)
        return f"AttentionTrace(src={len(self.src_tokens)} tokens, tgt={len(self.tgt_tokens)} tokens, {shape})"


def whole_number(value: object) -> bool:
    """An integer of any kind (Python's, NumPy's), not a bool, a float or a string: what an index
    or a count may be (decoding settings use it too)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_flag(value: object, name: str) -> bool:
    """`value` when it is True or False (NumPy's bools too); anything else is one line: a string
    such as "no" is true, and `mask="no"` drew the mask, `record="no"` recorded."""
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _same(a: Any, b: Any) -> bool:
    """Equal values, arrays by shape and content at any depth; a tuple equals the list it is
    saved as (JSON has no tuples)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _plain(value: Any, where: str) -> Any:
    """`value` ready for JSON, with numpy scalars (a score from a numpy computation) as Python
    numbers and tuples as lists; anything JSON would refuse (a date, an array) or silently change
    (a non-string key) is a one-line error naming where it sits, before anything is written."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise CheckpointError(f"cannot save {where}: its key {key!r} is not a string (JSON would make it one)")
        return {key: _plain(item, f"{where}[{key!r}]") for key, item in value.items()}
    raise CheckpointError(
        f"cannot save {where}: a trace file stores strings, numbers, lists and dicts (got {type(value).__name__})"
    )
