"""A preload whose at-fork handler keeps the zygote busy 50 ms after each fork, before it can answer the launch (for
tests/integration/test_process.py): the launch's creation time must be the fork, not the late answer."""

import os
import time

DELAY = 0.05


os.register_at_fork(after_in_parent=lambda: time.sleep(DELAY))
