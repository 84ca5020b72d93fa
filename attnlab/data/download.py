"""`attnlab data download multi30k|wmt14|tatoeba`: fetch the public originals, verify, lay them out.

Each file is fetched from a pinned commit of the public repository it comes from, so its content
is fixed and its sha256 known; the files written are checked against the sha256 of the copies in
`../shared/data` (listed in its README), so a download and the shared copy are byte-identical.
`--url-base` swaps the host for a mirror with the same paths (http(s):// or file://), which is
also how the tests exercise this code offline.

The full WMT14 training corpus (4.5M pairs) is not fetched: get it from the WMT14 site and give
its directory to `attnlab data prepare wmt14 --train-dir`.
"""

from __future__ import annotations

import hashlib
import io
import os
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import DataError

GITHUB = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class Fetch:
    """One remote file and the local files it becomes (their sha256 are in `SHA256`)."""

    path: str  # below the URL base
    outputs: tuple[str, ...]  # paths in the data directory
    unpack: Callable[[bytes], list[bytes]] = lambda data: [data]  # remote bytes -> outputs' contents
    sha256: str | None = None  # of the remote file itself, where it is more than a wrapper


MAX_UNPACKED = 1 << 28  # 256 MiB: every file listed here is far smaller; more is no corpus of ours (a gzip bomb)


def _gunzip(data: bytes) -> list[bytes]:
    """The file a gzip holds, read no further than `MAX_UNPACKED`: a hostile mirror's bomb took
    memory (847 MB for 300 MB of zeros) before the sha256 refused it."""
    unpacked, rest = b"", data
    while rest:  # (a gzip may hold several members, one after the other)
        member = zlib.decompressobj(wbits=31)  # 31: the gzip wrapper, its header and CRC checked
        unpacked += member.decompress(rest, MAX_UNPACKED + 1 - len(unpacked))
        if len(unpacked) > MAX_UNPACKED:
            raise DataError(f"unpacks to more than {MAX_UNPACKED >> 20} MiB")
        if not member.eof:
            raise EOFError("the gzip ends before its end-of-stream marker: cut short")
        rest = member.unused_data
    return [unpacked]


def _tsv_columns(member: str, about: str) -> Callable[[bytes], list[bytes]]:
    """manythings.org zips: `English<TAB>Other[<TAB>attribution]` lines -> two aligned files + about."""

    def unpack(data: bytes) -> list[bytes]:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            rows = [line.split(b"\t") for line in archive.read(member).splitlines()]
            about_text = archive.read(about)
        return [b"".join(row[column] + b"\n" for row in rows) for column in (0, 1)] + [about_text]

    return unpack


# sha256 of every file written, as listed in ../shared/data/README.md
SHA256 = {
    "multi30k/test2016.cs": "45adb85f688de8407fddcbe1b36dca15d12aab868149b337e2576f2d6d2ff8d8",
    "multi30k/test2016.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
    "multi30k/test2016.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "multi30k/test2016.fr": "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6",
    "multi30k/test2017.de": "c3078bc3b36808bf9d20eb2347ed6137016179ef59ec0d2b9b8ecc3fb2880081",
    "multi30k/test2017.en": "ce1450ddc5ab0834502579d77a170849952e15a2938b34cc503bdc25ebb4fb98",
    "multi30k/test2017.fr": "6f3764e31dac41e9455e612958bcfd4e877c5e15cd66df2c2b2be6d9bd83e5b6",
    "multi30k/test2017_mscoco.de": "58277df3c75f92f7145a11b910b553d1cf82c439249d4dc237c899609eafac22",
    "multi30k/test2017_mscoco.en": "43051fdfa86fd5395182e718a94ca67b1b227b9f7c79596ff0f6b813216981d2",
    "multi30k/test2017_mscoco.fr": "39cde3f43f32b0a6bf29ce4917a46329ff32e53070c2fac87506695a740ae0a0",
    "multi30k/train.cs": "2be68b38c8d586ff4f54eb13cc6e1baaaa053695b3f070d3038303a47f2268da",
    "multi30k/train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "multi30k/train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "multi30k/train.fr": "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d",
    "multi30k/valid.cs": "d53827e469b0a1ca8d57e9e26b2b64c4bc4b33f5479c7b03ae87ae5c882c3e33",
    "multi30k/valid.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "multi30k/valid.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "multi30k/valid.fr": "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc",
    "wmt14_en_de/newstest2013.de": "d7ea35ab91ff3709e03ad9cb6bf5b4f2cc775cd2d72efd5254c4aec5e69663ca",
    "wmt14_en_de/newstest2013.en": "ace268a1d9724ca76f6d8e5c720ffdc08f01bdce45630ed8b269dc7918e1c16e",
    "wmt14_en_de/newstest2014.de": "ae5d110486bc33d7175e9e28c7d0051eb3e5fcd2166dd93371089852c091a20e",
    "wmt14_en_de/newstest2014.en": "7294bccf2879a97b3706b95c9595f1459617a8ee7130d5d8581c910e69736971",
    "opennmt_toy_ende/train.de": "fe1f824a189baa650eec46269e66eef07f7304ba7572598ebbe61c55eeff7d01",
    "opennmt_toy_ende/train.en": "db668a7d798bddf21d1ab8fcb403efbc724ba01b70472ad30d1e2049fd46e12b",
    "opennmt_toy_ende/valid.de": "df700a3ffe2b4309af3bdaba9c6385b5e6fe647ac408e36759a136eef43959ed",
    "opennmt_toy_ende/valid.en": "a32a3554fb6c1073b7ed8e0e43828e88ff35d2292e13b42503b479f43c69c782",
    "tatoeba_deu_eng/train.en": "7948e7d621a2e97c550123dbd174784894e83e6e140cf72e400d4ce5170cdce1",
    "tatoeba_deu_eng/train.de": "78b90b42ef51b2809d5629f803bba882e01c0fe6435ee9c2928deb5cc7ea2ad6",
    "tatoeba_deu_eng/MANYTHINGS_ABOUT.txt": "df6f57ec7e6d9b31e2b9c8b6a4e0bea4aebe0a408a8e7fb24ae217e37ef4e92f",
    "tatoeba_spa_eng/train.en": "c3c97cf0a5335931fe11b339b33a080acb77f03878d618affb72c0ffac834c78",
    "tatoeba_spa_eng/train.es": "2119b7baf8e832b6385bf1a10761cb6b44cf7c6c0ac8c787624a8f4b2854e7c6",
    "tatoeba_spa_eng/MANYTHINGS_ABOUT.txt": "df6f57ec7e6d9b31e2b9c8b6a4e0bea4aebe0a408a8e7fb24ae217e37ef4e92f",
    "tatoeba_cmn_eng/train.en": "ccba2714e8079a81c3e7ccfcad217be9e46442929f219cc2ce5f50c6ba14fbc7",
    "tatoeba_cmn_eng/train.zh": "334038b548871a067f4ab5af65dcbf06bc40f713fbbbe30e3ee6c93db8598025",
    "tatoeba_cmn_eng/MANYTHINGS_ABOUT.txt": "262eaba34251ebb2e7c5d514c5a2b856fe6eec058cee957d22a6c6129947a228",
}

# Pinned commits of the public repositories the shared copies were taken from.
_M30K = "multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
_M30K_NAMES = {
    "train": "train",
    "valid": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "test2017_mscoco": "test_2017_mscoco",
}
_OPUS = "Helsinki-NLP/OPUS-MT-testsets/ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180/testsets/deu-eng"
_ONMT = "OpenNMT/OpenNMT-py/3518fbab3092b21f12d78f9054097dffabb4025e/data"
_ONMT_NAMES = {"train.en": "src-train", "train.de": "tgt-train", "valid.en": "src-val", "valid.de": "tgt-val"}
_WMT_LANGS = {"en": "eng", "de": "deu"}


def _multi30k(local: str) -> Fetch:
    split, lang = local.removeprefix("multi30k/").rsplit(".", 1)
    return Fetch(f"{_M30K}/{_M30K_NAMES[split]}.{lang}.gz", (local,), _gunzip)


CORPORA: dict[str, list[Fetch]] = {
    "multi30k": [_multi30k(name) for name in SHA256 if name.startswith("multi30k/")],
    "wmt14": [
        *(
            Fetch(f"{_OPUS}/{year}.{_WMT_LANGS[lang]}", (f"wmt14_en_de/{year}.{lang}",))
            for year in ("newstest2013", "newstest2014")
            for lang in ("en", "de")
        ),
        *(Fetch(f"{_ONMT}/{remote}.txt", (f"opennmt_toy_ende/{local}",)) for local, remote in _ONMT_NAMES.items()),
    ],
    "tatoeba": [
        Fetch(
            "rioyshky/translation/de48b7027f7318d77010a6e08ed928c10748c23d/deu-eng.zip",
            ("tatoeba_deu_eng/train.en", "tatoeba_deu_eng/train.de", "tatoeba_deu_eng/MANYTHINGS_ABOUT.txt"),
            _tsv_columns("deu.txt", "_about.txt"),
            sha256="b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28",
        ),
        Fetch(
            "Hoangduc212001/hoang/2cfd26f9551f5c2d614e8000500891801840a438/spa-eng.zip",
            ("tatoeba_spa_eng/train.en", "tatoeba_spa_eng/train.es", "tatoeba_spa_eng/MANYTHINGS_ABOUT.txt"),
            _tsv_columns("spa-eng/spa.txt", "spa-eng/_about.txt"),
            sha256="f80e581ae291aa34dd3aba7bd98b5e9505234da4318e2f3295df70a1520c7f61",
        ),
        Fetch(  # cmn.txt has a third column (per-sentence attribution), dropped; it stays in the zip
            "wuyuhanwyh777-max/CET4Focus/475b882fee97ab839782287f57ac71a03476655e/data/cmn-eng.zip",
            ("tatoeba_cmn_eng/train.en", "tatoeba_cmn_eng/train.zh", "tatoeba_cmn_eng/MANYTHINGS_ABOUT.txt"),
            _tsv_columns("cmn.txt", "_about.txt"),
            sha256="d606361aa7312dcdfb15ef4fc51cb1e7ed8bc2dc608a7b192626cd36e8403106",
        ),
    ],
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verify(what: str, data: bytes, expected: str) -> None:
    if _sha256(data) != expected:
        raise DataError(f"{what}: sha256 {_sha256(data)} is not the expected {expected}; corrupt or changed source")


def _present(out: Path, fetch: Fetch) -> bool:
    """All outputs already there with the right content: nothing to fetch."""
    return all((out / name).is_file() and _sha256((out / name).read_bytes()) == SHA256[name] for name in fetch.outputs)


def fetch_bytes(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DataError(f"could not fetch {url}: {reason}; check the network, or pass --url-base MIRROR") from None


def _make(directory: Path) -> None:
    """`directory` created if need be, or one line saying why it cannot be."""
    if directory.exists() and not directory.is_dir():
        raise DataError(f"{directory} is a file where a directory belongs; move it, or choose another --out")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create {directory}: {error.strerror or error}") from None


def download(
    corpus: str, out: str | os.PathLike[str], url_base: str | None = None, echo: Callable[[str], object] = print
) -> list[Path]:
    """Fetch `corpus` into the data directory `out` (the layout `prepare` reads); return the files."""
    if corpus not in CORPORA:
        raise DataError(f"no download for {corpus!r}; choose one of: {', '.join(CORPORA)}")
    out, base = Path(out), (url_base or GITHUB).rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https", "file"):  # a bare path was a ValueError traceback
        hint = f" (that directory as a URL: {Path(base).resolve().as_uri()})" if Path(base).is_dir() else ""
        raise DataError(f"--url-base {url_base}: a mirror is a URL starting http://, https:// or file://{hint}")
    _make(out)  # before fetching: an --out that is a file failed after the first download, a traceback
    written = []
    for fetch in CORPORA[corpus]:
        written += [out / name for name in fetch.outputs]
        if _present(out, fetch):
            echo(f"  present  {', '.join(fetch.outputs)}")
            continue
        url = f"{base}/{fetch.path}"
        data = fetch_bytes(url)
        if fetch.sha256:
            _verify(url, data, fetch.sha256)
        try:  # an error page served as the file, a transfer cut short: a traceback from gzip or zipfile
            contents = fetch.unpack(data)
        except (OSError, EOFError, zlib.error, zipfile.BadZipFile, KeyError, DataError) as error:
            raise DataError(f"{url}: cannot unpack it ({error}); corrupt or changed source") from None
        for name, content in zip(fetch.outputs, contents, strict=True):
            _verify(f"{name} from {url}", content, SHA256[name])
            path = out / name
            _make(path.parent)
            partial = path.with_name(path.name + ".part")
            try:
                partial.write_bytes(content)
                partial.replace(path)  # never a half-written file under the real name
            except OSError as error:  # a full disk, or a directory where the file belongs
                partial.unlink(missing_ok=True)
                raise DataError(f"cannot write {path}: {error.strerror or error}") from None
            echo(f"  fetched  {name}")
    echo(
        f"{corpus}: {len(written)} files in {out} verified; prepare with `attnlab data prepare {corpus} --data-dir {out}`"
    )
    return written
