"""``python -m agent …``: the agent's command line (see ``agent.cli`` for commands and exit codes).

Kept to two lines so that ``python -X importtime -m agent …`` measures the CLI, not this shim.
"""

import sys

from agent.cli import main

sys.exit(main())
