"""The one exception type for user mistakes.

Anything a user can cause (a missing file, a malformed line, a wrong flag) raises `UserError`
with a one-line message naming the file and line. The CLI prints it and exits with status 2;
everything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input: printed as one line, exit status 2."""

    def __init__(self, message: str, path: object = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
