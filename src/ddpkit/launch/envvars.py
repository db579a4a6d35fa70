"""What a run takes from this shell's environment, and what it hides when it shows a command.

Pure: the variables forwarded to every node (the known prefixes, -x NAME, --env NAME=VALUE) and
the masking of secret values in --dry-run, run records and summaries (README "Security")."""

from __future__ import annotations

import re
from typing import Mapping

from ddpkit.errors import UsageError
from ddpkit.i18n import _

# Forwarded to every node by default: what NCCL, torch, Gloo, OpenMP and Python read.
FORWARD_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "OMP_", "PYTHON")
# Never forwarded even when they match a prefix: they describe this process, not the run.
NEVER_FORWARD = ("PYTHONHOME", "PYTHONEXECUTABLE", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
# Names that hold secrets: *TOKEN*, *SECRET*, *PASSWORD*, *CREDENTIAL*, *PRIVATE*, and KEY or AUTH
# as a word of the name (WANDB_API_KEY, SSH_KEY, --encryption-key, AUTH_HEADER; not KEYBOARD).
SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|(?:^|_)(?:API_?)?KEY(?:$|_)|(?:^|_)AUTH(?:$|_)",
                    re.I)

def mask_value(name: str, value: str) -> str:
    return "****" if SECRET.search(name) and value else value


def mask_args(argv: list[str]) -> list[str]:
    """Hide values of arguments named like secrets: --hf-token X, --api-key=X."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append("****")
            hide_next = False
            continue
        hide_next = False
        flag, eq, _unused = arg.partition("=")
        name = flag.lstrip("-").replace("-", "_")
        if arg.startswith("-") and SECRET.search(name) and not name.lower().startswith("no_"):
            if eq:
                out.append(f"{flag}=****")
            else:
                out.append(arg)
                hide_next = True  # the value follows, unless the next word is another flag
            continue
        out.append(arg)
    return out


def forwarded_env(environ: Mapping[str, str], names: tuple[str, ...] = (),
                  pairs: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The variables a run gets from here: the known prefixes, -x NAME, --env NAME=VALUE."""
    env = {k: v for k, v in environ.items()
           if k.startswith(FORWARD_PREFIXES) and k not in NEVER_FORWARD}
    for name in names:
        if "=" in name:  # mpirun allows -x NAME=VALUE too
            key, _unused, value = name.partition("=")
            env[key] = value
        elif name in environ:
            env[name] = environ[name]
        else:
            raise UsageError(_('-x {name}: {name} is not set here').format(name=name),
                             _('export {name}=... first, or use --env {name}=VALUE').format(name=name))
    for key, value in pairs:
        env[key] = value
    return env


def parse_env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        raise UsageError(_("--env '{text}' is not NAME=VALUE").format(text=text), _('e.g. --env NCCL_DEBUG=INFO'))
    return key, value
