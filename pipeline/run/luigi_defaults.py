"""The package's Luigi defaults (``luigi_defaults.cfg`` beside this module): the local scheduler, two workers,
``[retcode]``, ``[resources] gpu`` and the log level, in any folder the pipeline is started from, under every
setting of the user's.

Luigi reads its files once, in the order of ``LuigiConfigParser._config_paths`` (``/etc/luigi/client.cfg``,
``/etc/luigi/luigi.cfg``, ``./client.cfg``, ``./luigi.cfg``, then ``LUIGI_CONFIG_PATH``'s file), a later file
winning key by key, and the command line over all of them. Importing ``pipeline`` (which ``luigi --module
pipeline`` does before it reads ``[core]`` or ``[retcode]``) calls :func:`apply_package_defaults`: by then every
file of the user's has been read, so the package sets only the keys none of them set, the lowest layer. Adding
the package's file to ``_config_paths`` instead would mean reloading the live parser (re-reading every file over
values set in code), would let an underscored key of ours beat a user's dashed spelling of it (Luigi reads the
underscored spelling first) and would not reach the TOML parser (``LUIGI_CONFIG_PARSER=toml``).

``[core] local_scheduler = true`` is the one conditional default: a user who names a central scheduler (in a file,
or ``--scheduler-host``/``--scheduler-port``/``--scheduler-url`` on the command line) gets it without also
switching the local scheduler off (docs/scaling.md).
"""

from __future__ import annotations

import configparser
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import luigi.configuration
from luigi.configuration import LuigiTomlParser

from common.bounded_json import COMMAND_LINE, NotJsonError, loads_bounded

DEFAULTS_FILE = Path(__file__).with_name("luigi_defaults.cfg")
#: [core] keys (Luigi's and their ``default-`` config spellings) and flags that name a central scheduler
SCHEDULER_KEYS = tuple(
    f"{prefix}scheduler_{part}" for prefix in ("", "default_") for part in ("host", "port", "url")
)
SCHEDULER_FLAGS = ("--scheduler-host", "--scheduler-port", "--scheduler-url")


def package_defaults() -> configparser.ConfigParser:
    """``luigi_defaults.cfg``, read as written (no interpolation)."""
    defaults = configparser.ConfigParser(interpolation=None)
    defaults.optionxform = str  # type: ignore[assignment, method-assign]  # Luigi keeps keys' case
    with DEFAULTS_FILE.open() as file:
        defaults.read_file(file)
    return defaults


def is_set(config: Any, section: str, key: str) -> bool:
    """Whether ``config`` sets ``key`` in either of Luigi's spellings (``log_level`` or ``log-level``)."""
    return any(config.has_option(section, spelling) for spelling in {key, key.replace("_", "-")})


def names_a_scheduler(config: Any, argv: Sequence[str]) -> bool:
    """Whether the user pointed the run at a central scheduler, in a file or on the command line."""
    flagged = any(arg.split("=")[0] in SCHEDULER_FLAGS for arg in argv)
    return flagged or any(is_set(config, "core", key) for key in SCHEDULER_KEYS)


def apply_package_defaults(config: Any = None, argv: Sequence[str] | None = None) -> list[str]:
    """Set each key of ``luigi_defaults.cfg`` that ``config`` (Luigi's, by default) does not set; the keys set,
    as ``section.key``. ``argv``: the command line (``sys.argv``), for the scheduler flags."""
    config = luigi.configuration.get_config() if config is None else config
    argv = sys.argv[1:] if argv is None else argv
    central = names_a_scheduler(config, argv)
    typed = isinstance(config, LuigiTomlParser)  # its values are TOML's types, not text
    applied = []
    defaults = package_defaults()
    for section in defaults.sections():
        for key, value in defaults.items(section):
            if is_set(config, section, key) or ((section, key) == ("core", "local_scheduler") and central):
                continue
            config.set(section, key, _toml_value(value) if typed else value)
            applied.append(f"{section}.{key}")
    return applied


def _toml_value(text: str) -> Any:
    """``2`` -> 2, ``true`` -> True, ``WARNING`` -> "WARNING": a value as the TOML parser would hold it."""
    try:
        return loads_bounded(text, "a Luigi default", COMMAND_LINE)
    except NotJsonError:
        return text
