"""Unit and property tests of chaos.journal: fsynced append, torn-tail tolerance, resume without loss or duplicates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.journal import (
    JOURNAL,
    Journal,
    JournalError,
    read_campaign,
    read_journal,
    read_lines,
    write_campaign,
)


def record(i: int, **kw) -> dict:
    return {"id": f"s::tx:{i}@after-sync", "status": "pass", **kw}


class TestAppend:
    def test_appended_records_read_back_in_order(self, tmp_path):
        """Every appended record is read back, in order, each on its own line."""
        path = tmp_path / JOURNAL
        with Journal(path) as j:
            for i in range(1, 4):
                assert j.append(record(i, note="caf\u00e9\nline"))
        assert list(read_journal(path)) == [record(i)["id"] for i in range(1, 4)]
        assert path.read_bytes().count(b"\n") == 3

    def test_a_duplicate_id_is_not_written(self, tmp_path):
        """Appending an id that is already journaled writes nothing and returns False."""
        path = tmp_path / JOURNAL
        with Journal(path) as j:
            assert j.append(record(1))
            assert not j.append(record(1, status="fail"))
        assert read_journal(path)[record(1)["id"]]["status"] == "pass"
        assert path.read_bytes().count(b"\n") == 1

    def test_records_need_an_id(self, tmp_path):
        """A record without a string id is refused."""
        with Journal(tmp_path / JOURNAL) as j, pytest.raises(JournalError):
            j.append({"status": "pass"})

    def test_closed_journal_refuses_appends(self, tmp_path):
        """A closed journal raises instead of writing."""
        j = Journal(tmp_path / JOURNAL)
        j.close()
        with pytest.raises(JournalError, match="closed"):
            j.append(record(1))


class TestTornTail:
    @settings(max_examples=60, deadline=None)
    @given(st.integers(1, 5), st.data())
    def test_any_cut_of_the_last_line_loses_only_that_line(self, tmp_path_factory, n, data):
        """Cutting the file anywhere inside the last line keeps every earlier record, and reopening repairs it."""
        path = tmp_path_factory.mktemp("j") / JOURNAL
        with Journal(path) as j:
            for i in range(1, n + 1):
                j.append(record(i, payload="x" * i))
        whole = path.read_bytes()
        start = whole.rfind(b"\n", 0, len(whole) - 1) + 1
        cut = data.draw(st.integers(start, len(whole) - 1))
        os.truncate(path, cut)
        assert len(read_lines(path)[0]) == n - 1
        with Journal(path) as j:
            assert len(j) == n - 1 and path.stat().st_size == start
            j.append(record(99))
        assert list(read_journal(path))[-1] == record(99)["id"]
        assert len(read_journal(path)) == n

    def test_a_corrupt_middle_line_is_an_error(self, tmp_path):
        """A complete line that is not JSON is reported with its line number, never skipped."""
        path = tmp_path / JOURNAL
        path.write_bytes(b'{"id":"a"}\nnot json\n{"id":"b"}\n')
        with pytest.raises(JournalError, match=":2:"):
            read_journal(path)

    def test_sigkill_mid_campaign_loses_no_finished_record(self, tmp_path):
        """A writer SIGKILLed while appending leaves every acknowledged record readable."""
        path = tmp_path / JOURNAL
        script = textwrap.dedent(
            f"""
            import sys
            from chaos.journal import Journal
            j = Journal({str(path)!r})
            i = 0
            while True:
                i += 1
                j.append({{"id": f"case-{{i}}", "payload": "y" * 5000}})
                print(i, flush=True)
            """
        )
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        acknowledged = 0
        for line in proc.stdout:
            acknowledged = int(line)
            if acknowledged >= 30:
                break
        proc.kill()
        proc.wait()
        proc.stdout.close()
        done = read_journal(path)
        assert all(f"case-{i}" in done for i in range(1, acknowledged + 1))
        with Journal(path) as j:
            assert j.append({"id": "after-restart"})
        assert len(read_journal(path)) == len(done) + 1


class TestCampaignFile:
    def test_round_trip(self, tmp_path):
        """campaign.json reads back what was written."""
        params = {"mode": "random", "seed": 7, "scenarios": ["a.toml"]}
        write_campaign(tmp_path, params)
        assert read_campaign(tmp_path) == params
        assert not list(tmp_path.glob(".*.tmp"))

    def test_missing_directory_is_one_clear_error(self, tmp_path):
        """A directory without campaign.json is not a campaign: JournalError names the file."""
        with pytest.raises(JournalError, match="not a campaign directory"):
            read_campaign(tmp_path)

    def test_not_an_object(self, tmp_path):
        """campaign.json holding something else than an object is refused."""
        (tmp_path / "campaign.json").write_text(json.dumps([1]))
        with pytest.raises(JournalError, match="object"):
            read_campaign(tmp_path)
