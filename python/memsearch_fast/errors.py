"""User-facing errors: each message is one line that says what to do next."""

from __future__ import annotations


class StoreError(Exception):
    """A store operation failed; the message is one line, fit for a CLI."""


class DimensionMismatchError(StoreError):
    """The collection was built with a different embedding dimension."""


class StoreUnavailableError(StoreError):
    """Milvus could not be reached or opened (server down, database held)."""


def one_line(text: object, limit: int = 300) -> str:
    """Collapse an error text to a single bounded line."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


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
