"""Reading a file a user named on the command line (a scenario, a target, a session log) without ever blocking.

Opening a FIFO for reading blocks until a writer comes, and a device may never end: ``chaos killpoints FIFO`` used
to hang. ``read_input`` opens with ``O_NONBLOCK`` (a FIFO's open then returns at once), refuses anything ``fstat``
does not report as a regular file, and only then reads. The error is an ``OSError`` whose ``strerror`` says what the
path is, so the callers' one-line messages (``cannot read: …``) stay as they are.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def read_input(path: str | Path) -> bytes:
    """The whole content of the regular file ``path``; ``OSError`` (its ``strerror`` readable) for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), None)
            raise OSError(errno.EINVAL, f"not a regular file ({kind})" if kind else "not a regular file", str(path))
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"))
