"""attnlab.model — the model itself: `ModelConfig` and the paper's presets (Table 3), the §3
encoder–decoder with Eq. (1) as `attention` (and its restricted form, Table 1), its fp32 inference
products through oneDNN (`linear`), FLOP counts (Table 2), and the checkpoint format
on disk (safetensors + JSON, written atomically, verified when read).

May import: nothing of attnlab but `attnlab.errors`. Everything else builds on this room, so
it knows no recorder, no data, no loop and no screen.
"""

from attnlab.model.attention import attention, local_attention, window_mask
from attnlab.model.checkpoint import latest_valid, load_model, read_config, save_checkpoint, verify
from attnlab.model.config import PRESETS, ModelConfig, parse_overrides, preset
from attnlab.model.embedding import sinusoidal_positions
from attnlab.model.transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    KVCache,
    MultiHeadAttention,
    Residual,
    Transformer,
    count_parameters,
)

__all__ = [
    "PRESETS",
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "ModelConfig",
    "MultiHeadAttention",
    "Residual",
    "Transformer",
    "attention",
    "count_parameters",
    "latest_valid",
    "load_model",
    "local_attention",
    "parse_overrides",
    "preset",
    "read_config",
    "save_checkpoint",
    "sinusoidal_positions",
    "verify",
    "window_mask",
]
