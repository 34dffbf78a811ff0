"""Each `memstream` command's handler lives in the services/cli module named after the command.

The few modules that hold more than one command are named here, as in services/cli/app.py.
"""

from __future__ import annotations

import argparse

from services.cli.app import build_parser

GROUPED = {"up": "stack", "worker": "stack", "serve": "stack", "forget-user": "memories", "generation": "rebuild"}


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """(command words, handler module) for every command that runs something."""
    found = []
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subparsers:
        for name, child in action.choices.items():
            found += leaves(child, (*path, name))
    if not subparsers:
        found.append((path, parser.get_default("func").__module__))
    return found


def test_every_command_is_found_in_the_module_named_after_it() -> None:
    commands = leaves(build_parser())
    assert len(commands) > 20
    for words, module in commands:
        top = words[0]
        assert module == "services.cli." + GROUPED.get(top, top.replace("-", "_")), words
