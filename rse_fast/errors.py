"""The project's typed exceptions, in one place so callers can catch by family."""

from __future__ import annotations


class RSEFastError(Exception):
    """Base class of every error raised on purpose by rse_fast."""


class ModelNotFoundError(RSEFastError, FileNotFoundError):
    """A model file is missing; the message says what to install or where to put it."""


class IntegrityError(RSEFastError, ValueError):
    """A file's size or sha256 does not match its manifest."""


class RoundFailedError(RSEFastError, RuntimeError):
    """Every call of an RSE round failed; the last checkpoint is intact."""
