"""The campaign journal: one JSON line per finished case, fsynced, so a crashed campaign resumes where it stopped.

A campaign can run for hours; the harness itself may be SIGKILLed (a CI job cancelled, an OOM kill, a laptop lid).
``chaos campaign --resume DIR`` must then continue without redoing or losing a finished case. The journal is the
only record of "finished": a case counts as done exactly when its line is in the file and fsynced.

Format: ``journal.jsonl``, UTF-8, one JSON object per line, each a finished case (the keys of
``chaos.report.CaseReport`` plus the engine's own: ``origin``, ``index``, ``first``, ``kills``, ``restarts``,
``reached``, ``keys``, ``rerun``...). The file has no header; the campaign's parameters live next to it in
``campaign.json``, written once, atomically, before the first case.

Crash windows and what protects them:

- SIGKILL in the middle of ``write()``: the last line may be torn (no final LF, or a partial JSON object). Reading
  ignores an incomplete last line; ``Journal.open`` truncates it away (and fsyncs) before appending, so the next
  line does not glue onto half a line.
- SIGKILL after ``write()`` and before ``fsync()``: the line is in the page cache and survives a process kill; a
  power loss may drop it — the case is then simply run again (never half-counted).
- A complete but unparsable line in the middle cannot come from our own writes; it is reported (``JournalError``)
  rather than silently skipped, because skipping would *lose* a finished case.
- Duplicate ids (two journals merged, or a case finished twice around a crash) keep the first line, except after a
  line saying the case's worker process died (``chaos.records.WORKER_DIED``: the harness never judged it): such a
  case is not done, a ``--resume`` runs it again, and its new line (or a merged shard's judged one) supersedes the
  old one (``takes_over``).
- Two campaigns on one directory (a ``--resume`` while the first still runs) would each run the other's cases and
  overwrite its lines: ``CampaignLock`` (an exclusive ``flock`` on ``campaign.lock``, held for the campaign's life)
  refuses the second one, naming the holder. The journal is also opened with ``O_APPEND``, so even two writers that
  bypass the lock interleave whole lines instead of overwriting each other.

Does not decide what a case is or run anything; ``chaos.campaign`` does.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.files import fsync_dir, write_json
from chaos.records import WORKER_DIED

JOURNAL = "journal.jsonl"
CAMPAIGN = "campaign.json"
LOCK = "campaign.lock"


class JournalError(ChaosError):
    """A journal or campaign file cannot be read or written (message names the file, line and problem)."""


class CampaignLockedError(JournalError):
    """Another process holds the campaign directory's lock (the message names its pid and start time)."""


def _repair_hint(path: Path, number: int, offset: int, total: int) -> str:
    """How to repair a journal whose line ``number`` (starting at byte ``offset``) cannot be used."""
    if number == total:  # the last complete line: dropping it loses only that case, which runs again
        return f"truncate the journal to the {number - 1} line(s) before it: truncate -s {offset} {path}"
    return (f"delete line {number} (its case runs again: sed -i '{number}d' {path}), or keep only the "
            f"{number - 1} line(s) before it: truncate -s {offset} {path}")


def read_lines(path: str | Path) -> tuple[list[dict[str, Any]], int]:
    """The complete records of a journal and the byte length they occupy (the valid prefix).

    An incomplete last line (no LF, or a torn JSON object with no LF) is not part of the result. A complete line
    that is not a JSON object raises ``JournalError``.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise JournalError(f"{path}: cannot read journal: {exc.strerror or exc}") from None
    records: list[dict[str, Any]] = []
    end = data.rfind(b"\n") + 1  # everything after the last LF is a torn tail
    lines = data[:end].split(b"\n")[:-1]
    offset = 0
    for number, raw in enumerate(lines, start=1):
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise JournalError(f"{path}:{number}: journal line {number} is not JSON (edited or corrupted file); "
                               + _repair_hint(path, number, offset, len(lines))) from None
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            raise JournalError(f"{path}:{number}: journal line {number} is not a case record with an 'id'; "
                               + _repair_hint(path, number, offset, len(lines)))
        records.append(value)
        offset += len(raw) + 1
    return records, end


def read_journal(path: str | Path) -> dict[str, dict[str, Any]]:
    """Finished cases by id, in journal order; the first line wins for a duplicated id, unless it says the case's
    worker died (``run_again``) and a later line ran it again."""
    return _by_id(read_lines(path)[0])


def run_again(record: Mapping[str, Any]) -> bool:
    """Whether a journal line leaves its case to run again: its worker process died mid-case (an OOM kill, a stray
    signal), so nothing judged the case; one death must not leave a nightly red for good."""
    return record.get("status") == "error" and record.get("verdict") == WORKER_DIED


def takes_over(kept: Mapping[str, Any] | None) -> bool:
    """Whether a later line of a case id replaces the one ``kept`` so far (None: none yet) — in one journal, or
    across merged ones, in the order given: only a worker-died line gives way."""
    return kept is None or run_again(kept)


def _by_id(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        if takes_over(out.get(record["id"])):
            out[record["id"]] = record
    return out


class Journal:
    """An open journal: ``append`` one finished case at a time; ``done`` holds the ids already finished."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        records, end = read_lines(self.path)
        # A case whose worker died is not done: this session runs it again (its line stays until a new one follows).
        self.done: dict[str, dict[str, Any]] = {k: r for k, r in _by_id(records).items() if not run_again(r)}
        # O_APPEND: every write lands at the end of the file as it is then, so two writers (which the campaign
        # lock should prevent) interleave whole lines instead of overwriting each other's.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size != end:
                # Repair a torn last line before appending: the next record must start on a line of its own.
                os.ftruncate(fd, end)
                os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd: int | None = fd
        fsync_dir(self.path.parent)  # a freshly created journal's directory entry must be durable too

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __contains__(self, case_id: str) -> bool:
        return case_id in self.done

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.done.values())

    def __len__(self) -> int:
        return len(self.done)

    def append(self, record: Mapping[str, Any]) -> bool:
        """Write one finished case and fsync; False (nothing written) when its id is already in the journal."""
        if self._fd is None:
            raise JournalError(f"{self.path}: journal is closed")
        case_id = record.get("id")
        if not isinstance(case_id, str):
            raise JournalError(f"{self.path}: a journal record needs a string 'id'")
        if case_id in self.done:
            return False
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        if b"\n" in line:  # json.dumps escapes control characters; a raw LF would split the record
            raise JournalError(f"{self.path}: record {case_id!r} serialized with a newline")
        data = line + b"\n"
        view = memoryview(data)
        while view:
            # One write() per line, so a concurrent appender cannot land inside it; os.write may still write less
            # than asked (a signal, a large record): loop until the line is whole.
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self.done[case_id] = dict(record)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class CampaignLock:
    """An exclusive ``flock`` on ``DIR/campaign.lock`` for a campaign's life: one campaign per directory.

    The lock file holds the holder's pid, host, start time and command line (JSON), so a refused second campaign
    can say who holds it. The lock (not the file's content) is what counts: it dies with the process, so a
    SIGKILLed campaign never leaves a stale lock behind, only a stale description that the next holder overwrites.
    Use as a context manager; ``CampaignLockedError`` when another process holds it.
    """

    def __init__(self, directory: str | Path, command: list[str] | tuple[str, ...] = ()):
        self.path = Path(directory) / LOCK
        self.command = list(command)
        self._fd: int | None = None

    def acquire(self) -> CampaignLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot open the campaign lock: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise CampaignLockedError(
                f"{self.path.parent}: another campaign is running in this directory ({holder}); wait for it to end "
                "or stop it, then --resume") from None
        except OSError as exc:
            os.close(fd)
            raise JournalError(f"{self.path}: cannot lock: {exc.strerror or exc}") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                  "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder, ensure_ascii=False).encode("utf-8") + b"\n", 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no stale description for the next reader (the lock itself dies anyway)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> CampaignLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _describe_holder(fd: int) -> str:
    """``pid P on HOST, started T: COMMAND`` from a held lock file (what the holder wrote), or what is known."""
    try:
        data = os.pread(fd, 65536, 0)
        holder = json.loads(data.decode("utf-8"))
        if not isinstance(holder, dict):
            raise ValueError(holder)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return "its pid is not recorded yet"
    text = f"pid {holder.get('pid', '?')}"
    if holder.get("host") and holder.get("host") != socket.gethostname():
        text += f" on {holder['host']}"
    text += f", started {holder.get('started', '?')}"
    command = holder.get("command")
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
        text += f": {' '.join(command)}"
    return text


def write_campaign(directory: str | Path, params: Mapping[str, Any]) -> Path:
    """Write ``campaign.json`` atomically (temp file, fsync, rename, fsync of the directory)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return write_json(directory / CAMPAIGN, params, sort_keys=True)


def read_campaign(directory: str | Path) -> dict[str, Any]:
    """The parameters a campaign directory was started with; ``JournalError`` when absent or unreadable."""
    path = Path(directory) / CAMPAIGN
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JournalError(f"{path}: not a campaign directory (no {CAMPAIGN})") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: [[[… nested deep
        raise JournalError(f"{path}: cannot read campaign parameters: {exc}") from None
    if not isinstance(value, dict):
        raise JournalError(f"{path}: campaign parameters must be a JSON object")
    problems = campaign_problems(value, str(path))
    if problems:
        raise JournalError("\n".join(problems))
    return value


# What the readers of campaign.json (render, history, merge, --resume) assume of the members they read, checked
# once here: a hand-edited, truncated-and-retyped or foreign file is one line per wrong member, not a traceback in
# whichever reader meets it first. "options" is checked field by field by CampaignOptions.from_json.
_MEMBERS: dict[str, Any] = {
    "options": dict, "name": str, "started": str, "command": list[str], "elapsed": float, "sessions": list[dict],
    "plan": dict, "baselines": dict[str, dict], "discovery": dict[str, dict[str, int]], "versions": dict[str, str],
    "replayed": list[str], "scenario_names": list[str], "stopped": str | None, "merged_from": list[str],
}
_PLAN: dict[str, Any] = {"cases": int | None, "points": dict[str, int], "recovery": dict[str, int]}
_BASELINE: dict[str, Any] = {"file": str | None, "ok": bool | None, "problems": list | None, "why": list | None,
                             "case_dirs": list | None}


def campaign_problems(params: Mapping[str, Any], where: str) -> list[str]:
    """One line per member of ``params`` (campaign.json, read) whose value is not of the type its readers assume."""
    from chaos import shapes

    def check(value: Mapping[str, Any], table: Mapping[str, Any], at: str) -> list[str]:
        return [f"{at}{key}: expected {shapes.expected(kind)}, got {shapes.describe(value[key])}"
                for key, kind in table.items() if key in value and not shapes.fits(value[key], kind)]

    problems = check(params, _MEMBERS, f"{where}: ")
    if problems:
        return problems
    problems += check(params.get("plan", {}), _PLAN, f"{where}: plan.")
    for name, baseline in params.get("baselines", {}).items():
        problems += check(baseline, _BASELINE, f"{where}: baselines.{name}.")
    return problems
