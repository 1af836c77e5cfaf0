"""User-facing errors: each message is one line that says what to do next."""

from __future__ import annotations


class MemsearchError(Exception):
    """The root of every error whose message is written for the user (one line,
    what to do next); anything else reaching the top is a bug and says its type."""


class StoreError(MemsearchError):
    """A store operation failed; the message is one line, fit for a CLI."""


class DimensionMismatchError(StoreError):
    """The collection was built with a different embedding dimension."""


class ModelMismatchError(StoreError):
    """The collection was built with another embedding model (of the same
    dimension: its vectors and the query's would not be comparable)."""


class StoreUnavailableError(StoreError):
    """Milvus could not be reached or opened (server down, database held)."""


class UnusableDatabaseError(StoreError):
    """The database or server can never hold this index as it is (a database
    of the other Milvus Lite generation, a path that is no database, a Milvus
    server without BM25): retrying will not help, so a watcher stops."""


class DatabaseDamagedError(StoreError):
    """A local database's content cannot be read (a damaged file); the
    message names the database, the cause and what to delete."""


def one_line(text: object, limit: int | None = 300) -> str:
    """Collapse an error text to a single line, bounded to *limit* characters."""
    s = " ".join(str(text).split())
    return s if limit is None or len(s) <= limit else s[: limit - 1] + "…"


def describe(exc: BaseException) -> str:
    """The one line a user sees for *exc*.

    Our errors, ValueError and OSError carry user-facing messages already;
    anything else is prefixed with its type, which is then the useful part. A
    permission error on a file another user owns names that user and a way on
    (:func:`another_users_file`).
    """
    planted = another_users_file(exc)
    if planted:
        return planted
    text = one_line(exc, limit=None)
    if isinstance(exc, (MemsearchError, ValueError, OSError)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def another_users_file(exc: BaseException) -> str | None:
    """For a permission error on a file another user owns (one planted beside a
    database in a directory others can write: a lock, a record, a manifest),
    the one line naming it, its owner and a way on; else None."""
    import errno
    import os

    if not isinstance(exc, OSError) or exc.errno not in (errno.EACCES, errno.EPERM):
        return None
    for name in (exc.filename2, exc.filename):  # a rename's target is the file in the way
        if name is None:
            continue
        path = os.fsdecode(name)
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue
        if owner != os.geteuid():
            return others_file(path, owner)
    return None


def others_file(path: str, owner: int, way: str = "") -> str:
    """The one line that refuses *path*, which user *owner* made: its name, its owner and
    a way on (by default :func:`way_on`'s)."""
    return f"{path} belongs to another user ({user_name(owner)}); refusing to use it: {way or way_on(path)}"


def user_name(uid: int) -> str:
    """``uid 1001, alice`` (the uid alone where the system names nobody)."""
    import pwd

    try:
        return f"uid {uid}, {pwd.getpwuid(uid).pw_name}"
    except (KeyError, ImportError):
        return f"uid {uid}"


def way_on(path: str) -> str:
    """What a user can do about another user's file at *path* beside a database:
    remove it where they may; where they may not (a shared directory with the
    sticky bit, as /tmp), keep the database in a directory of their own."""
    import os
    import stat

    parent = os.path.dirname(os.path.abspath(path))
    try:
        mine = os.geteuid()
        dir_st, file_st = os.stat(parent), os.lstat(path)
        removable = mine == 0 or (
            os.access(parent, os.W_OK | os.X_OK)
            and (not dir_st.st_mode & stat.S_ISVTX or mine in (dir_st.st_uid, file_st.st_uid))
        )
    except OSError:
        removable = False
    if removable:
        return "remove it"
    return (
        f"you cannot remove it from {parent}, which others can write; keep the database in a directory of your "
        "own (the default is ~/.memsearch/milvus.db)"
    )


class EmbeddingError(MemsearchError, RuntimeError):
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


class RerankerError(MemsearchError, RuntimeError):
    """The reranker model (``--reranker-model``, ``reranker.model``) cannot be
    found, is not a cross-encoder, or failed to load."""
