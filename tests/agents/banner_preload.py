"""A preload that prints at import and leaves half a line on stderr, unflushed (for tests/integration/test_zygote.py):
none of it may reach a launch's output files, whichever child (a spare forked ahead, or a fork) takes the launch."""

import sys

print("BANNER from the preload's import")
sys.stderr.write("half a line from the preload")
