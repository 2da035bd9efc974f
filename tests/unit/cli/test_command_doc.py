"""docs/command.md is what the one parser of the verbs says (tools/command_doc.py generates it)."""

from __future__ import annotations

from tools import command_doc


def test_the_command_page_is_generated_from_the_parser_and_current():
    text = command_doc.render()
    assert command_doc.PAGE.read_text() == text, "docs/command.md is not current: python -m tools.command_doc"
    for verb in ("run", "runs", "runs plot", "logs", "queue", "cancel", "deploy", "deploy down", "cluster", "exec"):
        assert f"### rayfleet {verb}\n" in text  # every verb has its section, with its own usage line
    assert "`--on` (auto \\| local \\| ecs)" in text and "`--node`" in text
