"""attnlab.train — the §5 regime as one explicit loop: Eq. (3)'s schedule, label smoothing,
Adam, token batches with accumulation, DDP under `torchrun`, checkpoints that resume exactly,
the dev report and probe traces at each checkpoint, averaging, and the named recipes.

May import: `attnlab.model`, `attnlab.record`, `attnlab.data`, `attnlab.decode` (dev BLEU and
probe traces use the same decoder users get) and `attnlab.errors`; never a screen.
"""

from attnlab.train.commands import resumed
from attnlab.train.loop import TrainConfig, Trainer
from attnlab.train.regime import label_smoothed_loss, learning_rate, make_optimizer

__all__ = ["TrainConfig", "Trainer", "label_smoothed_loss", "learning_rate", "make_optimizer", "resumed"]
