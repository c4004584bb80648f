"""The one status vocabulary of a finished case, compared everywhere and never re-spelled (Hypothesis's ``Status``).

A ``StrEnum``: its members *are* their strings, so journal lines, ``result.json``, ``summary.json`` and JUnit keep
the same JSON, and a record read back from disk (plain strings) compares equal to the members.

Not here: the supervisor's verdicts (``chaos.records``: exit:N, hang, protocol-error…), which say how the processes
ended; a status says what the campaign concluded about the case.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PASS = "pass"  # every invariant held
    FAIL = "fail"  # an invariant failed, and failed again on the re-run
    FLAKY = "flaky"  # an invariant failed once but held on the re-run: reported apart, not as a failure
    NOT_REACHED = "not-reached"  # the schedule's kill point was never reached (coverage, not a pass)
    ERROR = "error"  # the harness could not run the case at all (launch error, a worker died)
    # A failure (or a flaky one) of a scenario that declares ``expect_failure``: a confirmed finding pinned as a
    # regression scenario — shown with its reason, not counted as a failure (pytest's xfail).
    EXPECTED = "expected-failure"


PASS, FAIL, FLAKY, NOT_REACHED, ERROR = Status.PASS, Status.FAIL, Status.FLAKY, Status.NOT_REACHED, Status.ERROR
EXPECTED = Status.EXPECTED
STATUSES = tuple(Status)
