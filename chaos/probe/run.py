"""The probe's runner: ``python -m chaos.probe.run [--state PATH]… [--session PATH] -- PROGRAM [ARGS…]``.

Installs the probe (``chaos.probe.install``) and then runs an unmodified Python program in this interpreter as its
``__main__``: ``PROGRAM`` is a script path, or ``-m MODULE`` for a module. The probe is in place before the
program's first import, so the program's ``sqlite3.connect``, ``os.fsync``, ``os.replace`` and ``open`` are the
wrapped ones. ``--state`` (repeatable; also ``CHAOS_PROBE_STATE``, paths joined by ``os.pathsep``) declares the
files or directories whose writes are barriers; ``--session`` is the path the hello announces.

Invariant protected: the program sees the argv, ``sys.path[0]`` and ``__main__`` it would see when run by
``python PROGRAM ARGS`` (or ``python -m MODULE ARGS``), and its exit status is its own (``SystemExit`` and uncaught
exceptions propagate unchanged). Works under the zygote launcher as ``MODULE = chaos.probe.run``.

Bad usage: one line on stderr, exit 2. Not here: the wrapping itself (``chaos.probe``).
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m chaos.probe.run [--state PATH]... [--session PATH] -- PROGRAM [ARGS...] | -- -m MODULE [ARGS...]"


def parse(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """``(state paths, session, program argv)`` from the runner's arguments; ``ValueError`` names the problem."""
    state = [p for p in os.environ.get("CHAOS_PROBE_STATE", "").split(os.pathsep) if p]
    session = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        word = argv[i]
        if word in ("--state", "--session"):
            if i + 1 >= len(argv) or not argv[i + 1] or argv[i + 1] == "--":
                raise ValueError(f"{word} needs a path")
            if word == "--state":
                state.append(argv[i + 1])
            else:
                session = argv[i + 1]
            i += 2
        else:
            raise ValueError(f"unknown option {word!r} (the program comes after '--')")
    program = argv[i + 1:]
    if not program:
        raise ValueError("no program after '--'")
    if program[0] == "-m" and len(program) < 2:
        raise ValueError("-m needs a module name")
    return state, session, program


def main(argv: list[str] | None = None) -> None:
    try:
        state, session, program = parse(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        sys.stderr.write(f"chaos.probe.run: {exc}\n{USAGE}\n")
        raise SystemExit(2) from None
    if program[0] != "-m" and not os.path.isfile(program[0]):
        sys.stderr.write(f"chaos.probe.run: no such program file: {program[0]}\n")
        raise SystemExit(2)
    import chaos.probe as probe

    probe.install(state, session)
    if program[0] == "-m":
        sys.argv = [program[1], *program[2:]]  # run_module replaces argv[0] with the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(program)
        sys.path[0] = os.path.dirname(os.path.abspath(program[0]))
        runpy.run_path(program[0], run_name="__main__")


if __name__ == "__main__":
    main()
