"""The harness's one way to write a file that must survive a crash whole (``write_atomic``, ``publish``), and to read
a JSON file back that may be missing or damaged (``read_json``).

Every result a person or a later run reads (``campaign.json``, ``result.json``, reports, bundles, cache entries,
``summary.json`` of mutants, exported scenarios) goes through here, so "a crash of the harness never leaves a
half-written file" is argued once:

- the bytes go to a temporary name in the same directory (a rename across file systems is not atomic), are
  fsync'd, then renamed (``write_atomic``) or hard-linked (``publish``, first writer wins) over the final name;
- then the *directory* is fsync'd: a new name lives in its directory, and without that fsync a power loss can
  forget that the file exists even though its bytes were synced.

The temporary name carries the pid, so two processes writing the same file (shards, xdist workers) never share a
temporary. Not here: the append-only journal (``chaos.journal``), which fsyncs each line itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (text is UTF-8) so that a crash leaves the old file or the new one, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_synced(tmp, data.encode("utf-8") if isinstance(data, str) else data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def read_json(path: str | Path) -> Any | None:
    """The JSON value in ``path``, or None when it is missing, unreadable, not UTF-8 or not JSON — also when it nests
    deeper than the parser recurses (json's C decoder raises RecursionError for ``[[[…`` a few thousand deep): a
    file a crash, a person or another program may have left in any shape is never a traceback here."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def write_json(path: str | Path, value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> Path:
    """``write_atomic`` of ``value`` as JSON (UTF-8, not ASCII-escaped) with a final newline."""
    return write_atomic(path, json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=sort_keys) + "\n")


def publish(path: str | Path, data: str | bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists (first writer wins: ``link`` fails on an existing name).

    Returns True when this call created it. Concurrent writers (campaign shards, pytest-xdist workers) that computed
    the same thing all end up reading one and the same file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_synced(tmp, data.encode("utf-8") if isinstance(data, str) else data)
    try:
        os.link(tmp, path)
        created = True
    except FileExistsError:
        created = False
    finally:
        tmp.unlink(missing_ok=True)
    if created:
        fsync_dir(path.parent)
    return created


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory (best effort: some file systems refuse to open a directory for it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
