"""A flaky agent for the campaign's tests: the real agent, but every other case it runs is silently buggy.

Wraps ``python -m agent``. Each case starts with ``run --session-dir DIR``; that launch takes a number from a shared
counter file (``FLAKY_COUNTER``, under an exclusive lock, so concurrent workers never share a number). The first
``FLAKY_SKIP`` numbers (the campaign's crash-free baseline runs) are correct; after that odd numbers turn on
``AGENT_BUGS=stale-assistant-calls`` for the whole case (the decision is kept next to the session directory, so the
case's ``resume`` launches behave the same), even numbers are correct. Run sequentially (one worker), a failing case
is followed by its re-run with the next, even number: it does not reproduce, which is what ``flaky`` means.

Run as a script (``sys.executable flaky.py …``); never imported by the tests.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARK = ".flaky-bugs"


def take_number(path: str) -> int:
    with open(path, "a+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two workers starting cases at once must not draw the same number
        f.seek(0)
        n = int(f.read().strip() or "0") + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
        f.flush()
        os.fsync(f.fileno())
    return n


def main(argv: list[str]) -> None:
    env = dict(os.environ)
    mark: Path | None = None
    if argv[:1] == ["run"] and "--session-dir" in argv:
        mark = Path(argv[argv.index("--session-dir") + 1]).parent / MARK
        n = take_number(env["FLAKY_COUNTER"])
        skip = int(env.get("FLAKY_SKIP", "0"))
        mark.write_text("stale-assistant-calls" if n > skip and (n - skip) % 2 == 1 else "", encoding="ascii")
    else:
        # resume/abort/compact/run --session FILE: the session file lives in <case>/sessions/.
        session = next((a for a in argv[1:] if a.endswith(".jsonl")), None)
        if session is not None:
            mark = Path(session).parent.parent / MARK
    if mark is not None and mark.is_file():
        env["AGENT_BUGS"] = mark.read_text(encoding="ascii")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "agent", *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
