"""Input paths named on the command line: refused early, as a usage error, unless they are regular files.

What it is for. Every command that takes a session file (``reduce``, ``plan``, ``resume``, ``abort``, ``compact``,
``run --session``) first checks the path itself, so a typo, a directory or a device is one clear stderr line and
exit 2 before anything is opened or locked — never a store error, a traceback or a hang on a FIFO.

What it does not do: open, read or lock the file (the CLI reads ``reduce``/``plan`` inputs, the store opens session
files), or refuse symbolic links (the loop does that for files it will write).
"""

from __future__ import annotations

import os
import stat

from agent.errors import AgentError
from agent.exits import EXIT_USAGE


class InputFileError(AgentError):
    """An input path is missing, unreadable, a directory or not a regular file: a usage error (exit 2)."""

    exit_code = EXIT_USAGE


def check_input_file(path: str) -> None:
    """Refuse a missing path, a directory or anything but a regular file, as a usage error (exit 2)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot access: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(f"{path}: is a directory, not a session file")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"{path}: not a regular file")
