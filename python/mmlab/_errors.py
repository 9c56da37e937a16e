"""The exception every mmlab function raises for bad input."""


class MmlabError(Exception):
    """Bad input or a failed run, with mmlab's own message: which file,
    line or key, and what was expected (the same words as the ``mmlab``
    command prints)."""
