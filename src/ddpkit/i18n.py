"""Translations through standard gettext: catalogs in ddpkit/locale/<lang>/LC_MESSAGES/.

English is written in the code and is the fallback for anything a catalog lacks. The language
comes from `--lang`, else the POSIX locale variables (LC_ALL, LC_MESSAGES, LANG, and GNU's
LANGUAGE list), so a Chinese locale (zh_CN, and zh_TW/zh_HK/zh_SG, which fall back to the one
Chinese catalog we ship) gets Chinese. Machine-facing output (JSON, ids, commands) never goes
through here. Loading a catalog costs a file read (~1 ms): no work happens at import.
"""

from __future__ import annotations

import gettext as _gettext
from pathlib import Path
from typing import Mapping

DOMAIN = "ddpkit"
LOCALEDIR = Path(__file__).resolve().parent / "locale"
LANGUAGES = ("en", "zh_CN")  # what --lang accepts (zh is an alias of zh_CN)

_state: dict = {"lang": None, "tr": None}


def normalise(lang: str) -> str:
    """'zh_TW.UTF-8' -> 'zh_CN', 'zh' -> 'zh_CN', 'en_US' / 'C' / '' -> 'en'."""
    code = lang.split(".")[0].split("@")[0].replace("-", "_").lower()
    return "zh_CN" if code == "zh" or code.startswith("zh_") else "en"


def detect(environ: Mapping[str, str]) -> str:
    """The language of this locale, by POSIX precedence (LC_ALL > LC_MESSAGES > LANG); GNU's
    LANGUAGE list goes first unless the locale is C/POSIX, as gettext itself does."""
    locale = next((environ[v] for v in ("LC_ALL", "LC_MESSAGES", "LANG") if environ.get(v)), "")
    if locale not in ("", "C", "POSIX") and environ.get("LANGUAGE"):
        for item in environ["LANGUAGE"].split(":"):
            if item:
                return normalise(item)
    return normalise(locale)


def set_language(lang: str | None) -> str:
    """Use `lang` ('en', 'zh', 'zh_CN', a locale name) from now on; None: from the environment."""
    import os

    chosen = normalise(lang) if lang else detect(os.environ)
    if chosen != _state["lang"]:
        _state["lang"] = chosen
        _state["tr"] = None if chosen == "en" else _gettext.translation(
            DOMAIN, str(LOCALEDIR), languages=[chosen], fallback=True)
    return chosen


def language() -> str:
    if _state["lang"] is None:
        set_language(None)
    return _state["lang"]


def _tr() -> _gettext.NullTranslations | None:
    if _state["lang"] is None:
        set_language(None)
    return _state["tr"]


def _(message: str) -> str:
    """The translation of `message` in the current language (the message itself in English)."""
    tr = _tr()
    return tr.gettext(message) if tr is not None and message else message


def ngettext(singular: str, plural: str, n: int) -> str:
    tr = _tr()
    if tr is None:
        return singular if n == 1 else plural
    return tr.ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Marks a message for extraction where it is defined; translate it with _() where shown."""
    return message
