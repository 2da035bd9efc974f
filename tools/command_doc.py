"""docs/command.md, generated from the one parser of the `rayfleet` verbs (rayfleet/cli/main.py), so that the
page cannot drift from the command: tests/unit/cli/test_command_doc.py fails when it is not current.

    python -m tools.command_doc           # write docs/command.md
    python -m tools.command_doc --check   # exit 1 when docs/command.md is not what the parser says
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rayfleet.cli import main as cli

PAGE = Path(__file__).resolve().parents[1] / "docs" / "command.md"
HEAD = """# The rayfleet command

Generated from the parser (`python -m tools.command_doc`; rayfleet/cli/main.py): edit that, not this page.
`rayfleet --help` lists the verbs, `rayfleet VERB --help` each one's flags. Two verbs are groups: `rayfleet deploy`
applies the deployment and has the steps of its life (`rayfleet deploy plan|check|down|stop|start`), `rayfleet runs`
lists runs and has views of them (`rayfleet runs plot|tensorboard`); each step has its own flags, given after
it. The Makefile's run, cluster, deployment and serving targets are aliases of these verbs
([makefile.md](makefile.md)).
"""
EXIT_CODES = """## Exit codes

{epilog}

0 done; 1 the work failed (an AWS call, the local cluster; `rayfleet run` and `rayfleet launch` pass a job's
own non-zero exit code through); 2 bad input, refused before anything happened (a config, a recipe, an
argument, an old name that was replaced); 130 interrupted. make reports every failure of a target as 2, while
`rayfleet` gives the exact code: a script that needs the job's code calls `rayfleet`, not `make`.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _verbs(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each verb, and each step of a group (`deploy plan`, `runs plot`) after its group."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return {}
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    verbs = {}
    for name, p in sub.choices.items():
        verbs[f"{prefix}{name}"] = (helps.get(name, ""), p)
        verbs.update(_verbs(p, f"{prefix}{name} "))
    return verbs


def _arguments(verb: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in verb._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        choices = f" ({_cell(' | '.join(map(str, action.choices)))})" if action.choices else ""
        rows.append(f"| {names}{choices} | {_cell(action.help or '')} |")
    return rows


def render() -> str:
    parser = cli.parser()
    out = [HEAD, "## Verbs", "", "| verb | what |", "|---|---|"]
    verbs = _verbs(parser)
    out += [
        f"| [`rayfleet {name}`](#rayfleet-{name.replace(' ', '-')}) | {_cell(text)} |"
        for name, (text, _) in verbs.items()
    ]
    flags = [line.strip() for line in cli.__doc__.splitlines() if line.startswith("    ")]  # the docstring's table
    out += ["", "## Flags that mean one thing everywhere", "", "```text", *flags, "```", ""]
    for name, (text, verb) in verbs.items():
        usage = " ".join(verb.format_usage().split()).removeprefix("usage: ")
        out += [f"### rayfleet {name}", "", _cell(text), "", "```text", usage, "```", ""]
        rows = _arguments(verb)
        if rows:
            out += ["| argument | meaning |", "|---|---|", *rows, ""]
    out.append(EXIT_CODES.format(epilog=parser.epilog))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if PAGE.read_text() != text:
            print(f"{PAGE} is not current: python -m tools.command_doc writes it", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
