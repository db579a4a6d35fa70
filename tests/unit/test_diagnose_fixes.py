"""A fix that names a ddpkit command must name one that exists, with options it has: 343
signatures' fixes were written by many hands, and a user pastes them as they are."""

import argparse
import re

from ddpkit.cli.main import COMMANDS, build_parser
from ddpkit.troubleshoot.diagnose.kb import hang_causes, signatures, stack_causes

SPAN = re.compile(r"`([^`]*\bddpkit [^`]*)`")


def _options(parser: argparse.ArgumentParser) -> tuple[set[str], dict]:
    opts, subs = set(), {}
    for action in parser._actions:
        opts.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            subs.update(action.choices)
    return opts, subs


def test_fixes_name_only_real_ddpkit_commands_and_options():
    known = {}
    checked = 0
    # the causes of a hang and what a hung run's stacks say have fixes too
    for sig in list(signatures()) + list(hang_causes()) + list(stack_causes()):
        for span in SPAN.findall(sig.fix + " " + sig.explanation):
            for cmd in re.findall(r"\bddpkit ([a-z]+)((?: [^;|&]*)?)", span):
                name, rest = cmd
                assert name in COMMANDS, (sig.title, span)
                if name not in known:
                    known[name] = _options(build_parser(name)[0])
                opts, subs = known[name]
                words = rest.split()
                if words and words[0] in subs:
                    opts = opts | _options(subs[words[0]])[0]
                for word in words:
                    if word == "--" or word.endswith((".py", ".sh")):
                        break  # the script's own arguments follow
                    if word.startswith("--"):
                        assert word.split("=")[0] in opts, (sig.title, span, word)
                checked += 1
    assert checked > 50
