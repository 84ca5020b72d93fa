"""Penn Treebank trees for §6.3: reading, cleaning, linearisation and bracket F1.

§6.3 follows Vinyals & Kaiser (*Grammar as a Foreign Language*): a parse is produced as a
sequence-to-sequence translation from the words to a linearised tree. We use their format:
`(S (NP XX XX )NP (VP XX )VP XX )S`, where every part-of-speech tag is replaced by the
placeholder `XX` and the words are left out of the target because they are the source.
`delinearize` puts the words back, and repairs whatever a model emits so that evaluation always
gets a tree.

Scoring follows EVALB's `COLLINS.prm`: labelled brackets with function tags stripped, ADVP = PRT,
preterminals and the root wrapper not counted, punctuation words (by gold tag) left out of spans.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.errors import DataError

PLACEHOLDER = "XX"  # stands for every POS tag in the linearised target
EMPTY = "-NONE-"  # empty elements (traces, null complementisers)
ROOT_LABELS = frozenset({"", "TOP", "ROOT"})  # wrappers EVALB does not count
PUNCTUATION_TAGS = frozenset({"``", "''", ".", ":", ",", EMPTY})  # COLLINS.prm DELETE_LABEL
# For gold trees whose tags are `XX` (rebuilt from prepared data): the words those tags carry in WSJ.
# "'" is left out: 60 of its 70 WSJ-sample occurrences are the possessive (POS), not a quote.
PUNCTUATION_WORDS = frozenset({",", ".", "?", "!", ":", ";", "--", "-", "...", "``", "`", "''"})
EQUAL_LABELS = {"PRT": "ADVP"}  # COLLINS.prm EQ_LABEL ADVP PRT
PTB_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "{": "-LCB-", "}": "-RCB-", "[": "-LSB-", "]": "-RSB-"}  # as `parse` writes

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
# Deepest tree read or rebuilt: the WSJ sample's deepest is 29 levels, and the recursive walks below (3
# frames a level) hit Python's recursion limit near 300, a RecursionError of ~3000 lines.
MAX_DEPTH = 200


@dataclass
class Tree:
    """A constituent: a label and children that are trees or, under a preterminal, one word."""

    label: str
    children: list[Tree | str] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def __str__(self) -> str:
        return to_string(self)


# What shows a line is running text rather than Penn Treebank words: a comma, colon, semicolon, ! or
# ? stuck to a word, a final full stop stuck to the last word (not "U.S."), a bracket stuck to one,
# a contraction not split ("didn't", "John's"), or double quotes (the Treebank writes `` and '').
_RUNNING_TEXT = re.compile(
    r"\w[,;:!?](?=\s|$)|(?:^|\s)[^\s.]*\w\.\s*$|\(\w|\w\)|\w(?:n't|'s|'re|'ve|'ll|'d|'m)\b|[\"\u201c\u201d]"
)


def treebank_words(text: str) -> list[str]:
    """A sentence's words as the Penn Treebank writes them, which the parser reads (§6.3): running
    text is cut by NLTK's Treebank tokenizer ("loudly." as "loudly" "."; "didn't" as "did" "n't";
    quotes as `` and ''); a line already in Treebank words is left as it is, whose '' the tokenizer
    would turn into ``. A sentence typed as written was parsed with "loudly." one word."""
    if "``" in text or "''" in text or not _RUNNING_TEXT.search(text):
        return text.split()
    from nltk.tokenize import TreebankWordTokenizer  # lazy: typed sentences only

    return TreebankWordTokenizer().tokenize(text)


def parse(text: str, source: str = "<string>") -> list[Tree]:
    """All top-level trees of bracketed text; `( (S ...) )` wrappers with one child are removed."""
    trees: list[Tree] = []
    stack: list[Tree] = []
    expect_label = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == "(":  # its label, if any, is the next token; "((" leaves the outer one unlabelled
            if len(stack) == MAX_DEPTH:  # a text of several lines (a .mrg file) is named by line too
                line = text.count("\n", 0, match.start()) + 1
                where = f"{source}:{line}" if "\n" in text.rstrip("\n") else source
                raise DataError(f"{where}: a tree nested deeper than {MAX_DEPTH} levels (the WSJ sample's: 29)")
            stack.append(Tree(""))
            expect_label = True
        elif token == ")":
            if not stack:
                raise DataError(f"{source}: unbalanced ')' at character {match.start()}")
            node = stack.pop()
            expect_label = False
            if stack:
                stack[-1].children.append(node)
            else:
                trees.append(node.children[0] if _is_wrapper(node) else node)
        elif expect_label:
            stack[-1].label = token
            expect_label = False
        elif stack:
            stack[-1].children.append(token)
        else:
            raise DataError(f"{source}: text {token!r} outside any tree at character {match.start()}")
    if stack:
        raise DataError(f"{source}: {len(stack)} unclosed '(' at the end")
    return trees


def parse_tree(text: str, source: str | None = None) -> Tree:
    """One tree from bracketed text; several top-level trees are wrapped in an unlabelled root.
    `source` (e.g. `FILE:LINE`) starts the message of an error."""
    trees = parse(text, source or "<string>")
    if not trees:
        raise DataError(f"{source + ': ' if source else ''}no tree in {text[:60]!r}")
    return trees[0] if len(trees) == 1 else Tree("", list(trees))


def flat(tree: Tree) -> Tree:
    """`tree`'s words with no bracket over them: what a failed parse is scored as (it costs the
    recall of every gold bracket, where leaving the sentence out would flatter F1)."""
    return Tree("", [Tree(word.label, list(word.children)) for word in preterminals(tree)])


def _is_wrapper(node: Tree) -> bool:
    return node.label == "" and len(node.children) == 1 and isinstance(node.children[0], Tree)


def read_trees(source: str | Path | Iterable[str | Path]) -> Iterator[Tree]:
    """Trees of .mrg files (multi-line s-expressions), a directory of them, or one-per-line files."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        files = sorted(path.glob("*.mrg")) if path.is_dir() else [path]
    else:
        files = [Path(p) for p in source]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataError(f"treebank file {path} does not exist") from None
        except UnicodeDecodeError as error:
            raise DataError(f"{path}: invalid UTF-8 at byte {error.start}") from None
        yield from parse(text, str(path))


def strip_function_tags(label: str) -> str:
    """`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`, `ADVP|PRT` -> `ADVP`; `-LRB-`/`-NONE-` stay whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def clean(tree: Tree) -> Tree:
    """Function tags stripped, `-NONE-` elements removed with the constituents they leave empty.

    A tree made only of empty elements comes back with no children; callers skip it.
    """
    return _clean(tree) or Tree(strip_function_tags(tree.label))


def _clean(node: Tree) -> Tree | None:
    if node.label == EMPTY:
        return None
    if node.is_preterminal:
        return Tree(strip_function_tags(node.label), list(node.children))
    children = [kept for child in node.children if (kept := _clean_child(child)) is not None]
    return Tree(strip_function_tags(node.label), children) if children else None


def _clean_child(child: Tree | str) -> Tree | str | None:
    return _clean(child) if isinstance(child, Tree) else child


def leaves(tree: Tree) -> list[str]:
    """The words, left to right."""
    words: list[str] = []
    for child in tree.children:
        words.extend(leaves(child) if isinstance(child, Tree) else [child])
    return words


def preterminals(tree: Tree) -> list[Tree]:
    """The (tag, word) nodes, left to right."""
    if tree.is_preterminal:
        return [tree]
    return [pt for child in tree.children if isinstance(child, Tree) for pt in preterminals(child)]


def mask_pos(tree: Tree, tag: str = PLACEHOLDER) -> Tree:
    """The same tree with every POS tag replaced by `tag` (what a linearised parse can express)."""
    if tree.is_preterminal:
        return Tree(tag, list(tree.children))
    return Tree(tree.label, [mask_pos(c, tag) if isinstance(c, Tree) else c for c in tree.children])


def linearize(tree: Tree, spelled: bool = False) -> list[str]:
    """Vinyals & Kaiser's sequence: `(LABEL ... )LABEL` around constituents, `XX` for each word;
    `spelled` writes the word itself instead (`(S (NP The dog )NP …`), so that a decoder sees in
    its own prefix which word it has reached rather than having to count `XX`s."""
    if tree.is_preterminal:
        return [str(tree.children[0]) if spelled else PLACEHOLDER]
    tokens = ["(" + tree.label]
    for child in tree.children:
        tokens.extend(linearize(child, spelled) if isinstance(child, Tree) else [child if spelled else PLACEHOLDER])
    tokens.append(")" + tree.label)
    return tokens


def is_spelled(tokens: Sequence[str] | str) -> bool:
    """Whether a well-formed linearised tree writes its words (`spelled`) rather than `XX`."""
    tokens = tokens.split() if isinstance(tokens, str) else tokens
    return any(t != PLACEHOLDER and not _is_bracket(t) for t in tokens)


def _is_bracket(token: str) -> bool:
    return len(token) > 1 and token[0] in "()"


def delinearize(tokens: Sequence[str] | str, words: Sequence[str], spelled: bool = False) -> Tree:
    """Rebuild a tree from a linearised sequence, with `words` as leaves under `XX` preterminals.
    With `spelled`, every token that is not a bracket stands for the next word (whatever it
    says: the input's words are the leaves); otherwise only `XX` does.

    Model output can be malformed, and evaluation must still get one tree over exactly `words`:
    unknown tokens and stray closing brackets are skipped, a closing bracket closes the innermost
    open constituent whatever its label, brackets left open are closed, constituents with no words
    are dropped, leaves beyond the words are dropped, words left over are attached to the last
    root, and several roots are wrapped in an unlabelled root (which EVALB does not count).
    Brackets opened past MAX_DEPTH - 2 (room for the preterminals and an unlabelled root) are
    skipped, with as many closing ones: the tree's walks recurse, and it must read back with `parse`.
    """
    if isinstance(tokens, str):
        tokens = tokens.split()
    stack: list[Tree] = []
    roots: list[Tree] = []
    next_word = skipped = 0

    def attach(node: Tree) -> None:
        if node.children:
            (stack[-1].children if stack else roots).append(node)

    for token in tokens:
        if token == PLACEHOLDER or (spelled and not _is_bracket(token)):
            if next_word < len(words):
                attach(Tree(PLACEHOLDER, [words[next_word]]))
                next_word += 1
        elif token.startswith("(") and len(stack) < MAX_DEPTH - 2:
            stack.append(Tree(token[1:]))
        elif token.startswith("("):
            skipped += 1
        elif token.startswith(")") and skipped:
            skipped -= 1
        elif token.startswith(")") and stack:
            attach(stack.pop())
    while stack:
        attach(stack.pop())
    rest = [Tree(PLACEHOLDER, [word]) for word in words[next_word:]]
    if len(roots) == 1 and not roots[0].is_preterminal:
        roots[0].children.extend(rest)
        return roots[0]
    return Tree("", roots + rest)


def to_string(tree: Tree) -> str:
    """Penn bracketed form on one line: `(S (NP (DT The) (NN dog)) (VP (VBZ barks)))`."""
    parts = [to_string(c) if isinstance(c, Tree) else c for c in tree.children]
    return "(" + " ".join([tree.label, *parts]) + ")" if tree.label else "( " + " ".join(parts) + ")"


def _eval_label(label: str) -> str:
    label = strip_function_tags(label)
    return EQUAL_LABELS.get(label, label)


def brackets(tree: Tree, counted: Sequence[bool]) -> Counter[tuple[str, int, int]]:
    """Labelled spans (label, start, end) over the words marked `counted`, EVALB style.

    Preterminals and a root wrapper are not brackets; a constituent that covers no counted word
    (e.g. only punctuation) has no span and is not counted either.
    """
    found: Counter[tuple[str, int, int]] = Counter()
    word = 0
    position = 0

    def walk(node: Tree, is_root: bool) -> None:
        nonlocal word, position
        if node.is_preterminal:
            position += counted[word] if word < len(counted) else 0
            word += 1
            return
        start = position
        for child in node.children:
            if isinstance(child, Tree):
                walk(child, False)
        if position > start and not (is_root and node.label in ROOT_LABELS):
            found[(_eval_label(node.label), start, position)] += 1

    walk(tree, True)
    return found


def _is_punctuation(tag: str, word: Tree | str) -> bool:
    return word in PUNCTUATION_WORDS if tag == PLACEHOLDER else tag in PUNCTUATION_TAGS


def _word(preterminal: Tree) -> str:
    """A leaf as the parser writes it: composed (NFC), brackets escaped (a source's "(" is the
    parse's "-LRB-"), so that a word compares equal however the two files spell it."""
    word = unicodedata.normalize("NFC", str(preterminal.children[0]))
    return "".join(PTB_BRACKETS.get(char, char) for char in word)


def bracket_f1(gold_trees: Iterable[Tree], pred_trees: Iterable[Tree]) -> dict[str, float]:
    """Labelled bracket precision, recall and F1 in percent, as EVALB (COLLINS.prm) computes them.

    Punctuation is decided by the gold POS tags (predictions carry only `XX`); where the gold tag
    is `XX` too, by the word (`PUNCTUATION_WORDS`). A pair whose words differ is skipped and
    counted in `skipped`, as EVALB does ("Words unmatch"); `delinearize` never makes one. Only the
    counts were compared: a parse of other words of the same number was scored as the reference's.
    """
    gold_list, pred_list = list(gold_trees), list(pred_trees)
    if len(gold_list) != len(pred_list):
        raise DataError(f"{len(gold_list)} gold trees but {len(pred_list)} predicted trees")
    matched = n_gold = n_pred = exact = skipped = 0
    for gold, pred in zip(gold_list, pred_list, strict=True):
        gold, pred = clean(gold), clean(pred)
        gold_words = preterminals(gold)
        if [_word(pt) for pt in gold_words] != [_word(pt) for pt in preterminals(pred)]:
            skipped += 1
            continue
        counted = [not _is_punctuation(pt.label, pt.children[0]) for pt in gold_words]
        gold_brackets, pred_brackets = brackets(gold, counted), brackets(pred, counted)
        matched += sum((gold_brackets & pred_brackets).values())
        n_gold += sum(gold_brackets.values())
        n_pred += sum(pred_brackets.values())
        exact += gold_brackets == pred_brackets
    precision = 100.0 * matched / n_pred if n_pred else 0.0
    recall = 100.0 * matched / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    evaluated = len(gold_list) - skipped
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "matched": matched,
        "gold": n_gold,
        "predicted": n_pred,
        "sentences": evaluated,
        "exact_match": 100.0 * exact / evaluated if evaluated else 0.0,
        "skipped": skipped,
    }
