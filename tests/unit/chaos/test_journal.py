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
    LOCK,
    CampaignLock,
    CampaignLockedError,
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

    def test_a_case_whose_worker_died_runs_again_on_resume_and_its_new_line_wins(self, tmp_path):
        """A worker-died error line does not make its case done: a reopened journal takes the case's next line."""
        path = tmp_path / JOURNAL
        with Journal(path) as j:
            assert j.append(record(1, status="error", verdict="died"))
            assert j.append(record(2, status="error", verdict="launch-error"))
        assert read_journal(path)[record(1)["id"]]["verdict"] == "died"  # stopped before the re-run: still an error
        with Journal(path) as j:
            assert record(1)["id"] not in j and record(2)["id"] in j and len(j) == 1
            assert j.append(record(1))
            assert not j.append(record(1, status="fail"))
        assert read_journal(path)[record(1)["id"]]["status"] == "pass"
        assert read_journal(path)[record(2)["id"]]["verdict"] == "launch-error"  # any other error is a finished case

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

    def test_a_corrupt_middle_line_says_how_to_repair_it(self, tmp_path):
        """The error names the line and both repairs: delete that line, or truncate to the bytes before it."""
        path = tmp_path / JOURNAL
        path.write_bytes(b'{"id":"a"}\n{"id":"b"}\n{"id": tor\n{"id":"c"}\n')
        with pytest.raises(JournalError) as caught:
            read_journal(path)
        message = str(caught.value)
        assert "\n" not in message
        assert f"{path}:3: journal line 3 is not JSON" in message
        assert f"sed -i '3d' {path}" in message and f"truncate -s 22 {path}" in message
        os.truncate(path, 22)  # the advice works: the two lines before it read back
        assert list(read_journal(path)) == ["a", "b"]

    def test_a_corrupt_last_line_suggests_truncating(self, tmp_path):
        """A complete but unparsable last line is repaired by truncating to the lines before it."""
        path = tmp_path / JOURNAL
        path.write_bytes(b'{"id":"a"}\n[1]\n')
        with pytest.raises(JournalError, match=f"not a case record.*truncate -s 11 {path}$"):
            read_journal(path)

    def test_a_deeply_nested_line_is_a_journal_error(self, tmp_path):
        """A line nested beyond the JSON parser's recursion limit is reported like any corrupt line."""
        path = tmp_path / JOURNAL
        path.write_bytes(b"[" * 100000 + b"]" * 100000 + b"\n")
        with pytest.raises(JournalError, match=":1: journal line 1 is not JSON"):
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


class TestAppendMode:
    def test_two_open_journals_interleave_whole_lines(self, tmp_path):
        """Two journals open on one file append after each other's lines instead of overwriting them (O_APPEND)."""
        path = tmp_path / JOURNAL
        first, second = Journal(path), Journal(path)
        try:
            for i in range(1, 6):
                first.append(record(i))
                second.append(record(100 + i))
        finally:
            first.close()
            second.close()
        assert len(read_journal(path)) == 10

    def test_two_processes_appending_lose_no_line(self, tmp_path):
        """Two processes appending at once leave every one of their lines whole in the file."""
        path = tmp_path / JOURNAL
        # Both open the journal first, then append together: opening repairs a torn tail, which a concurrent
        # append would look like (only the campaign lock makes opening safe); appending must be safe regardless.
        script = textwrap.dedent(
            f"""
            import sys
            from chaos.journal import Journal
            with Journal({str(path)!r}) as j:
                print("open", flush=True)
                sys.stdin.readline()
                for i in range(300):
                    j.append({{"id": f"{{sys.argv[1]}}-{{i}}", "payload": sys.argv[1] * 3000}})
            """
        )
        procs = [subprocess.Popen([sys.executable, "-c", script, tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True) for tag in "ab"]
        for proc in procs:
            assert proc.stdout.readline() == "open\n"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.close()
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        for proc in procs:
            proc.stdout.close()
        records, end = read_lines(path)
        assert end == path.stat().st_size and len(records) == 600
        assert {r["id"] for r in records} == {f"{t}-{i}" for t in "ab" for i in range(300)}


class TestCampaignLock:
    HOLD = textwrap.dedent(
        """
        import sys, time
        from chaos.journal import CampaignLock
        with CampaignLock(sys.argv[1], ["chaos", "campaign", "--name", "first"]):
            print("held", flush=True)
            time.sleep(60)
        """
    )

    def hold(self, directory):
        """A real process holding the lock of ``directory`` (started, and known to hold it, on return)."""
        proc = subprocess.Popen([sys.executable, "-c", self.HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "held\n"
        return proc

    def test_a_second_holder_is_refused_naming_the_first(self, tmp_path):
        """While another process holds the lock, acquiring it fails with one line naming that process."""
        proc = self.hold(tmp_path)
        try:
            with pytest.raises(CampaignLockedError) as caught:
                CampaignLock(tmp_path).acquire()
            message = str(caught.value)
            assert "\n" not in message and f"pid {proc.pid}" in message
            assert "another campaign is running" in message and "chaos campaign --name first" in message
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()

    def test_the_lock_dies_with_its_holder(self, tmp_path):
        """A SIGKILLed holder leaves no stale lock: the next campaign acquires it at once."""
        proc = self.hold(tmp_path)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        with CampaignLock(tmp_path, ["me"]) as lock:
            assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
            assert lock.path == tmp_path / LOCK

    def test_released_lock_can_be_taken_again(self, tmp_path):
        """Releasing the lock lets the same process (or another) take it again; the file then holds nothing."""
        with CampaignLock(tmp_path):
            pass
        assert (tmp_path / LOCK).read_text() == ""
        with CampaignLock(tmp_path):
            with pytest.raises(CampaignLockedError):
                CampaignLock(tmp_path).acquire()  # a second open file description is a second holder
