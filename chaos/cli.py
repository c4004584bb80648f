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


def _campaign_usage(lines: list[str]) -> None:
    """One line per problem on stderr, exit 2 (the campaign's usage errors)."""
    for line in lines:
        click.echo(line, err=True)
    raise SystemExit(2)


@main.command("campaign")
@click.argument("scenarios", nargs=-1, type=click.Path(path_type=str))
@click.option("--mode", type=click.Choice(["exhaustive", "random"]), default="exhaustive", show_default=True,
              help="exhaustive: every kill point the baseline reaches (+ pinned schedules); random: seeded schedules")
@click.option("--depth", type=click.IntRange(1, 2), default=1, show_default=True,
              help="2: also every kill point reached during the recovery after each first kill")
@click.option("--faults", default="kill", show_default=True, metavar="ACTIONS",
              help="exhaustive fault actions, comma-separated: kill,int,ioerror,dresume,torn,powerloss or all")
@click.option("--seed", type=int, help="random mode: the seed (a case is reproducible from seed and index)")
@click.option("--cases", "case_count", type=click.IntRange(min=1), help="random mode: number of cases")
@click.option("--duration", metavar="DURATION", help="random mode: run for this long (e.g. 30m)")
@click.option("--max-faults", type=click.IntRange(min=1), default=3, show_default=True,
              help="random mode: at most K faults per case")
@click.option("--budget", metavar="DURATION", help="stop starting cases after this long (e.g. 2h); --resume continues")
@click.option("-j", "--workers", type=click.IntRange(min=0), default=0, help="parallel workers [default: CPUs]")
@click.option("--shard", metavar="K/N", help="run the K-th of N deterministic parts (by first fault)")
@click.option("--fail-fast", is_flag=True, help="stop starting cases after the first reproduced failure")
@click.option("--agent", "agent_config", type=click.Path(path_type=str), metavar="CONFIG.toml",
              help="campaign another agent (command, env, protocol) instead of the bundled one")
@click.option("--agent-bugs", default="", metavar="NAMES", help="AGENT_BUGS for the cases (never the baseline)")
@click.option("--tag", "tags", multiple=True, help="only scenarios with this tag (repeatable: any of them)")
@click.option("--list", "list_only", is_flag=True, help="print the case ids and exit")
@click.option("--nightly", is_flag=True, help="preset: the full library, every fault action, depth 2")
@click.option("--name", default="", help="campaign name: reports/<name>/ [default: campaign-<UTC time>]")
@click.option("--out", default="reports", show_default=True, type=click.Path(path_type=str),
              help="where campaign directories go")
@click.option("--cache", type=click.Path(path_type=str), help="kill-point cache [default: <out>/.cache]")
@click.option("--resume", "resume_dir", type=click.Path(path_type=str), metavar="DIR",
              help="continue the campaign in DIR (finished cases are not run again)")
@click.option("--keep", type=click.Choice(["failing", "all", "none"]), default="failing", show_default=True,
              help="which case directories to keep")
@click.option("--no-shrink", is_flag=True, help="report failures without shrinking their schedules")
@click.option("--case-timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="wall-clock limit per case, seconds")
def campaign_command(scenarios, mode, depth, faults, seed, case_count, duration, max_faults, budget, workers, shard,
                     fail_fast, agent_config, agent_bugs, tags, list_only, nightly, name, out, cache, resume_dir,
                     keep, no_shrink, case_timeout) -> None:
    """Run many cases in parallel: with no arguments, every bundled scenario at every kill point (exhaustive, depth 1).

    Exit 0 when every case held (flaky cases are reported, not failed), 1 when a failure reproduced, a baseline
    did not pass or the harness could not run a case, 2 on usage errors, 130 when interrupted.
    """
    import sys
    from pathlib import Path

    from agent.bugs import UnknownBugError, parse_bugs
    from chaos import campaign as cp

    try:
        bugs = sorted(parse_bugs(agent_bugs))
    except UnknownBugError as exc:
        _campaign_usage([f"--agent-bugs: {exc}"])
    try:
        if resume_dir is None:
            families = list(cp.FAULT_FAMILIES) if faults.strip() == "all" else [
                f.strip() for f in faults.split(",") if f.strip()]
            options = cp.CampaignOptions(
                scenarios=list(scenarios), tags=list(tags), mode=mode, depth=depth, faults=families, seed=seed,
                cases=case_count, duration=cp.parse_duration(duration) if duration else None, max_faults=max_faults,
                budget=cp.parse_duration(budget) if budget else None, workers=workers, shard=shard,
                fail_fast=fail_fast, name=name, out=out, cache=cache, keep=keep, shrink=not no_shrink,
                case_seconds=case_timeout,
                agent=cp.agent_from_config(agent_config, bugs) if agent_config else cp.bundled_agent(bugs),
            )
            if nightly:
                cp.nightly(options)
        else:
            options = cp.CampaignOptions()
        reporter = cp.RichReporter() if sys.stderr.isatty() and not list_only else cp.Reporter(
            lambda line: click.echo(line, err=True))
        result = cp.run_campaign(options, reporter=reporter, command=["chaos", *sys.argv[1:]], resume=resume_dir,
                                 list_only=list_only, workers=workers or None)
    except cp.CampaignError as exc:
        _campaign_usage(exc.messages)
    if list_only:
        for case_id in result:
            click.echo(case_id)
        return
    directory = Path(result.shards[0]) if result.shards else Path(resume_dir or Path(options.out) / result.name)
    for line in cp.summary_lines(result, directory):
        click.echo(line)
    if result.interrupted:
        raise SystemExit(130)
    raise SystemExit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
