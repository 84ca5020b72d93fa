"""Where recording and ablation attach to the attention sub-layers: per thread, not per module.

What `attnlab.record` (a hook that receives each head's weights), `attnlab.ablate` (a 0/1
mask over the heads) and activation patching (`attnlab.record.patching`: heads' outputs taken
from another run) attach lives in context variables, one value per thread and per asyncio
task, rather than on the modules: a model shared by a server's sessions (or a thread pool) is
recorded or ablated for one caller while another caller's forward pass runs untouched, instead
of handing that pass's weights to the recording (a crash, or a trace made of two sentences).
`MultiHeadAttention.hook`, `.head_mask` and `.head_patch` read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from torch import Tensor

# hook(module, weights (B, h, Lq, Lk), mask broadcastable to weights or None, values (B, h, Lk, d_v))
AttentionHook = Callable[[Any, Tensor, Tensor | None, Tensor], None]

HOOKS: ContextVar[Mapping[Any, AttentionHook]] = ContextVar("attnlab_hooks", default=MappingProxyType({}))
HEAD_MASKS: ContextVar[Mapping[Any, Tensor]] = ContextVar("attnlab_head_masks", default=MappingProxyType({}))
# (gate (B, h), outputs (B or 1, h, Lq, d_v)): each head's output becomes out + gate·(outputs − out)
HEAD_PATCHES: ContextVar[Mapping[Any, tuple[Tensor, Tensor]]] = ContextVar(
    "attnlab_head_patches", default=MappingProxyType({})
)


@contextmanager
def attached(variable: ContextVar[Mapping[Any, Any]], values: Mapping[Any, Any]) -> Iterator[None]:
    """Add `values` ({module: hook or head mask}) to this thread's `variable` while the block
    runs; the previous mapping is back on exit, exceptions included. A module already there gets
    the new value: a caller that must keep the enclosing one (`ablate`'s masks) combines first."""
    token = variable.set({**variable.get(), **values})
    try:
        yield
    finally:
        variable.reset(token)
