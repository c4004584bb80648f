"""``chaos`` command line: one click group, one command per verb users think in (validate, run, campaign, …).

Every command imports its heavy modules (pydantic via ``chaos.scenario``, the supervisor, rich) inside its body, so
``chaos --help`` and the commands that do not need them stay fast. Bad input never gives a traceback: it gives
one clear line per problem and exit code 2.
"""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """killpoint's crash-injection chaos harness."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
def validate(paths: tuple[str, ...]) -> None:
    """Check scenario files (files or directories, recursively *.toml); one `file:line: field: message` per problem."""
    from chaos.scenario import load_scenarios

    scenarios, problems = load_scenarios(list(paths))
    for line in problems:
        click.echo(line)
    if problems:
        click.echo(f"{len(problems)} problem(s) in scenario files", err=True)
        raise SystemExit(2)
    click.echo(f"OK: {len(scenarios)} scenario(s) valid")


if __name__ == "__main__":
    main()
