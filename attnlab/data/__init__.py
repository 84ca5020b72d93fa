"""attnlab.data — text in, token ids out: the corpora (where they are, how they split), their
download, the shared sentencepiece vocabulary, prepared splits as memory-mapped ids, the §5.1
token-budget batches, and the Penn Treebank trees the parser reads and writes.

May import: nothing of attnlab but `attnlab.errors`; it knows no model. Each corpus is a
function in `corpora.py` returning its splits (Tatoeba's, with its hashed split and the Chinese
script conversion, in `tatoeba.py`); `prepared.py` turns any of them into ids (`summary.py` is the
table it prints, `staging.py` its --out directory), `commands.py` is `attnlab data`.
"""

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.corpora import (
    CORPORA,
    DEFAULT_PAIR,
    DEFAULT_VOCAB,
    PTB_FILES,
    PTB_LEAVES,
    Split,
    check_parallel,
    count_lines,
    find_data_dir,
    parallel_files,
    read_lines,
    read_pairs,
)
from attnlab.data.prepared import ParallelData, prepare, write_split
from attnlab.data.summary import summary
from attnlab.data.tatoeba import english_key, tatoeba_side, to_simplified
from attnlab.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    join_unspaced,
    load_tokenizer,
    spm_settings,
    train_tokenizer,
    unknown_characters,
)

__all__ = [
    "BOS_ID",
    "CORPORA",
    "DEFAULT_PAIR",
    "DEFAULT_VOCAB",
    "EOS_ID",
    "PAD_ID",
    "PTB_FILES",
    "PTB_LEAVES",
    "UNK_ID",
    "Batch",
    "ParallelData",
    "Split",
    "TokenBatchSampler",
    "check_parallel",
    "collate",
    "count_lines",
    "english_key",
    "find_data_dir",
    "join_unspaced",
    "load_tokenizer",
    "parallel_files",
    "prepare",
    "read_lines",
    "read_pairs",
    "spm_settings",
    "summary",
    "tatoeba_side",
    "to_simplified",
    "train_tokenizer",
    "unknown_characters",
    "write_split",
]
