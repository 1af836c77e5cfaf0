"""Exceptions raised by the embeddings layer.

Each message is a single line that tells the user what to do next, so the CLI
can print ``str(exc)`` as-is instead of a traceback from library internals.
"""

from __future__ import annotations


class EmbeddingError(RuntimeError):
    """Base class for every error raised by an embedding provider."""


class UnknownProviderError(EmbeddingError, ValueError):
    """``get_provider`` was given a name it does not know."""


class ModelNotFoundError(EmbeddingError, LookupError):
    """The requested model is neither a usable directory, cached, installed nor downloadable."""


class ModelConversionError(EmbeddingError, ValueError):
    """A checkpoint could not be converted to ONNX (unsupported or incomplete)."""


class EmbeddingAPIError(EmbeddingError):
    """An embedding server answered with an error that retrying will not fix.

    ``status`` is the HTTP status code (0 when the server could not be reached).
    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
