"""Errors that are the user's to fix. The CLI prints their message (no traceback) and exits 2."""


class UserError(Exception):
    """A bad argument or input: missing root, unwritable folder, malformed index, ...

    The message must name the file and say what is wrong with it.
    """
