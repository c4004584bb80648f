"""Agent start-up cost: the ``resume`` path, against a bare interpreter measured in the same run.

The agent is launched thousands of times per campaign, so its start path is stdlib only. This prints:

* wall time of ``python -m agent resume FILE`` on an idle session (nothing to do: pure start-up + one reduce),
  against ``python -c pass`` (the interpreter's own floor) and the ratio;
* the ``-X importtime`` split of that command into the agent's own modules (``agent.*``), the standard library it
  pulls in, and the interpreter's start-up (``site`` and what it imports before ``-m agent`` runs).

Usage: ``python3 bench/startup.py [--runs N]``. Figures only, never thresholds (issue 3 target: agent's own modules
≤ 25 ms). Bytecode caches are written first (``compileall``), as the harness's launcher does.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_idle_session(directory: Path) -> Path:
    """A session with one header line: ``resume`` finds it idle and writes nothing."""
    sys.path.insert(0, str(REPO))
    from agent.session.store import SessionStore

    store = SessionStore.create(directory / "sessions", cwd=str(directory), provider="openai", model="bench/model",
                                environment_identity="bench")
    path = store.path
    store.close()
    return path


def wall(argv: list[str], runs: int) -> float:
    """Median wall time of ``argv`` in milliseconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def import_split(argv: list[str], runs: int) -> tuple[float, float, float]:
    """Median (agent modules, stdlib pulled in by the agent, interpreter start-up) self-times in ms."""
    agent_ms, stdlib_ms, startup_ms = [], [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]], capture_output=True, text=True).stderr
        seen_agent = False
        a = s = pre = 0
        for line in out.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _cumulative, name = (part.strip() for part in line[len("import time:"):].split("|", 2))
            module = name.strip()
            if module.split(".")[0] == "agent":
                seen_agent = True
                a += int(self_us)
            elif seen_agent:
                s += int(self_us)
            else:
                pre += int(self_us)  # site, encodings, … imported before the agent's first module
        agent_ms.append(a / 1000)
        stdlib_ms.append(s / 1000)
        startup_ms.append(pre / 1000)
    return statistics.median(agent_ms), statistics.median(stdlib_ms), statistics.median(startup_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "agent"), quiet=2)
    with tempfile.TemporaryDirectory() as tmp:
        session = make_idle_session(Path(tmp))
        resume = [sys.executable, "-m", "agent", "resume", str(session), "--environment-identity", "bench"]
        floor = wall([sys.executable, "-c", "pass"], args.runs)
        agent = wall(resume, args.runs)
        own, stdlib, startup = import_split(resume, args.runs)
    print(f"python -c pass (baseline, same run):      {floor:7.1f} ms wall (median of {args.runs})")
    print(f"python -m agent resume IDLE-SESSION:      {agent:7.1f} ms wall   ratio {agent / floor:.2f}x the bare interpreter")
    print("import time of the resume path (-X importtime self times, median):")
    print(f"  agent's own modules (agent.*):          {own:7.1f} ms   target <= 25 ms: {'meets' if own <= 25 else 'MISSES'}")
    print(f"  standard library pulled in by the agent:{stdlib:7.1f} ms")
    print(f"  interpreter start-up before the agent:  {startup:7.1f} ms")


if __name__ == "__main__":
    main()
