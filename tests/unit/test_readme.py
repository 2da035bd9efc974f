"""The README and docs/ say only what exists: every `make` target and variable they show is the Makefile's,
every `rayfleet` verb is the CLI's, every relative link leads to a file (and heading); the README stays short,
and docs/makefile.md lists every documented target."""

from __future__ import annotations

import argparse
import fnmatch
import re
import shlex
from pathlib import Path

import pytest

from rayfleet.cli.main import parser as cli_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 250
BAR = "\u00a6"  # stands in for a table cell's `\\|` while the shell lexer reads it
PLACEHOLDER = "\u2039\u203a"  # stands in for `<run>`, `<bucket>`: any value
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}  # ```text (diagrams), ```yaml, ```python are not commands


# --- what the Makefile and the CLI offer ---------------------------------------------------------------------


def makefile_text() -> str:
    return (REPO / "Makefile").read_text().replace("\\\n", " ")  # continued lines joined


def makefile_targets() -> set[str]:
    """Every target a rule names (`a b: deps`), not variable assignments (`A := b`, `A ?= b`)."""
    targets: set[str] = set()
    for line in makefile_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.$()/-][^:=#\t]*?)\s*::?(?![=])", line)
        if m and not line.startswith("\t"):
            targets |= {t for t in m.group(1).split() if re.fullmatch(r"[a-z][a-z0-9-]*", t)}
    return targets


def documented_targets() -> set[str]:
    """The targets `make help` lists: those with a `## ` description."""
    return set(re.findall(r"^([a-z][a-z0-9-]*):.*?## ", makefile_text(), flags=re.M))


def makefile_variables() -> set[str]:
    text = makefile_text()
    used = set(re.findall(r"\$[({]([A-Z_][A-Z0-9_]*)[)}]", text))  # $(VAR), $(if $(VAR),...), ${VAR}
    assigned = set(re.findall(r"^(?:export\s+|override\s+)?([A-Z_][A-Z0-9_]*)\s*[?:+]?=", text, flags=re.M))
    origin = set(re.findall(r"\$\(origin ([A-Z_][A-Z0-9_]*)\)", text))
    return used | assigned | origin


def cli_verbs() -> dict[str, set[str]]:
    """verb -> its actions (`cluster up`, `images build`; empty when it has none), from the parser `rayfleet` runs."""
    sub = next(a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        verb: next((set(a.choices) for a in p._actions if not a.option_strings and a.choices), set())
        for verb, p in sub.choices.items()
    }


# --- what the documents show ---------------------------------------------------------------------------------


def code_of(text: str) -> list[str]:
    """The command-like text of a Markdown file: each line of a fenced block, and each inline code span."""
    pieces, fence = [], None  # None outside a block, else its language ("" when none is named)
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = line.strip()[3:].strip() if fence is None else None
            continue
        if fence is None:
            pieces += re.findall(r"`([^`]+)`", line)
        elif fence in SHELL_FENCES:
            pieces.append(line)
    return pieces


def commands(piece: str, program: str) -> list[list[str]]:
    """The argument lists of each `program ...` command in a piece of shell (comments, pipes and `;` end one)."""
    piece = re.sub(r"<[^<>]*>", PLACEHOLDER, piece.replace("\\|", BAR))
    lexer = shlex.shlex(piece, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote in prose: take the words as they are
        tokens = piece.split()
    found, current, at_start = [], None, True
    for token in tokens:
        if re.fullmatch(r"[;&|()]+", token):
            current, at_start = None, True
            continue
        token = token.replace(BAR, "|")  # a table cell's escaped bar: alternatives, `NODE=head\\|worker-N`
        if token.startswith("[") and current is not None:  # `[RUNS="b c"]`: an optional argument
            token = token[1:].removesuffix("]")
        if current is not None:
            current.append(token)
        elif at_start and (token == program or token.endswith("/" + program)):
            current = []
            found.append(current)
        elif at_start and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            continue  # VAR=value before the command: the environment, not make's
        else:
            at_start = False
    return found


def make_commands(path: Path) -> list[list[str]]:
    return [c for piece in code_of(path.read_text()) for c in commands(piece, "make")]


def rayfleet_commands(path: Path) -> list[list[str]]:
    return [c for piece in code_of(path.read_text()) for c in commands(piece, "rayfleet")]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6}\s+(.*?)\s*$", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return found


def links(path: Path) -> list[str]:
    text, fenced, out = path.read_text(), False, []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out += re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line))
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- the tests -----------------------------------------------------------------------------------------------


def test_the_documents_exist():
    names = {rel(p) for p in DOCS}
    assert {"README.md", "docs/DESIGN.md", "docs/makefile.md"} <= names


def test_readme_is_short():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines < README_MAX_LINES, (
        f"README.md has {lines} lines; keep it under {README_MAX_LINES} (move reference to docs/)"
    )


def test_every_make_target_shown_exists():
    targets, wrong = makefile_targets(), []
    for path in DOCS:
        for args in make_commands(path):
            for token in args:
                if token.startswith("-") or "=" in token or PLACEHOLDER in token or "." in token:
                    continue  # a flag of make, a variable, a placeholder, a file
                if "*" in token or "?" in token:
                    ok = any(fnmatch.fnmatch(t, token) for t in targets)
                else:
                    ok = token in targets
                if not ok:
                    wrong.append(f"{rel(path)}: make {' '.join(args)}: no target {token!r} in the Makefile")
    assert not wrong, "\n".join(dict.fromkeys(wrong))


def test_every_make_variable_shown_is_the_makefiles():
    variables, wrong = makefile_variables(), []
    for path in DOCS:
        for args in make_commands(path):
            for token in args:
                m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=.*", token, flags=re.S)
                if m and m.group(1) not in variables:
                    wrong.append(f"{rel(path)}: make {' '.join(args)}: the Makefile never uses {m.group(1)}")
    assert not wrong, "\n".join(dict.fromkeys(wrong))


def test_every_rayfleet_verb_shown_exists():
    verbs, wrong = cli_verbs(), []
    for path in DOCS:
        for args in rayfleet_commands(path):
            if not args or not re.fullmatch(r"[a-z][a-z-]*", args[0]):
                continue  # `rayfleet --help`, `rayfleet VERB`, a placeholder
            verb = args[0]
            if verb not in verbs:
                wrong.append(f"{rel(path)}: rayfleet {' '.join(args)}: no verb {verb!r}")
                continue
            if verbs[verb] and len(args) > 1 and re.fullmatch(r"[a-z][a-z|-]*", args[1]):
                for sub in args[1].split("|"):
                    if sub not in verbs[verb]:
                        wrong.append(f"{rel(path)}: rayfleet {verb} {sub}: not one of {sorted(verbs[verb])}")
    assert not wrong, "\n".join(dict.fromkeys(wrong))


def test_every_relative_link_leads_to_a_file():
    wrong = []
    for path in DOCS:
        for link in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", link):
                continue  # https:, mailto:
            target, _, anchor = link.partition("#")
            file = (path.parent / target).resolve() if target else path
            if not file.is_relative_to(REPO) or file.is_relative_to(REPO / "shared"):
                wrong.append(f"{rel(path)}: {link} leads outside the repository")
            elif not file.exists():
                wrong.append(f"{rel(path)}: {link}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                wrong.append(f"{rel(path)}: {link}: no heading #{anchor} in {rel(file)}")
    assert not wrong, "\n".join(dict.fromkeys(wrong))


def test_the_target_table_lists_every_documented_target():
    text = makefile_text()
    phony = set(" ".join(re.findall(r"^\.PHONY:(.*)$", text, flags=re.M)).split())
    table = (REPO / "docs" / "makefile.md").read_text()
    targets = documented_targets()
    promised = {"help", "setup", "data", "text-data", "demo", "run", "train-ddp", "train-fsdp", "runs", "logs"}
    promised |= {"queue", "cancel", "plot", "tensorboard", "build", "push", "check", "plan", "deploy", "status"}
    promised |= {"exec", "stop", "start", "clean", "serve", "test", "test-quick", "lint", "format", "bench"}
    assert promised <= targets and len(targets) <= 32  # the promised ones, and about as many in all
    assert targets <= phony
    missing = sorted(t for t in targets if f"| `{t}` |" not in table)
    assert not missing, f"docs/makefile.md's target table lacks {missing}"


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make test" in ci
    assert "make demo" in readme and "make test" in readme


def test_the_readme_leaves_the_demo_transcript_to_the_lead():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## What `make demo` prints", 1)[1].split("\n## ", 1)[0]
    assert section.strip() == "<!-- demo transcript: the lead pastes a fresh one -->" or "```" in section


# --- the parsers themselves ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("piece", "expected"),
    [
        ("make deploy TFVARS=one-group.tfvars  # one group", [["deploy", "TFVARS=one-group.tfvars"]]),
        ('make train-ddp ARGS="epochs=3 lr=1e-3" SET="a=1"', [["train-ddp", "ARGS=epochs=3 lr=1e-3", "SET=a=1"]]),
        ("make status; make logs RUN=r && make stop", [["status"], ["logs", "RUN=r"], ["stop"]]),
        ("EFA_INSTALLER_VERSION=1.2 make build IMAGES=ray-worker", [["build", "IMAGES=ray-worker"]]),
        ("make exec NODE=head\\|worker-N", [["exec", "NODE=head|worker-N"]]),
        ("the make reports 2", []),
        ('make tensorboard RUN=a [RUNS="b c"] [BUCKET=b]', [["tensorboard", "RUN=a", "RUNS=b c", "BUCKET=b"]]),
        ("make serve RUN=<fsdp run>", [["serve", "RUN=\u2039\u203a"]]),
    ],
)
def test_commands_are_read_as_a_shell_would(piece, expected):
    assert commands(piece, "make") == expected


def test_targets_and_variables_are_read_from_the_rules():
    assert {"help", "demo", "deploy", "clean", "train-ddp"} <= makefile_targets()
    assert "PY" not in makefile_targets() and "IMAGE_TAG" not in makefile_targets()
    assert {"RUN", "TFVARS", "DELETE_RESULTS", "FOLLOW", "RECIPE"} <= makefile_variables()
    assert {"run", "deploy", "cluster", "images"} <= set(cli_verbs()) and "up" in cli_verbs()["cluster"]


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Spot, preemption and autostop\n```\n# not a heading\n```\n## What `make demo` prints\n")
    assert anchors(page) == {"spot-preemption-and-autostop", "what-make-demo-prints"}
