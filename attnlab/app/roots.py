"""Which directories a served explorer may open, and how it names them.

`attnlab explore --address 0.0.0.0` puts a path box in front of anyone who can reach the port.
Whatever they type must not tell them anything about the server's disk: only directories under
the allowed roots (the bundled `checkpoints/`, each `--checkpoint DIR`, each `--checkpoint-root
DIR`) can be opened, and every other request -- `/etc`, `/etc/passwd`, `../..`, a symlink out of a
root, a path that does not exist -- gets one and the same refusal, after the same delay. Paths are
shown to visitors only relative to a root (`checkpoints/multi30k-en-de`), never as server paths.

The policy applies always, not only beyond localhost: "localhost" is no boundary on a shared
machine or behind an SSH tunnel, and one code path is one thing to test. Someone who wants to
browse their own disk says so with `--checkpoint-root DIR`.

Panel-free, so that the policy is tested in milliseconds.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import CheckpointError

REFUSAL_SECONDS = 0.05  # every refusal takes at least this long: no timing tells /etc from /no/such
MAX_REQUEST_CHARS = 4096  # PATH_MAX: anything longer is refused before it touches the disk
_ABSOLUTE = re.compile(r"(?<![\w.~])/[^\s:;,'\"()]+")  # a POSIX path in a message


@dataclass(frozen=True)
class Root:
    """One allowed directory: its name as visitors see it, and where it really is."""

    name: str
    given: str  # absolute, as the operator spelled it (lexically normalised)
    real: str  # with every symlink resolved


def askable(request: str) -> bool:
    """Whether a typed request may be looked up at all: not empty, at most `MAX_REQUEST_CHARS`,
    no NUL, and a name the file system can be asked about (a lone surrogate such as U+D800, which
    a crafted request can send, made every lookup raise UnicodeEncodeError: a traceback)."""
    if not request or len(request) > MAX_REQUEST_CHARS or "\0" in request:
        return False
    try:
        os.fsencode(request)
    except UnicodeEncodeError:
        return False
    return True


def _inside(path: str, root: str) -> bool:
    """`path` is `root` or below it (both absolute and normalised): a string test, no disk access."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class CheckpointRoots:
    """The allowed roots of one server: resolves what a visitor typed, names paths, and strips
    server paths from messages."""

    def __init__(self, roots: Sequence[str | Path]) -> None:
        self.roots: list[Root] = []
        for root in roots:
            given = os.path.normpath(os.path.abspath(os.path.expanduser(str(root))))
            real = os.path.realpath(given)
            if not os.path.isdir(real) or any(r.real == real for r in self.roots):
                continue
            base = os.path.basename(given) or "root"
            name, n = base, 2
            while any(r.name == name for r in self.roots):
                name, n = f"{base}-{n}", n + 1
            self.roots.append(Root(name, given, real))

    @property
    def refusal(self) -> str:
        """The one answer to every path that cannot be opened. It names the roots (names only),
        so a visitor learns what they may type, and nothing about what exists elsewhere."""
        names = ", ".join(f"{r.name}/" for r in self.roots) or "none"
        return f"cannot open that path: no such directory under the explorer's checkpoint roots ({names})"

    def resolve(self, request: str) -> Path:
        """The real directory a typed request names, when it lies under an allowed root (after
        resolving `..` and symlinks); otherwise `CheckpointError(self.refusal)`.

        A relative request is read against the roots: `NAME/rest` under the root called NAME
        when there is one, else under each root in turn. An absolute one must lie under a root already as
        written (so a path elsewhere is never even looked up) and again once resolved (so a
        symlink out of a root does not count)."""
        started = time.perf_counter()
        found = self._resolve(request)
        if found is None:
            time.sleep(max(0.0, started + REFUSAL_SECONDS - time.perf_counter()))
            raise CheckpointError(self.refusal)
        return found

    def _resolve(self, request: str) -> Path | None:
        request = request.strip()
        if not askable(request):
            return None
        request = os.path.expanduser(request)
        if os.path.isabs(request):
            candidates = [request]
        else:
            head, _, rest = request.partition("/")
            named = [os.path.join(r.given, rest) for r in self.roots if r.name == head]
            candidates = named or [os.path.join(r.given, request) for r in self.roots]
        for candidate in candidates:
            lexical = os.path.normpath(candidate)
            if not any(_inside(lexical, r.given) or _inside(lexical, r.real) for r in self.roots):
                continue
            real = os.path.realpath(lexical)
            if any(_inside(real, r.real) for r in self.roots) and os.path.isdir(real):
                return Path(real)
        return None

    def holds_whole(self, directory: str | Path, depth: int = 3) -> bool:
        """Whether everything a checkpoint (or run) directory holds, `depth` levels down
        (RUN/checkpoints/step_N/file), is a regular file or a directory under an allowed root
        once links are followed: a symlinked `model.safetensors` or `spm.model` inside a root
        served a model from elsewhere (and told a file's size), and a FIFO `config.json` hung
        the server."""
        top = Path(directory)
        for folder, dirs, files in os.walk(top):
            if len(Path(folder).relative_to(top).parts) >= depth:
                dirs[:] = []
            for name in [*dirs, *files]:
                path = os.path.join(folder, name)
                real = os.path.realpath(path)
                if not self.allows(real) or not (os.path.isdir(real) or os.path.isfile(real)):
                    return False
        return True

    def allows(self, path: str | Path) -> bool:
        """`path` (resolved) lies under an allowed root."""
        real = os.path.realpath(os.path.abspath(str(path)))
        return any(_inside(real, r.real) for r in self.roots)

    def display(self, path: str | Path) -> str:
        """`path` as visitors see it: relative to the first root that holds it (`ROOT/rest`), or
        only its last component when no root does. Never a server path."""
        absolute = os.path.normpath(os.path.abspath(str(path)))
        real = os.path.realpath(absolute)
        for root in self.roots:
            for mine, base in ((real, root.real), (absolute, root.given)):
                if _inside(mine, base):
                    rest = os.path.relpath(mine, base)
                    return root.name if rest == "." else f"{root.name}/{rest}"
        return os.path.basename(absolute) or "checkpoint"

    def scrub(self, message: str, names: dict[str, str] | None = None) -> str:
        """`message` with every server path in it replaced by a visitor-facing name: the paths
        in `names` ({server path: name}) by their name, the roots by theirs (so paths below a root
        read ROOT/rest), and any other absolute path by its last component."""
        replacements: dict[str, str] = {}
        for path, name in (names or {}).items():
            absolute = os.path.normpath(os.path.abspath(str(path)))
            for spelling in (str(path), absolute, os.path.realpath(absolute)):
                replacements.setdefault(spelling, name)
        for root in self.roots:
            replacements.setdefault(root.given, root.name)
            replacements.setdefault(root.real, root.name)
        for spelling in sorted(replacements, key=len, reverse=True):  # longest first: a root's children before it
            if os.path.isabs(spelling) and len(spelling) > 1:
                message = message.replace(spelling, replacements[spelling])
        return _ABSOLUTE.sub(lambda match: os.path.basename(match.group(0).rstrip("/")) or "…", message)
