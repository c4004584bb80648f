"""A preload that, like many libraries, registers an at-fork handler and changes signal dispositions at import (for
tests/integration/test_zygote.py): a forked child must run the handler (``SAW`` is then the pid it ran in) and must
not keep the SIGWINCH handler or the ignored SIGUSR1 (an exec'd child never had them)."""

import os
import signal

SAW: int | None = None


def _after_in_child() -> None:
    global SAW
    SAW = os.getpid()


os.register_at_fork(after_in_child=_after_in_child)
signal.signal(signal.SIGWINCH, lambda signum, frame: None)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
