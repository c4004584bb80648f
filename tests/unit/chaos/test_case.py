"""Tests of chaos.case: a judgement made while the convergence probe ran stands only if the probe changed nothing it
read; zygotes copy pages ahead only when a core is left idle."""

from __future__ import annotations

import os

import pytest

from chaos import oracle
from chaos.case import Judgement

LOG = b'{"kind":"header"}\n'


def judged(tmp_path) -> tuple[Judgement, list, object, object]:
    witness, workspace = tmp_path / "witness.log", tmp_path / "workspace"
    workspace.mkdir()
    witness.write_text("effect 1\n")
    (workspace / "out.txt").write_text("done\n")
    requests = [{"seq": 1}]
    evidence = oracle.Evidence(case_id="c", schedule=(), final_log=LOG, requests=requests, witness=["effect 1"],
                               files={"out.txt": "done\n", "absent.txt": None})
    results = [oracle.InvariantResult("converges", True), oracle.InvariantResult("outcome", True)]
    return Judgement(evidence, results), requests, witness, workspace


def quiet_probe(before: bytes = LOG, after: bytes = LOG) -> oracle.Probe:
    return oracle.Probe(0, "", oracle.sha(before), oracle.sha(after), len(before), len(after))


def test_a_probe_that_changed_nothing_leaves_the_judgement_standing(tmp_path):
    """Same log, requests, witness and files: the early judgement is the one a sequential oracle would make."""
    judgement, requests, witness, workspace = judged(tmp_path)
    assert judgement.still_true(requests, witness, workspace, [quiet_probe()])


@pytest.mark.parametrize("change", ["log", "found-other-bytes", "request", "witness", "file", "new-file", "no-probe"])
def test_anything_a_probe_changed_voids_the_judgement(tmp_path, change):
    """A probe that wrote the log, asked the model, left an effect or touched an expected file voids it."""
    judgement, requests, witness, workspace = judged(tmp_path)
    probes = [quiet_probe()]
    if change == "log":
        probes = [quiet_probe(after=LOG + b'{"kind":"fact"}\n')]
    elif change == "found-other-bytes":  # the log moved between the judgement's read and the probe's start
        probes = [quiet_probe(before=LOG + b"x", after=LOG + b"x")]
    elif change == "request":
        requests = [*requests, {"seq": 2}]
    elif change == "witness":
        witness.write_text("effect 1\neffect 1\n")
    elif change == "file":
        (workspace / "out.txt").write_text("done twice\n")
    elif change == "new-file":
        (workspace / "absent.txt").write_text("created\n")
    else:
        probes = []
    assert not judgement.still_true(requests, witness, workspace, probes)


def test_the_probes_results_reach_converges_only(tmp_path):
    """with_probes re-runs converges over the probes (a probe that failed shows) and keeps the other results."""
    judgement, _, _, _ = judged(tmp_path)
    outcome = judgement.results[1]
    failed = oracle.Probe(1, "", oracle.sha(LOG), oracle.sha(LOG), len(LOG), len(LOG))
    judgement.with_probes([failed])
    assert judgement.evidence.probes == [failed]
    assert judgement.results[1] is outcome
    converges = judgement.results[0]
    assert converges.name == "converges" and not converges.ok
    assert any("resume exited 1" in f.message for f in converges.findings)


def test_zygotes_copy_ahead_only_when_the_loops_leave_a_core_idle(monkeypatch):
    """One loop on a machine of two cores copies ahead; as many loops as cores (a full campaign) does not."""
    from chaos import case

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    case.set_loops(1)
    assert case.copies_ahead()
    case.set_loops(2)
    assert not case.copies_ahead()
    case.set_loops(0)  # at least one loop: this process itself
    assert case.copies_ahead()
    case.set_loops(1)
