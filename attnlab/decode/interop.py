"""Models in, models out: `attnlab import marian` and `attnlab export ctranslate2`.

In: a local Hugging Face Marian / OPUS-MT directory becomes an attnlab checkpoint (the weights
renamed, the tokenizer files copied, a model card saying where it came from), so every view,
recording and command works on it as on attnlab's own models. `attnlab.load()` also opens such a
directory directly, converting it in memory.

Out: any attnlab checkpoint (trained here or imported) becomes a CTranslate2 model through
CTranslate2's own specification API, for serving with the inference engine users deploy with
(`pip install attnlab[serve]`). What CTranslate2 cannot express is refused in one sentence.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from attnlab.data.vocab import MARIAN_FILES, is_language_code, marian_tokenizers, separate_vocabs
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.streams import model_directory
from attnlab.errors import ArgumentParser, AttnlabError, ConfigError
from attnlab.model.checkpoint import refuse_existing, save_checkpoint
from attnlab.model.manifest import check_directory
from attnlab.model.marian import check_vocabularies, read_marian
from attnlab.model.transformer import Transformer
from attnlab.publish import assembly_directory, open_modes, publish

QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16", "int8_bfloat16", "float16", "int8_float16")
# What `spec.save` writes (the vocabularies: one shared file, or one per side), and nothing else.
CT2_FILES = ({"model.bin", "config.json", "shared_vocabulary.json"},)
CT2_FILES += ({"model.bin", "config.json", "source_vocabulary.json", "target_vocabulary.json"},)


def check_out_directory(out: Path, source: str | Path | None) -> None:
    """Refuse an --out that `import`/`export` cannot replace as a whole without harm, before any
    work: the current directory or one above it (`export --out . --force` deleted everything
    there, then failed renaming the new model over the working directory), one holding `source`,
    the model being read, and one inside a model directory (as `evaluate --out` refuses)."""
    where = out.resolve()
    with contextlib.suppress(OSError):  # (a working directory since deleted: nothing to protect)
        if where == Path.cwd().resolve() or where in Path.cwd().resolve().parents:
            raise AttnlabError(f"--out {out} is or holds the current directory; name a new directory")
    if source is not None and (where == Path(source).resolve() or where in Path(source).resolve().parents):
        raise AttnlabError(f"--out {out} is or holds {source}, the model being read; name a new directory")
    if (model_dir := model_directory(where.parent)) is not None:
        raise AttnlabError(f"--out {out} is inside the model directory {model_dir}; name a directory elsewhere")


# -- in: Hugging Face Marian ---------------------------------------------------------------------------
def model_card(source: Path, model: Transformer, about: dict[str, Any]) -> str:
    c = model.config
    vocab = f"{c.vocab_size:,}" if c.share_embeddings else f"{c.vocab_size:,} source / {c.target_vocab:,} target"
    return "\n".join(
        [
            f"# {about.get('name_or_path') or source.name} (imported)",
            "",
            f"Converted by `attnlab import marian` from the Hugging Face Marian directory `{source.name}`"
            f" (transformers {about.get('transformers_version') or '?'}). The weights are the original ones,"
            " renamed; the tokenizer files are copied unchanged. Licence and training data: see the original"
            " model's card.",
            "",
            "| | |",
            "|---|---|",
            f"| layers × heads | {c.n_layers} × {c.n_heads} (encoder and decoder) |",
            f"| d_model / d_ff | {c.d_model} / {c.d_ff} |",
            f"| activation | {c.activation} |",
            f"| vocabulary | {vocab}; embeddings {'shared' if c.share_embeddings else 'separate'},"
            f" output {'tied' if c.tie_output else 'untied'}, logits bias |",
            f"| positions | sinusoidal, Marian's layout (sines then cosines); embeddings scaled: {c.scale_embedding} |",
            f"| dropout (training) | {about.get('dropout')} |",
            "",
            "Decoding uses the paper's settings unless told otherwise (beam 4, α 0.6, input + 50).",
            "",
        ]
    )


def import_marian(
    directory: str | Path, out: str | Path, dtype: torch.dtype = torch.float32, force: bool = False
) -> Path:
    """Convert a Marian directory into an attnlab checkpoint directory at `out` (an existing one
    replaced only with `force`), its tokenizers checked first: a checkpoint they cannot serve
    would fail on every sentence, long after the import said it worked."""
    directory, out = Path(directory), Path(out)
    check_out_directory(out, directory)
    refuse_existing(out, force)
    model, about = read_marian(directory)
    separate = separate_vocabs(directory)
    check_vocabularies(directory, model.config, *marian_tokenizers(directory), separate=separate)
    names = (*MARIAN_FILES, "target_vocab.json") if separate else MARIAN_FILES  # (a stray one is not the model's)
    files = {name: directory / name for name in names}
    meta = {"task": "translate", "tokenizer": "marian", "imported_from": {"marian": directory.name, **about}}
    return save_checkpoint(out, model, files, meta=meta, dtype=dtype, card=model_card(directory, model, about))


# -- out: CTranslate2 ------------------------------------------------------------------------------------
def check_exportable(model: Transformer) -> None:
    """Refuse, in one sentence, what CTranslate2's Transformer specification cannot express."""
    c = model.config
    if c.d_k != c.d_model // c.n_heads or c.d_v != c.d_k:
        raise ConfigError(f"CTranslate2 needs d_k = d_v = d_model / n_heads; this model has d_k={c.d_k}, d_v={c.d_v}")
    if c.attn_window is not None:
        raise ConfigError(f"CTranslate2 has no restricted self-attention; this model has attn_window={c.attn_window}")


def vocabulary(tokenizer: Any, size: int) -> list[str]:
    """Pieces in id order; ids a Marian vocabulary skips get unique placeholders."""
    pieces = [tokenizer.id_to_piece(i) for i in range(size)]
    seen: set[str] = set()
    for i, piece in enumerate(pieces):
        if piece in seen:
            pieces[i] = f"<attnlab-unused-{i}>"
        seen.add(pieces[i])
    return pieces


FORBIDDEN_LOGIT = -1e4  # exp() of it is 0 in every precision CTranslate2 runs (float16 included)


def forbidding(net: Transformer) -> torch.Tensor:
    """The logits' bias (the model's own, else zeros) with `<pad>` and `<s>` made impossible.
    attnlab's search never produces them (`TransformerStepper` sets their log-probability to −∞);
    CTranslate2 has no setting for that in a model, and a served model then produced `<pad>`
    (an imported Marian's decoder start) where attnlab produced words. A bias of −10⁴ takes them
    out of the softmax: the other tokens keep their order, their log-probabilities rise by
    −log(1 − p(<pad>) − p(<s>)) (0 for a trained model, which gives them no probability)."""
    c = net.config
    bias = net.logits_bias.detach().clone() if c.logits_bias else torch.zeros(c.target_vocab)
    bias[[c.pad_id, c.bos_id]] = FORBIDDEN_LOGIT
    return bias


def ctranslate2_spec(net: Transformer, source: list[str], target: list[str], unk_id: int) -> Any:
    """The CTranslate2 `TransformerSpec` holding `net`'s weights, with `source`/`target` the
    pieces of each vocabulary in id order."""
    from ctranslate2.specs import common_spec, transformer_spec  # optional: pip install attnlab[serve]

    c = net.config
    check_exportable(net)
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    activation["swish"] = common_spec.Activation.SWISH
    spec = transformer_spec.TransformerSpec.from_config(
        c.n_layers, c.n_heads, pre_norm=c.norm == "pre", activation=activation[c.activation]
    )
    positions = net.positions.weight if c.positional == "learned" else net.pe
    for side, table in ((spec.encoder, net.embed), (spec.decoder, net.target_embedding)):
        side.scale_embeddings = net.embed_scale
        side.position_encodings.encodings = tensor(positions)
        (side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings).weight = tensor(table.weight)
    if c.norm == "pre":
        set_norm(spec.encoder.layer_norm, net.final_norms[0])
        set_norm(spec.decoder.layer_norm, net.final_norms[1])
    for layer_spec, layer in zip(spec.encoder.layer, net.encoder["layers"], strict=True):
        set_attention(
            layer_spec.self_attention, layer.self_attn, fused=[["w_q", "w_k", "w_v"]], norm=layer.res_attn.norm
        )
        set_ffn(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, net.decoder["layers"], strict=True):
        set_attention(
            layer_spec.self_attention, layer.self_attn, fused=[["w_q", "w_k", "w_v"]], norm=layer.res_self.norm
        )
        set_attention(
            layer_spec.attention, layer.cross_attn, fused=[["w_q"], ["w_k", "w_v"]], norm=layer.res_cross.norm
        )
        set_ffn(layer_spec.ffn, layer)
    spec.decoder.projection.weight = tensor(net.target_embedding.weight if c.tie_output else net.out_proj.weight)
    spec.decoder.projection.bias = tensor(forbidding(net))
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.bos_token = spec.config.decoder_start_token = target[c.bos_id]
    spec.config.eos_token = target[c.eos_id]
    spec.config.unk_token = target[unk_id]
    if source[c.eos_id] != target[c.eos_id]:
        raise ConfigError(
            f"CTranslate2 appends the end token by name; this model's vocabularies name id {c.eos_id}"
            f" {source[c.eos_id]!r} and {target[c.eos_id]!r}"
        )
    spec.config.add_source_eos = True  # attnlab's models read </s> after every source (encode_source)
    return spec


def tensor(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().contiguous()


def set_norm(spec: Any, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = tensor(norm.weight), tensor(norm.bias)


def set_linear(spec: Any, linears: list[torch.nn.Linear]) -> None:
    """One CTranslate2 linear from one or more of ours stacked along the output (fused QKV)."""
    spec.weight = torch.cat([tensor(linear.weight) for linear in linears])
    if linears[0].bias is not None:  # (the paper's attention projections have none: CTranslate2's is optional)
        spec.bias = torch.cat([tensor(linear.bias) for linear in linears])


def set_attention(spec: Any, attention: torch.nn.Module, fused: list[list[str]], norm: torch.nn.LayerNorm) -> None:
    for linear_spec, names in zip(spec.linear, fused, strict=False):
        set_linear(linear_spec, [getattr(attention, name) for name in names])
    set_linear(spec.linear[-1], [attention.w_o])
    set_norm(spec.layer_norm, norm)


def set_ffn(spec: Any, layer: torch.nn.Module) -> None:
    set_linear(spec.linear_0, [layer.ffn.w_1])
    set_linear(spec.linear_1, [layer.ffn.w_2])
    set_norm(spec.layer_norm, layer.res_ffn.norm)


def export_ctranslate2(loaded: Model, out: str | Path, quantization: str | None = None, force: bool = False) -> Path:
    """Write `loaded` (its weights and both vocabularies) as a CTranslate2 model directory."""
    check_out_directory(Path(out), loaded.path)
    config = loaded.model.config
    source = vocabulary(loaded.tokenizer, config.vocab_size)
    target = vocabulary(loaded.target_tokenizer, config.target_vocab)
    spec = ctranslate2_spec(loaded.model, source, target, loaded.target_tokenizer.unk_id())
    return write_spec(spec, out, quantization, force)


def write_spec(spec: Any, out: str | Path, quantization: str | None = None, force: bool = False) -> Path:
    """Validate, optionally quantize, and save a CTranslate2 spec, built in a temporary sibling
    directory and published by `publish` (the old export renamed aside, and back if the rename
    fails), so a failed export leaves the old one as it was. `force` replaces an empty directory
    or a CTranslate2 model with nothing beside its files (`CT2_FILES`): a directory holding a
    model.bin and the user's files went whole."""
    out = Path(out)
    refuse_existing(out, force)
    if out.exists() and (names := {p.name for p in out.iterdir()}) and not is_ctranslate2_model(out):
        extra = sorted(names - set.union(*CT2_FILES))
        held = f"it holds {extra[0]!r}, which no export writes" if extra else "an export's files are not all there"
        raise AttnlabError(f"{out} is not a CTranslate2 model; refusing to replace it ({held}: name a new directory)")
    spec.validate()
    spec.optimize(quantization=quantization)
    tmp = assembly_directory(out)
    try:
        spec.save(str(tmp))
        open_modes(tmp)
        publish(tmp, out)
    except OSError as error:  # a full disk: the temporary directory goes, an old export stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise AttnlabError(f"could not write {out} ({error.strerror or error})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def is_ctranslate2_model(directory: Path) -> bool:
    """Whether `directory` holds the files of a CTranslate2 export (`CT2_FILES`) and nothing else."""
    paths = list(directory.iterdir())
    return all(p.is_file() and not p.is_symlink() for p in paths) and {p.name for p in paths} in CT2_FILES


# -- command line ---------------------------------------------------------------------------------------
def cli_import(argv: list[str]) -> int:
    """`attnlab import marian DIR --out OUT`."""
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab import", description=__doc__.split("\n\n")[1])
    parser.add_argument("kind", choices=["marian"], help="what the directory holds")
    parser.add_argument("directory", help="a local Hugging Face MarianMTModel directory (no download)")
    parser.add_argument("--out", required=True, help="the attnlab checkpoint directory to write")
    parser.add_argument("--bf16", action="store_true", help="store the weights in bfloat16 (half the size)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace --out if it is an attnlab checkpoint (not one holding files no checkpoint writes: a model card)",
    )
    args = parser.parse_args(argv)
    check_directory(Path(args.directory))  # before --out is touched
    path = import_marian(args.directory, args.out, torch.bfloat16 if args.bf16 else torch.float32, args.force)
    print(f"imported {args.directory} into {path} (open it with `attnlab explore --checkpoint {path}`)")
    return 0


def cli_export(argv: list[str]) -> int:
    """`attnlab export ctranslate2 CHECKPOINT --out DIR [--quantization int8]`."""
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab export", description=__doc__.split("\n\n")[2])
    parser.add_argument("kind", choices=["ctranslate2"], help="the format to write")
    parser.add_argument("checkpoint", help="an attnlab checkpoint (or run, or Marian) directory")
    parser.add_argument("--out", required=True, help="the CTranslate2 model directory to write")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, help="store the weights quantized (e.g. int8)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace --out if it is a CTranslate2 model or an empty directory (any other directory is refused)",
    )
    args = parser.parse_args(argv)
    try:
        import ctranslate2  # noqa: F401  # optional: pip install attnlab[serve]
    except ImportError:
        raise AttnlabError("exporting needs CTranslate2: pip install 'attnlab[serve]' (or ctranslate2)") from None
    loaded = load(args.checkpoint)
    path = export_ctranslate2(loaded, args.out, args.quantization, args.force)
    if loaded.task == "parse":  # exported all the same: the weights are the model's
        said = "CTranslate2 decodes freely: it applies neither the tree constraint nor the rescoring of `parse`"
        warnings.warn(said, stacklevel=2)
    spm_file = Path(loaded.path or args.checkpoint) / (
        "source.spm" if loaded.meta.get("tokenizer") == "marian" else "spm.model"
    )
    # a multilingual model's `>>spa<<` is one piece, which source.spm would cut into five
    codes = any(is_language_code(piece) for piece in getattr(loaded.tokenizer, "vocab", ()))
    code = "; a leading >>xx<< language code is one piece of its own, before the rest's" if codes else ""
    print(
        f"exported {args.checkpoint} to {path}; translate lists of {spm_file}'s pieces with"
        f" ctranslate2.Translator({str(path)!r}).translate_batch (it appends </s> itself{code})"
    )
    return 0
