"""Tests of chaos.case: a judgement made while the convergence probe ran stands only if the probe changed nothing it
read; zygotes copy pages ahead only when a core is left idle."""

from __future__ import annotations

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

    monkeypatch.setattr(case, "usable_cores", lambda: 2)
    try:
        case.set_loops(1)
        assert case.copies_ahead()
        case.set_loops(2)
        assert not case.copies_ahead()
        case.set_loops(0)  # at least one loop: this process itself
        assert case.copies_ahead()
    finally:
        case.set_loops(1)


def test_the_oracle_is_hidden_behind_a_probe_only_while_the_probe_lives():
    """The overlap of the oracle's work with the probe's life: all of it while the probe still ran, up to its end
    when it ended first, none before it started or when its end is not known (exec)."""
    from chaos.case import hidden_behind

    assert hidden_behind(10.0, 10.004, 10.004) == pytest.approx(0.004)  # still running when the oracle was done
    assert hidden_behind(10.0, 10.004, 10.001) == pytest.approx(0.001)  # ended during the oracle's work
    assert hidden_behind(10.0, 10.004, 9.9) == 0.0  # ended before the oracle began
    assert hidden_behind(10.0, 10.004, None) == 0.0


def test_a_cgroup_cpu_quota_counts_as_fewer_cores():
    """cgroup v2 cpu.max and v1 cfs quota/period give the usable cores; "max", -1 or no cpu controller give none."""
    from chaos.case import cgroup_quota

    files = {"/sys/fs/cgroup/ci/cpu.max": "150000 100000\n",
             "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "50000\n",
             "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
             "/sys/fs/cgroup/free/cpu.max": "max 100000\n"}

    def read(path):
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    assert cgroup_quota("0::/ci\n", read) == 1.5
    assert cgroup_quota("4:memory:/x\n3:cpu,cpuacct:/job\n0::/\n", read) == 0.5
    assert cgroup_quota("0::/free\n", read) is None
    assert cgroup_quota("4:memory:/x\n", read) is None
