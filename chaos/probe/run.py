"""The probe's runner: ``python -m chaos.probe.run [--state PATH]… [--session PATH] -- PROGRAM [ARGS…]``.

Installs the probe (``chaos.probe.install``) and then runs an unmodified Python program in this interpreter as its
``__main__``: ``PROGRAM`` is a script path, or ``-m MODULE`` for a module. The probe is in place before the
program's first import, so the program's ``sqlite3.connect``, ``os.fsync``, ``os.replace`` and ``open`` are the
wrapped ones. ``--state`` (repeatable; also ``CHAOS_PROBE_STATE``, paths joined by ``os.pathsep``) declares the
files or directories whose writes are barriers; ``--session`` is the path the hello announces.

A restart of a probe case also has ``--inspect DIR --case CASE`` (with ``--copy PATH``…, ``--sqlite PATH``… and
``--reader JSON-ARGV``, paths relative to ``CASE``): before anything else, the state the restart finds is inspected
on a copy (``chaos.probe.inspect``; ``--keep``: and an untouched copy kept for a second recovery) and recorded in
``DIR/<pid>.json``. ``--only`` stops there (the final
inspection of a case). It is an option of the runner, not a separate command, so that inspections too are forked by
the zygote, whose preload already imported the framework the reader uses.

Invariant protected: the program sees the argv, ``sys.path[0]`` and ``__main__`` it would see when run by
``python PROGRAM ARGS`` (or ``python -m MODULE ARGS``), and its exit status is its own (``SystemExit`` and uncaught
exceptions propagate unchanged). Works under the zygote launcher as ``MODULE = chaos.probe.run``.

Bad usage: one line on stderr, exit 2. Not here: the wrapping itself (``chaos.probe``).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from dataclasses import dataclass, field

USAGE = ("usage: python -m chaos.probe.run [--state PATH]... [--session PATH] [--inspect DIR --case CASE "
         "[--copy PATH]... [--sqlite PATH]... [--reader JSON-ARGV] [--keep] [--only]] -- PROGRAM [ARGS...] | -- -m MODULE "
         "[ARGS...]")


@dataclass
class Options:
    """The runner's command line."""

    state: list[str] = field(default_factory=list)
    session: str | None = None
    inspect: str | None = None
    sqlite: list[str] = field(default_factory=list)
    reader: list[str] | None = None
    case: str | None = None
    copy: list[str] = field(default_factory=list)
    only: bool = False
    keep: bool = False
    program: list[str] = field(default_factory=list)


def parse(argv: list[str]) -> Options:
    """The runner's options; ``ValueError`` names the problem."""
    opts = Options(state=[p for p in os.environ.get("CHAOS_PROBE_STATE", "").split(os.pathsep) if p])
    i = 0
    while i < len(argv) and argv[i] != "--":
        word = argv[i]
        if word in ("--only", "--keep"):
            setattr(opts, word[2:], True)
            i += 1
            continue
        if word not in ("--state", "--session", "--inspect", "--sqlite", "--reader", "--case", "--copy"):
            raise ValueError(f"unknown option {word!r} (the program comes after '--')")
        if i + 1 >= len(argv) or not argv[i + 1] or argv[i + 1] == "--":
            raise ValueError(f"{word} needs a value")
        value = argv[i + 1]
        if word in ("--state", "--sqlite", "--copy"):
            getattr(opts, word[2:]).append(value)
        elif word == "--reader":
            try:
                opts.reader = json.loads(value)
            except ValueError:
                opts.reader = None
            if not isinstance(opts.reader, list) or not opts.reader or not all(isinstance(a, str) for a in opts.reader):
                raise ValueError("--reader must be a JSON list of strings (the reader's argv)")
        else:
            setattr(opts, word[2:], value)
        i += 2
    opts.program = argv[i + 1:]
    if not opts.program:
        raise ValueError("no program after '--'")
    if opts.program[0] == "-m" and len(opts.program) < 2:
        raise ValueError("-m needs a module name")
    if (opts.sqlite or opts.reader or opts.copy or opts.only or opts.keep) and not opts.inspect:
        raise ValueError("--copy, --sqlite, --reader, --keep and --only need --inspect DIR")
    if opts.inspect and not opts.case:
        raise ValueError("--inspect needs --case DIR (the directory the state paths are relative to)")
    return opts


def main(argv: list[str] | None = None) -> None:
    try:
        opts = parse(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        sys.stderr.write(f"chaos.probe.run: {exc}\n{USAGE}\n")
        raise SystemExit(2) from None
    program = opts.program
    if program[0] != "-m" and not os.path.isfile(program[0]):
        sys.stderr.write(f"chaos.probe.run: no such program file: {program[0]}\n")
        raise SystemExit(2)
    if opts.inspect:
        # Before the probe is installed: the inspection must not announce barriers of its own.
        from chaos.probe.inspect import inspect_state

        stem = os.path.join(os.path.abspath(opts.inspect), str(os.getpid()))
        record = inspect_state(opts.case, opts.copy, opts.sqlite, opts.reader, stem + ".case", keep=opts.keep)
        os.makedirs(opts.inspect, exist_ok=True)
        with open(stem + ".json.tmp", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(stem + ".json.tmp", stem + ".json")  # whole or absent: the launch may be killed meanwhile
        if opts.only:
            return
    import chaos.probe as probe

    probe.install(opts.state, opts.session)
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
