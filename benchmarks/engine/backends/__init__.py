"""The serving engines the engine can measure, one small module each (the way healthchecks keeps
its transports): `vllm.py`, `llamacpp.py`, `sglang.py` and `openai.py` (any other
OpenAI-compatible server).

Adding a backend is one new module in this package: a `Backend` subclass (see base.py) with
`@register`. Every module here is imported when the package is, so the load generator, the
/metrics scraper, the simulator, the endpoint choices, the forms and the advisor know it at once.

    from benchmarks.engine import backends
    backends.get("vllm").request_extras(100)   # {"ignore_eos": True, "min_tokens": 100}
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import (BACKENDS, HISTOGRAM_KEYS, METRIC_KEYS, Backend, UnknownBackend, choices, get, label, names,
                   ordered, register, trim, unregister)

__all__ = ["BACKENDS", "HISTOGRAM_KEYS", "METRIC_KEYS", "Backend", "UnknownBackend", "choices", "get", "label",
           "names", "ordered", "register", "trim", "unregister"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
