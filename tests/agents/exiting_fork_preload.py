"""A preload whose at-fork handler raises SystemExit in every child (for tests/integration/test_zygote.py): as with
os.fork, the exception is reported and the child goes on; it must never unwind into the zygote's own loop."""

import os


def _after_in_child() -> None:
    raise SystemExit(3)


os.register_at_fork(after_in_child=_after_in_child)
