"""Unit tests of chaos.corpus: recording kill prefixes from hand-built evidence, finalizing with reference outputs,
packing, loading (built corpora, the contract corpus, the shipped default) and selecting (no processes)."""

from __future__ import annotations

import json
import zipfile

import pytest

from agent.session.planner import plan_recovery, plan_rule
from agent.session.reducer import reduce_session
from chaos.campaign import PLANNER_RULES
from chaos.conformance import snapshot_for
from chaos.corpus import (
    DEFAULT_CORPUS,
    CorpusError,
    configuration_key,
    configuration_record,
    finalize_corpus,
    load_corpus,
    observations,
    pack_corpus,
    publish,
    record_evidence,
    reduce_output,
    sha256_hex,
)
from chaos.oracle import Evidence, Kill, LaunchInfo


def launch_current(corpus, planner_case: str) -> tuple[bytes, dict]:
    """The session bytes of a planner fixture and a harness-style `current` (§8.7 plus `snapshot`, plus noise)."""
    case = json.loads((corpus / "planner-fixtures" / f"{planner_case}.json").read_text())
    data = (corpus / "fixtures" / case["sessionFile"]).read_bytes()
    current = dict(case["current"])
    current["snapshot"] = snapshot_for(data, current["configurationDigest"])
    current["tools"] = [dict(t, extra="dropped") for t in current["tools"]]
    return data, current


def evidence(kills: list[tuple[bytes, int]], currents: dict[int, dict | None], case_id: str = "s::f@p#1") -> Evidence:
    """Evidence with the given kill snapshots (bytes, killed launch) and launches (index -> current)."""
    return Evidence(case_id=case_id, schedule=("f@p#1",), final_log=b"",
                    kills=[Kill(f"kill{i}", launch, data) for i, (data, launch) in enumerate(kills)],
                    launches=[LaunchInfo(i, "resume" if i else "step", None, current=c) for i, c in currents.items()])


class TestRecording:
    def test_observation_takes_the_restart_after_the_kill(self, corpus):
        """Each kill is paired with the first launch after the killed one; the current is stripped to §8.7."""
        data, current = launch_current(corpus, "retry-attempt")
        obs = observations(evidence([(data, 0)], {0: None, 1: current, 2: None}))
        assert len(obs) == 1
        conf = obs[0]["configuration"]
        assert set(conf) == {"current", "snapshot"}
        assert set(conf["current"]) == {"configurationDigest", "environmentIdentity", "tools"}
        assert all(set(t) == {"name", "definitionDigest", "replay", "replayKey"} for t in conf["current"]["tools"])
        assert conf["snapshot"]["tools"]
        assert obs[0]["origin"] == {"case": "s::f@p#1", "scenario": "s", "kill": 1, "fault": "kill0",
                                    "action": "kill", "role": "resume"}

    def test_empty_snapshot_and_unknown_configuration(self, corpus):
        """An empty kill snapshot is skipped; a restart without a known configuration keeps the prefix only."""
        data, _ = launch_current(corpus, "retry-attempt")
        obs = observations(evidence([(b"", 0), (data, 1)], {0: None, 1: None, 2: None}))
        assert [o["configuration"] for o in obs] == [None]

    def test_identical_bytes_under_one_configuration_are_stored_once(self, corpus, tmp_path):
        """Recording the same prefix under the same configuration twice keeps the first case's observation."""
        data, current = launch_current(corpus, "retry-attempt")
        assert record_evidence(tmp_path, evidence([(data, 0)], {0: None, 1: current}, "first::x")) == 1
        assert record_evidence(tmp_path, evidence([(data, 0)], {0: None, 1: current}, "second::x")) == 0
        [obs] = list((tmp_path / "observations").iterdir())
        assert json.loads(obs.read_text())["origin"]["case"] == "first::x"
        assert (tmp_path / "prefixes" / f"{sha256_hex(data)}.jsonl").read_bytes() == data
        key = configuration_key(configuration_record(current))
        assert (tmp_path / "configurations" / f"{key}.json").is_file()

    def test_publish_is_first_writer_wins(self, tmp_path):
        """A second publish of the same name leaves the first bytes and no temporary file behind."""
        assert publish(tmp_path / "a" / "x.json", b"first")
        assert not publish(tmp_path / "a" / "x.json", b"second")
        assert (tmp_path / "a" / "x.json").read_bytes() == b"first"
        assert [p.name for p in (tmp_path / "a").iterdir()] == ["x.json"]


class TestFinalizeAndLoad:
    def built(self, corpus, tmp_path):
        """A corpus directory recorded from two planner fixtures and a torn-tail prefix without configuration."""
        out = tmp_path / "c"
        for case in ("retry-attempt", "ours-stale-calls-same-run"):
            data, current = launch_current(corpus, case)
            record_evidence(out, evidence([(data, 0)], {0: None, 1: current}, f"{case}::k@p#1"))
        torn = (corpus / "fixtures" / "torn-tail.jsonl").read_bytes()
        record_evidence(out, evidence([(torn, 0)], {0: None, 1: None}, "torn::k@p#1"))
        return out, finalize_corpus(out, {"campaign": "test"})

    def test_index_has_reference_outputs(self, corpus, tmp_path):
        """Finalizing writes the exact `agent reduce` bytes and the reference plan and rule of every check."""
        out, index = self.built(corpus, tmp_path)
        assert not (out / "observations").exists()
        assert len(index["prefixes"]) == 3 and len(index["checks"]) == 2
        assert index["rules"] == {"P3.3": 1, "P5.2": 1}
        for check in index["checks"]:
            data = (out / "prefixes" / f"{check['prefix']}.jsonl").read_bytes()
            current = json.loads((out / "configurations" / f"{check['configuration']}.json").read_text())["current"]
            assert check["plan"] == plan_recovery(reduce_session(data), current)
            assert check["rule"] == plan_rule(reduce_session(data), current)
        for sha in index["prefixes"]:
            data = (out / "prefixes" / f"{sha}.jsonl").read_bytes()
            assert (out / "expected" / f"{sha}.reduce.json").read_bytes() == reduce_output(data)

    def test_directory_and_zip_load_alike(self, corpus, tmp_path):
        """A packed corpus loads exactly like its directory; torn tails survive byte for byte."""
        out, _ = self.built(corpus, tmp_path)
        archive = pack_corpus(out, tmp_path / "c.zip")
        a, b = load_corpus(out), load_corpus(archive)
        assert a.kind == b.kind == "built"
        assert a.prefixes == b.prefixes and a.checks == b.checks
        torn = (corpus / "fixtures" / "torn-tail.jsonl").read_bytes()
        assert b.prefixes[sha256_hex(torn)].data == torn
        assert {c.rule for c in b.checks} == {"P3.3", "P5.2"}
        assert all(c.snapshot for c in b.checks)

    def test_refinalize_is_idempotent(self, corpus, tmp_path):
        """Finalizing a finalized corpus again gives the same index."""
        out, index = self.built(corpus, tmp_path)
        assert finalize_corpus(out) == index

    def test_select_by_rule_and_sample(self, corpus, tmp_path):
        """Selecting a rule keeps its checks and only the prefixes they need; a sample caps checks per rule."""
        out, _ = self.built(corpus, tmp_path)
        loaded = load_corpus(out)
        only = loaded.select(["P5"])
        assert [c.rule for c in only.checks] == ["P5.2"] and list(only.prefixes) == [only.checks[0].prefix]
        assert len(loaded.select(sample=1).checks) == 2
        assert len(loaded.select().prefixes) == 3


class TestContractCorpus:
    def test_root_and_subfolders(self, corpus):
        """The contract corpus loads from its root, its fixtures/ (reduce only) and its planner-fixtures/."""
        root = load_corpus(corpus)
        assert root.kind == "contract" and len(root.prefixes) == 46 and len(root.checks) == 18
        assert load_corpus(corpus / "fixtures").checks == []
        planner = load_corpus(corpus / "planner-fixtures")
        assert len(planner.checks) == 18 and planner.rules() == root.rules()
        assert "P5.2" in root.rules() and "P7.3" in root.rules()

    def test_not_a_corpus(self, tmp_path):
        """A directory without an index or manifests, a bad zip and a missing path are one-line CorpusErrors."""
        with pytest.raises(CorpusError, match="not a corpus"):
            load_corpus(tmp_path)
        (tmp_path / "x.zip").write_bytes(b"nope")
        with pytest.raises(CorpusError, match="not a corpus"):
            load_corpus(tmp_path / "x.zip")
        with pytest.raises(CorpusError, match="no such corpus"):
            load_corpus(tmp_path / "missing")

    def test_wrong_format_version(self, tmp_path):
        """An index of another format version is refused with the version named."""
        with zipfile.ZipFile(tmp_path / "v.zip", "w") as zf:
            zf.writestr("corpus.json", json.dumps({"format": "killpoint-crash-prefix-corpus", "version": 99}))
        with pytest.raises(CorpusError, match="version 99"):
            load_corpus(tmp_path / "v.zip")


class TestDefaultCorpus:
    def test_shipped_corpus_reaches_every_rule_and_is_small(self):
        """The package-data corpus of the default campaign reaches all 27 rules and stays a few MB."""
        assert DEFAULT_CORPUS.is_file()
        assert DEFAULT_CORPUS.stat().st_size < 5 * 1024 * 1024
        loaded = load_corpus(DEFAULT_CORPUS)
        assert [r for r in PLANNER_RULES if r not in loaded.rules()] == []
        assert loaded.source["campaign"]["scenarios"] == ["(default library)"]
        assert set(loaded.source["campaign"]["rules"]) <= loaded.rules()

    def test_shipped_corpus_matches_the_current_reference(self):
        """Every expected output of the shipped corpus is what the reference reducer and planner say today (a stale
        corpus after a contract change fails here: rebuild it with `chaos corpus build`)."""
        loaded = load_corpus(DEFAULT_CORPUS)
        for prefix in loaded.prefixes.values():
            assert json.loads(reduce_output(prefix.data)) == prefix.expected, prefix.origin
        for check in loaded.checks:
            reduction = reduce_session(loaded.prefixes[check.prefix].data)
            assert plan_recovery(reduction, check.current) == check.plan, check.origin
            assert plan_rule(reduction, check.current) == check.rule, check.origin
