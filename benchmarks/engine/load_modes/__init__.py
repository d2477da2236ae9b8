"""The ways a run loads a server, one small module each (as the backends are): `concurrency.py`
(a closed-loop sweep), `rate.py` (open-loop request rates, a ramp or a trace replay),
`conversation.py` (multi-turn sessions), `slo.py` and `slo_rate.py` (the highest load within
the SLOs, by concurrency or by request rate).

Adding a mode is one new module in this package: a `LoadMode` subclass (see base.py) with
`@register`. Every module here is imported when the package is, so the run form, the API, the
run service and model, schedules and history know it at once.

    from benchmarks.engine import load_modes
    load_modes.from_arguments("concurrency", concurrency_levels=[1, 8]).describe()   # "c=1,8"
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import (ARGUMENTS, COLUMNS, LOAD_MODES, FieldSpec, Limits, LoadArguments, LoadMode, Problems, SearchMode, UnknownLoadMode, choices,
                   from_arguments, from_columns, get, names, register, search_names, span, unregister)

__all__ = ["ARGUMENTS", "COLUMNS", "DEFAULT", "LOAD_MODES", "FieldSpec", "Limits", "LoadArguments", "LoadMode", "Problems", "SearchMode", "UnknownLoadMode",
           "choices", "from_arguments", "from_columns", "get", "names", "register", "search_names", "span", "unregister"]

DEFAULT = "concurrency"  # the mode a run form starts on, and of runs stored before modes were chosen
# The order the run form offers them in.
for _name in ("concurrency", "rate", "conversation", "slo", "slo_rate"):
    importlib.import_module(f"{__name__}.{_name}")
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
