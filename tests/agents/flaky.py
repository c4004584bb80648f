"""A flaky agent for the campaign's tests: the real agent, except that every other case dies at its first launch.

Wraps ``python -m agent``. Each case starts with ``run --session-dir DIR``; that launch takes a number from a shared
counter file (``FLAKY_COUNTER``, under an exclusive lock, so concurrent workers never share a number). The first
``FLAKY_SKIP`` numbers (the campaign's crash-free baseline runs) behave; after that an odd number makes the launch
exit 1 at once, before it touches anything (as an agent that crashes on start-up now and then would), and an even
number behaves. Run sequentially (one worker), a failing case is followed by its re-run with the next, even number:
it does not reproduce, which is what ``flaky`` means. Every other launch is the real agent, unchanged.

Run as a script (``sys.executable flaky.py …``); never imported by the tests.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    if argv[:1] == ["run"] and "--session-dir" in argv:
        n = take_number(os.environ["FLAKY_COUNTER"])
        skip = int(os.environ.get("FLAKY_SKIP", "0"))
        if n > skip and (n - skip) % 2 == 1:
            print(f"flaky: launch {n} fails on purpose", file=sys.stderr)
            raise SystemExit(1)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "agent", *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
