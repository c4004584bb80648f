"""Interpreter environments for Python targets: one virtual environment per pinned requirements list, built once.

Agent frameworks do not fit one environment (the OpenAI Agents SDK needs ``openai>=3``, CrewAI ``openai<3`` and
``pydantic<2.13``), and none of them belongs in killpoint's own. A ``kind = "python"`` target pins its
``requirements``; ``chaos targets prepare`` builds a virtual environment for each distinct list (``python -m venv``
with this interpreter, then ``pip install`` of exactly those pins from the registry) under the cache root, and marks
it ready only when the install succeeded — an interrupted build is never taken for a ready one. A campaign finds the
environment by the digest of its pins and this interpreter's version; a target whose environment is missing is
skipped with the reason and the command that prepares it (never silently).

The probe runs *inside* such an environment, whose ``site-packages`` knows nothing of killpoint. It is stdlib-only,
so ``probe_path`` copies exactly the modules a probe launch needs (``chaos.probe`` and the zygote's server side,
``chaos.zygote`` with ``chaos.prefault``) into a directory of their own, put on ``PYTHONPATH`` — never killpoint's
own ``site-packages``, whose pydantic or openai would shadow the framework's.

Cache root: ``$KILLPOINT_CACHE``, else ``$XDG_CACHE_HOME/killpoint``, else ``~/.cache/killpoint``.

Not here: what a target is (``chaos.target``), running it (``chaos.probecase``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from chaos.errors import ChaosError

READY = "killpoint-ready.json"  # written last, atomically: its presence means the install finished
PROBE_FILES = ("probe/__init__.py", "probe/run.py", "probe/inspect.py", "zygote.py", "prefault.py")


class PrepareError(ChaosError):
    """An environment could not be built; one line."""


def cache_root() -> Path:
    if os.environ.get("KILLPOINT_CACHE"):
        return Path(os.environ["KILLPOINT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "killpoint"


def digest(requirements: Sequence[str]) -> str:
    """Names an environment: its pins (order-free) and the interpreter version that builds it."""
    ident = {"requirements": sorted(requirements), "python": list(sys.version_info[:2])}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def env_dir(requirements: Sequence[str]) -> Path:
    """``<cache>/envs/<first pin's name>-<digest>``: the name for a person, the digest for identity."""
    first = re.split(r"[=<>!~\[@ ;]", sorted(requirements)[0], 1)[0] if requirements else "python"
    return cache_root() / "envs" / f"{re.sub(r'[^A-Za-z0-9._-]', '_', first) or 'env'}-{digest(requirements)}"


def interpreter(requirements: Sequence[str]) -> str | None:
    """The prepared environment's interpreter for these pins, or None when it is not prepared."""
    if not requirements:
        return sys.executable
    root = env_dir(requirements)
    python = root / "bin" / "python"
    return str(python) if (root / READY).is_file() and python.exists() else None


def prepare(requirements: Sequence[str], *, log: Callable[[str], None] = print, timeout: float = 1800) -> str:
    """Build (or reuse) the environment for ``requirements``; its interpreter. ``PrepareError`` on failure, with
    pip's last line. Two processes preparing the same environment (two CI jobs, a campaign and a developer) take
    turns on a lock file: the second one waits and then finds it ready, never half-built."""
    import fcntl

    root = env_dir(requirements)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.with_name(root.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
            return _build(requirements, root, log, timeout)
    except OSError as exc:
        raise PrepareError(f"{root}: {exc.strerror or exc}") from None


def _build(requirements: Sequence[str], root: Path, log: Callable[[str], None], timeout: float) -> str:
    ready = interpreter(requirements)
    if ready:
        log(f"  ready   {root}")
        return ready
    if root.exists():  # an interrupted build (we hold the lock: nobody is building it now): never reused
        shutil.rmtree(root)
    t0 = time.monotonic()
    log(f"  building {root} ({len(requirements)} pinned requirement{'s' if len(requirements) != 1 else ''}; "
        "pip prints nothing until it is done) ...")
    steps = [[sys.executable, "-m", "venv", str(root)],
             [str(root / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
              "--no-input", *requirements]]
    for argv in steps:
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise PrepareError(f"{' '.join(argv[:4])}: {exc}") from None
        if proc.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            tail = [l for l in proc.stderr.decode(errors="replace").splitlines() if l.strip()][-1:] or [""]
            raise PrepareError(f"{' '.join(argv[:5])} … exited {proc.returncode}: {tail[0]}")
    freeze = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True).stdout.split()
    tmp = root / (READY + ".tmp")
    tmp.write_text(json.dumps({"requirements": list(requirements), "freeze": freeze,
                               "python": sys.version.split()[0]}, indent=1))
    os.replace(tmp, root / READY)
    log(f"  built   {root} in {time.monotonic() - t0:.0f} s")
    return str(root / "bin" / "python")


def installed(requirements: Sequence[str]) -> list[str]:
    """``pip freeze`` of a prepared environment (what a report records as the versions under test)."""
    try:
        return json.loads((env_dir(requirements) / READY).read_text())["freeze"]
    except (OSError, ValueError, KeyError):
        return []


@functools.cache
def _probe_digest() -> str:
    """The digest of the probe's source files: read once per process (every probe case asks for the path, and
    the sources a running harness imported do not change under it)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for rel in PROBE_FILES:
        h.update(rel.encode() + b"\0" + (here / rel).read_bytes())
    return h.hexdigest()[:12]


def probe_path() -> str:
    """A directory holding only the probe's modules (``chaos.probe``, ``chaos.zygote``, ``chaos.prefault``), for
    ``PYTHONPATH`` of a foreign interpreter; rebuilt when their source changes."""
    here = Path(__file__).resolve().parent
    root = cache_root() / "probe" / _probe_digest()
    if (root / "chaos" / "zygote.py").is_file():
        return str(root)
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    (tmp / "chaos" / "probe").mkdir(parents=True, exist_ok=True)
    (tmp / "chaos" / "__init__.py").write_text('"""killpoint\'s probe, copied for a target\'s own interpreter '
                                               '(chaos.environments.probe_path)."""\n')
    for rel in PROBE_FILES:
        shutil.copy2(here / rel, tmp / "chaos" / rel)
    try:
        os.replace(tmp, root)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(root)
