"""``python -m chaos …``: the same CLI as the ``chaos`` console script (works without the script on PATH)."""

from chaos.cli import main

main()
