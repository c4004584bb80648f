"""``chaos campaign --launcher-check``: the zygote and exec launchers must be indistinguishable to the oracle.

Why. The zygote (``chaos.zygote``) makes a case cost milliseconds by forking agents from a warm interpreter instead
of exec'ing them. That is only worth having if nothing the harness judges depends on it: a forked agent that
inherited a lock, a descriptor, a signal disposition or a random state would behave differently from the exec'd
one, and a campaign would then test something else than the agent users run. This check runs a fixed sample of
cases under both launchers, in the same worker, and fails when a verdict (status, failed invariants, the
supervisor's verdict) or the final transcript (ids renamed, timestamps ignored) differs.

The sample, deterministic from the scenarios: the campaign's own case list with every fault action, keeping the
first case per (scenario, fault action) and per (scenario, kill point kind ``FACT@PHASE``) — so every fault action
and every kind of durable write of the chosen scenarios is exercised under both launchers; the planner rules those
cases reach on restart are reported too.

Not here: the launchers themselves (``chaos.zygote``, ``chaos.process``), the case executor (``chaos.case``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass
class LauncherCheck:
    """What the check ran and found."""

    cases: list[dict[str, Any]] = field(default_factory=list)  # chaos.workers.launcher_check_job records
    errors: list[str] = field(default_factory=list)
    baselines: dict[str, Any] = field(default_factory=dict)

    @property
    def differing(self) -> list[dict[str, Any]]:
        return [c for c in self.cases if c["differences"]]

    @property
    def ok(self) -> bool:
        """Cases ran, none differed, none errored, and every crash-free baseline (run under the zygote, judged with
        what the target says by exec) passed: a zygote whose agents differ can already fail there."""
        return (bool(self.cases) and not self.differing and not self.errors
                and all(b.get("ok") for b in self.baselines.values()))

    def rules(self) -> list[str]:
        return sorted({r for c in self.cases for r in c.get("rules", [])})

    def actions(self) -> list[str]:
        return sorted({c["action"] for c in self.cases})

    def lines(self) -> list[str]:
        out = [f"launcher check: {len(self.cases)} case(s) under zygote and exec, {len(self.differing)} differ, "
               f"{len(self.errors)} error(s)",
               f"  fault actions: {', '.join(self.actions())}",
               f"  planner rules reached on restart: {', '.join(self.rules()) or 'none'}"]
        durations = [c["durations"] for c in self.cases if c.get("durations")]
        if durations:
            zygote = sum(d["zygote"] for d in durations)
            execd = sum(d["exec"] for d in durations)
            out.append(f"  case time: zygote {zygote:.1f} s, exec {execd:.1f} s ({execd / max(zygote, 1e-9):.1f}×)")
        for c in self.differing:
            out.append(f"  DIFFERS {c['id']}")
            out += [f"    {d}" for d in c["differences"]]
        out += [f"  ERROR {e}" for e in self.errors]
        for name, b in self.baselines.items():
            if not b.get("ok"):
                out.append(f"  BASELINE {name}: " + "; ".join(b.get("problems") or ["failed"]))
        return out


def sample(case_ids: Sequence[str]) -> list[tuple[str, str, int]]:
    """The first case per (scenario, action) and per (scenario, FACT@PHASE) of ``case_ids``. Pure."""
    from chaos.errors import ChaosError
    from chaos.schedules import spec_from_id

    seen: set[tuple] = set()
    picked = []
    for index, cid in enumerate(case_ids):
        try:
            spec = spec_from_id(cid)
        except ChaosError:  # a probe scenario's case (its own vocabulary): the check compares the session agent
            continue
        if not spec.faults:
            continue
        first = spec.faults[0]
        keys = {(spec.scenario, "action", first.action),
                (spec.scenario, "point", f"{first.point.fact or 'tx'}@{first.point.phase}")}
        if keys - seen:
            seen |= keys
            picked.append((cid, spec.origin, index))
    return picked


def run_check(options, *, say: Callable[[str], None] = print, workers: int | None = None) -> LauncherCheck:
    """Discover the scenarios' kill points, pick the sample, run each case under both launchers (in parallel)."""
    from chaos.campaign import FAULT_FAMILIES, Campaign, Reporter, load_library
    from chaos.schedules import spec_from_id
    from chaos.workers import WorkerPool

    options = replace(options, faults=list(FAULT_FAMILIES), mode="exhaustive", depth=1, shard=None)
    options.target = {**options.target, "launcher": "zygote"}
    result = LauncherCheck()
    with tempfile.TemporaryDirectory(prefix="killpoint-launcher-check-") as tmp:
        campaign = Campaign(options, Path(tmp), Reporter(say))
        campaign.entries = load_library(options.scenarios, options.tags)
        with WorkerPool(campaign.worker_config(), workers or options.workers or os.cpu_count() or 1) as pool:
            campaign.discover(pool)
            result.baselines = {e.name: e.baseline for e in campaign.entries}
            picked = sample([c.id for c in campaign.cases()])
            say(f"launcher check: {len(picked)} case(s), each under zygote and exec")
            jobs = {pool.submit("launcher-check", cid, spec_from_id(cid).origin, index)[0]: cid
                    for cid, _, index in picked}
            done = 0
            while done < len(jobs):
                item = pool.next_result(timeout=1.0)
                if item is None:
                    continue
                job, status, payload = item
                done += 1
                if status == "ok":
                    result.cases.append(payload)
                    if payload["differences"]:
                        say(f"DIFFERS {payload['id']}: {'; '.join(payload['differences'])}")
                else:
                    result.errors.append(f"{jobs[job[0]]}: {str(payload).strip().splitlines()[-1]}")
                if done % 10 == 0 or done == len(jobs):
                    say(f"[{done}/{len(jobs)}] launcher check")
    result.cases.sort(key=lambda c: c["id"])
    return result
