"""Where a case's time goes, and cases/s under the exec and zygote launchers side by side (issue [2/5]).

    python3 bench/campaign.py                       # single-read, bash-deploy, mixed-calls; plain kills
    python3 bench/campaign.py --scenarios single-read --repeat 2

For each named scenario the crash-free baseline runs once under each launcher (``exec``, the baseline, and
``zygote``), then every exhaustive depth-1 kill case of the scenario runs under both, one after the other, in this
one process (one core; a campaign runs one such loop per worker), the launchers alternating case by case so both
read the same minutes of a machine whose speed drifts. Every speed fix is applied to both (pidfd waits,
TCP_NODELAY, the agent's bytecode caches); only the launcher differs. Printed:

- cases/s per launcher (kill cases over their summed wall time) and the ratio zygote/exec (the target: ≥ 10×,
  goal 20×);
- per case, mean milliseconds of each phase of ``chaos.case.execute_case``: set-up (directories, server route),
  supervisor (launches, barriers, kills, restarts), probes (the convergence resume; a second only when the first
  changed the log), oracle (evidence and every invariant), tear-down;
- inside the supervisor: launch → first barrier, each model request (``stepAttempt`` after-sync → next barrier),
  the fsync (after-write → after-sync), and the barrier round trip's upper bound (before-write → after-write: the
  harness's answer, the agent's write and its next message); both only from a barrier the agent waited at — it
  waits only at the phases the case's faults name and at after-sync, docs/protocol.md — so the fsync is timed in one
  more case per scenario and launcher, killed at its last after-write (not counted in cases/s or any other figure);
- a ceiling: per case, the agent processes' lives (each from its creation to its reaping) plus the probe phase and
  the probe's life behind the oracle, and the cases/s a zygote loop would reach if everything outside them cost
  nothing, with its ratio to the exec rate of the same run. What the harness does while an agent lives still counts
  there (its answers at barriers, the model server, the zygote's work in a fresh child, the exit status's relay);
- harness overhead per case: set-up + oracle + tear-down + (supervisor time not inside any agent process's life),
  i.e. everything but the agents' own work and the convergence probes. A process's life runs from its creation
  (exec: the launch call, in which Popen forks; zygote: the moment its process got the launch — the hand-off to a
  spare, or its fork's return — as the zygote reports it) to its reaping (zygote: when the zygote reaped it, as it
  reports; exec: when the supervisor saw it, a kill before the kill's bookkeeping); the oracle judges while the
  first probe runs (another process), and the part of its work the probe's life covered is not overhead (printed on
  its own line; under exec only when the probe still ran after the oracle: its end is not known). The process
  sweeps are counted in (issue [2/5]'s definition leaves them out: this figure is the conservative one);
- 95 % bootstrap intervals of the ratio (the kill cases resampled as exec/zygote pairs within each scenario) and of
  the zygote's overhead without the sweeps: how much a run's figures owe to which of its cases happened to be slow,
  not how the machine drifts between runs;
- CPU per case of every process (this one and its model server, the agents it reaped, each zygote with the children
  it reaped) and the pages a zygote's spare was asked to copy ahead per launch (``chaos.prefault``: on here, one loop
  on a machine with more cores).

- last, issue [2/5]'s targets this bench measures (the ratio ≥ 10×, the barrier round trip ≤ 0.2 ms, the overhead
  without the sweeps ≤ 5 ms), each with its figure and how it stands (``standing``): met, at its edge (the figure
  is on the target's side, its 95 % interval is not), or not met.

Figures, never thresholds: nothing fails. The machine's load matters: run it on a quiet machine and read the
ratio, which is measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chaos import process  # noqa: E402
from chaos.case import execute_case, shared_launcher  # noqa: E402
from chaos.scenario import load_scenario  # noqa: E402
from chaos.target import Target  # noqa: E402

SUBSET = ("single-read", "bash-deploy", "mixed-calls")
PHASES = ("setup", "supervisor", "probes", "oracle", "teardown")


# Issue [2/5]'s targets that this bench measures, each with the figure it reads. (The default campaign's ≤ 30 s,
# mutants --fast's ≤ 20 s and the nightly's ≤ 20 min are measured by those commands: README, Performance.)
RATIO_TARGET, RATIO_GOAL = 10.0, 20.0  # zygote cases/s over exec cases/s, same run
ROUND_TRIP_TARGET_MS = 0.2  # the barrier round trip's upper bound, median
OVERHEAD_TARGET_MS = 5.0  # harness overhead per case without the process sweeps, mean


class BenchError(Exception):
    """Nothing to measure (a baseline that does not pass, an unknown scenario): one line, exit 2."""


def standing(value: float, target: float, *, at_least: bool, low: float | None = None,
             high: float | None = None) -> str:
    """How a figure stands against its target: "met" when it and its whole 95 % interval (``low``–``high``, when
    given) are on the target's side, "at its edge" when the figure is but its interval reaches past the target (a
    run whose slow cases happened otherwise could read the other side), "not met" when the figure is not.
    ``at_least``: the target is a floor (a ratio), else a ceiling (milliseconds)."""
    def within(x: float) -> bool:
        return x >= target if at_least else x <= target

    if not within(value):
        return "not met"
    bound = low if at_least else high
    return "at its edge" if bound is not None and not within(bound) else "met"


def gaps(run) -> dict[str, list[float]]:
    """Milliseconds between barrier events of one CaseRun, by kind. The round trip and the fsync are timed only from a
    barrier the agent waited at: one it was told not to wait at (docs/protocol.md, ``wait``) is stamped when the
    supervisor read it, which may be after the agent went on."""
    out: dict[str, list[float]] = {"start→first barrier": [], "model request": [], "fsync": [],
                                   "barrier round trip (≤)": []}
    by_launch: dict[int, list] = {}
    for b in run.barriers:
        by_launch.setdefault(b.launch, []).append(b)
    for launch in run.launches:
        events = by_launch.get(launch.index, [])
        if events:
            out["start→first barrier"].append((events[0].at - launch.started) * 1000)
        for a, b in zip(events, events[1:]):
            gap = (b.at - a.at) * 1000
            if a.phase == "before-write" and b.phase == "after-write" and a.waited:
                out["barrier round trip (≤)"].append(gap)
            elif a.phase == "after-write" and b.phase == "after-sync" and a.waited:
                out["fsync"].append(gap)
            elif a.phase == "after-sync" and "stepAttempt" in a.facts and b.phase == "before-write":
                out["model request"].append(gap)
    return out


def lives(run) -> list[tuple[float, float]]:
    """The agent processes' lives of one CaseRun, merged: disjoint (start, end) seconds since the case began."""
    out: list[tuple[float, float]] = []
    for start, stop in sorted((l.started, l.ended if l.ended is not None else l.started) for l in run.launches):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def sweeps_outside(run, began: float, sweeps) -> float:
    """Seconds of process sweeps (``chaos.process.SWEEPS``: absolute intervals) inside the supervisor's run and
    outside every agent process's life: what issue [2/5]'s harness overhead leaves out. ``began``: when the
    supervisor's clock started (time.monotonic(); the case's start plus its set-up, to within microseconds)."""
    spans = lives(run)
    total = 0.0
    for start, stop in sweeps:
        start, stop = max(start - began, 0.0), min(stop - began, run.duration)
        if stop <= start:
            continue
        covered = sum(max(0.0, min(stop, b) - max(start, a)) for a, b in spans)
        total += (stop - start) - covered
    return total


def agent_time(run) -> float:
    """Seconds during which at least one agent process of the case was alive (union of launch lifetimes)."""
    return sum(stop - start for start, stop in lives(run))


def _record(acc: dict, scenario: str, result, case_run, wall: float, began: float) -> None:
    """Add one kill case of ``scenario`` to a launcher's accumulator (``began``: when the case started)."""
    acc["walls"].append(wall)  # in the order of the cases, the same under every launcher: pairs by index
    acc["scenarios"].append(scenario)
    for p in PHASES:
        acc["phases"][p].append(result.timings.get(p, 0.0) * 1000)
    for kind, values in gaps(case_run).items():
        acc["barrier"].setdefault(kind, []).extend(values)
    t = result.timings
    inside = agent_time(case_run)
    acc["agents"].append(inside * 1000)
    acc["hidden"].append(t["oracle-hidden"] * 1000)
    acc["overhead"].append((t["setup"] + t["oracle"] - t["oracle-hidden"] + t["teardown"]
                            + max(0.0, t["supervisor"] - inside)) * 1000)
    swept = [(a, b) for a, b in process.SWEEPS if a >= began]
    acc["sweeps"].append(sweeps_outside(case_run, began + t["setup"], swept) * 1000)


def measure(targets: dict[str, Target], names, repeat: int) -> dict[str, dict]:
    """Run every kill case of every scenario ``repeat`` times under each launcher, alternating case by case; the
    figures of each launcher.

    Case by case: this VM's speed drifts by ±25% over tens of seconds (other guests), and a launcher measured in a
    block of its own (the exec one takes ~30 s, the zygote one ~4 s) reads a different machine than the other. Every
    kill case runs once under each launcher, the order swapped every case, so both sample the same minutes; cases/s
    is kill cases over the summed wall time of those cases (the baselines are not timed)."""
    from chaos import oracle

    launchers = {name: shared_launcher(target) for name, target in targets.items()}  # started before the clock,
    # as a campaign worker starts its own once
    acc = {launcher: {"walls": [], "scenarios": [], "cpu": 0.0, "phases": {p: [] for p in PHASES}, "barrier": {},
                      "overhead": [], "sweeps": [], "hidden": [], "agents": [], "failures": []}
           for launcher in targets}
    with tempfile.TemporaryDirectory(prefix="killpoint-bench-") as tmp:
        work = Path(tmp)
        turn = 0
        for name in names:
            path = REPO / "scenarios" / f"{name}.toml"
            if not path.is_file():
                raise BenchError(f"no library scenario named {name!r} (scenarios/{name}.toml)")
            scenario = load_scenario(path)
            facts, schedules = {}, []
            for launcher, target in targets.items():
                base, evidence, run = execute_case(scenario, (), work_dir=work, target=target, baseline=None,
                                                   server=None, limits=None, probes=2, keep="none", name=None)
                if not base.ok:  # nothing to measure: say why in one line (e.g. the package is not installed)
                    raise BenchError(f"{launcher}: the crash-free baseline of {name} did not pass: {base.verdict}"
                                     f" ({base.detail})")
                facts[launcher] = oracle.baseline_facts(evidence, base.invariants)
                schedules = [f"tx:{b.tx}@{b.phase}" for b in run.barriers if b.phase in ("before-write", "after-sync")]
            print(f"  {name}: {len(schedules) * repeat} kill case(s) under each launcher", flush=True)
            for _ in range(repeat):
                for schedule in schedules:
                    order = list(targets) if turn % 2 == 0 else list(reversed(targets))
                    turn += 1
                    for launcher in order:
                        t, cpu = time.monotonic(), cpu_seconds(launchers.values())
                        result, _, case_run = execute_case(scenario, (schedule,), work_dir=work,
                                                           target=targets[launcher], baseline=facts[launcher],
                                                           server=None, limits=None, probes=2, keep="none",
                                                           name=None)
                        _record(acc[launcher], name, result, case_run, time.monotonic() - t, t)
                        acc[launcher]["cpu"] += cpu_seconds(launchers.values()) - cpu
                        if not result.ok:
                            acc[launcher]["failures"].append(f"{name}::{schedule}: {result.status}")
            # The fsync is timed only from an after-write the agent waited at, and it waits there only while a fault
            # at that phase is still to fire (docs/protocol.md): one case per launcher killed at the scenario's last
            # after-write times every commit before it. Apart from the loop above: not in cases/s or any mean.
            last = [f"tx:{b.tx}@after-write" for b in run.barriers if b.phase == "after-write"][-1:]
            for schedule in last:
                for launcher in targets:
                    result, _, case_run = execute_case(scenario, (schedule,), work_dir=work, target=targets[launcher],
                                                       baseline=facts[launcher], server=None, limits=None, probes=2,
                                                       keep="none", name=None)
                    acc[launcher]["barrier"].setdefault("fsync", []).extend(gaps(case_run)["fsync"])
                    if not result.ok:
                        acc[launcher]["failures"].append(f"{name}::{schedule}: {result.status}")
    for name, figures in acc.items():
        figures["cases"], figures["wall"] = len(figures["walls"]), sum(figures["walls"])
        figures["rate"] = figures["cases"] / figures["wall"] if figures["wall"] else 0.0
        figures["launcher"] = launchers[name]
    return acc


def cpu_seconds(launchers) -> float:
    """CPU time so far of this process (the harness and its model server), of the processes it reaped (exec'd
    agents) and of each zygote with the children it reaped (its spares and launches). Clock ticks (10 ms): exact as
    a sum over many cases, not per case."""
    times = os.times()
    return (time.process_time() + times.children_user + times.children_system
            + sum(launcher.cpu_seconds() for launcher in launchers if hasattr(launcher, "cpu_seconds")))


def interval(strata: list[list], stat, rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of ``stat`` over the samples of every stratum: ``stat`` of ``rounds`` resamples, each
    stratum resampled within itself (with replacement, as many as it has, so the mix of strata stays the run's), their
    2.5th and 97.5th percentiles. Seeded: the same figures give the same interval."""
    rng = random.Random(seed)
    values = sorted(stat([stratum[rng.randrange(len(stratum))] for stratum in strata for _ in stratum])
                    for _ in range(rounds))
    return values[int(0.025 * rounds)], values[int(0.975 * rounds) - 1]


def by_scenario(values: list, names: list[str]) -> list[list]:
    """``values`` grouped by the scenario of each (``names``, in the same order), in first-seen order."""
    groups: dict[str, list] = {}
    for value, name in zip(values, names):
        groups.setdefault(name, []).append(value)
    return list(groups.values())


def mean(values) -> float:
    return statistics.fmean(values) if values else 0.0


def median(values) -> float:
    return statistics.median(values) if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SUBSET), help="comma-separated library scenario names")
    parser.add_argument("--repeat", type=int, default=1, help="run each kill case this many times")
    args = parser.parse_args()
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    targets = {launcher: replace(Target(), launcher=launcher) for launcher in ("exec", "zygote")}
    print(f"exec and zygote, case by case: running {', '.join(names)} …", flush=True)
    try:
        results = measure(targets, names, args.repeat)
    except BenchError as exc:
        print(f"bench/campaign.py: {exc}", file=sys.stderr)
        return 2
    e, z = results["exec"], results["zygote"]
    print()
    print(f"scenarios: {', '.join(names)}; {z['cases']} kill cases per launcher, alternating, one process (one core)")
    print(f"{'':34}{'exec':>12}{'zygote':>12}")
    print(f"{'cases/s':34}{e['rate']:12.2f}{z['rate']:12.2f}   ratio zygote/exec {z['rate'] / e['rate']:.1f}×")
    print(f"{'ms per case (wall)':34}{e['wall'] / e['cases'] * 1000:12.1f}{z['wall'] / z['cases'] * 1000:12.1f}")
    for p in PHASES:
        print(f"{'  ' + p + ' (mean ms)':34}{mean(e['phases'][p]):12.1f}{mean(z['phases'][p]):12.1f}")
    print(f"{'    of the oracle, behind the probe':34}{mean(e['hidden']):12.1f}{mean(z['hidden']):12.1f}")
    for kind in ("start→first barrier", "model request", "fsync", "barrier round trip (≤)"):
        # "—": no sample (a scenario without an after-write, or only a barrier the agent did not wait at)
        cells = [f"{median(r['barrier'][kind]):12.2f}" if r["barrier"].get(kind) else f"{'—':>12}" for r in (e, z)]
        print(f"{'  ' + kind + ' (median ms)':34}{''.join(cells)}")
    print(f"{'harness overhead per case (mean ms)':34}{mean(e['overhead']):12.1f}{mean(z['overhead']):12.1f}")
    # Issue [2/5]'s definition: all but the agents' own work and the process sweeps (those outside every life).
    print(f"{'  without the process sweeps':34}{mean(e['overhead']) - mean(e['sweeps']):12.1f}"
          f"{mean(z['overhead']) - mean(z['sweeps']):12.1f}")
    # How much the figures owe to which of this run's cases happened to be slow (not the machine's drift between
    # runs): the cases resampled within each scenario, as exec/zygote pairs for the ratio (each kill case ran under
    # both, one right after the other).
    pairs = list(zip(e["walls"], z["walls"]))
    low, high = interval(by_scenario(pairs, z["scenarios"]), lambda ps: sum(a for a, _ in ps) / sum(b for _, b in ps))
    own = [o - s for o, s in zip(z["overhead"], z["sweeps"])]
    o_low, o_high = interval(by_scenario(own, z["scenarios"]), mean)
    print(f"95 % bootstrap intervals, cases resampled within each scenario: ratio {low:.1f}–{high:.1f}× "
          f"({len(pairs)} exec/zygote pairs), zygote overhead without the sweeps {o_low:.1f}–{o_high:.1f} ms")
    print(f"{'CPU per case, all processes (ms)':34}{e['cpu'] / e['cases'] * 1000:12.1f}"
          f"{z['cpu'] / z['cases'] * 1000:12.1f}")
    zygote = z["launcher"]
    if getattr(zygote, "forked", 0):
        print(f"{'pages to copy ahead per launch':34}{'':12}{zygote.copied / zygote.forked:12.0f}"
              f"   ({'on' if zygote.copy_ahead else 'off'}: chaos.prefault)")
    # The agent processes' lives (each from its creation to its exit status) and the probe phase: cases/s if all
    # else cost nothing, and that rate against this run's exec rate (the harness's work during those lives counts).
    floor = {k: mean(r["agents"]) + mean(r["phases"]["probes"]) + mean(r["hidden"])
             for k, r in (("exec", e), ("zygote", z))}
    print(f"{'in agent processes + probes (ms)':34}{floor['exec']:12.1f}{floor['zygote']:12.1f}")
    ceiling = 1000 / floor["zygote"] if floor["zygote"] else 0.0
    print(f"{'ceiling: all else free (cases/s)':34}{'':12}{ceiling:12.2f}   ratio to this exec "
          f"{ceiling / e['rate']:.1f}×")
    ratio, round_trip = z["rate"] / e["rate"], median(z["barrier"].get("barrier round trip (≤)", []))
    overhead = mean(z["overhead"]) - mean(z["sweeps"])
    print("issue [2/5]'s targets in this run (figures, not a test: read several runs on a quiet machine):")
    print(f"  {f'zygote/exec ≥ {RATIO_TARGET:g}× (goal {RATIO_GOAL:g}×)':44}{ratio:8.1f}×   "
          f"{standing(ratio, RATIO_TARGET, at_least=True, low=low, high=high)} (interval {low:.1f}–{high:.1f}×)")
    print(f"  {f'barrier round trip ≤ {ROUND_TRIP_TARGET_MS:g} ms (median)':44}{round_trip:8.2f} ms "
          f"{standing(round_trip, ROUND_TRIP_TARGET_MS, at_least=False)}")
    print(f"  {f'harness overhead ≤ {OVERHEAD_TARGET_MS:g} ms (sweeps left out)':44}{overhead:8.1f} ms "
          f"{standing(overhead, OVERHEAD_TARGET_MS, at_least=False, low=o_low, high=o_high)} "
          f"(interval {o_low:.1f}–{o_high:.1f} ms)")
    for launcher, r in results.items():
        if r["failures"]:
            print(f"{launcher}: {len(r['failures'])} case(s) did not pass: {'; '.join(r['failures'][:5])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
