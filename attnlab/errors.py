"""One family of errors whose message is a single line meant for the user.

The CLI, the explorer and the widgets catch `AttnlabError` and show its message instead of a
traceback; anything else is a bug and keeps its traceback.
"""


class AttnlabError(Exception):
    """Base class: bad input, bad files, impossible configurations."""


class ConfigError(AttnlabError, ValueError):
    """A configuration that cannot describe a model or a run."""


class ModelInputError(AttnlabError, ValueError):
    """Input the model cannot take (wrong shape, ids outside the vocabulary, too long)."""


class TimeLimitError(ModelInputError):
    """Decoding ran past the time limit set for it (`attnlab.decode.deadline.time_limit`)."""


class DataError(AttnlabError):
    """A corpus or prepared data set that is missing, mismatched or malformed."""


class CheckpointError(AttnlabError):
    """A checkpoint or trace file that is missing, truncated, foreign or unsafe."""
