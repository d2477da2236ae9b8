"""How a server spreads a model over the GPUs it is given, read from its flags: llama.cpp's
--split-mode none|layer|row (and --tensor-split), vLLM's --tensor-parallel-size and
--pipeline-parallel-size. One reading for the recipe's checks, the lab's endpoints and the
advisor, so "served by two GPUs" means the same everywhere. Django-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

SPLIT_MODE = ("--split-mode", "-sm")
TENSOR_SPLIT = ("--tensor-split", "-ts")
TENSOR_PARALLEL = ("--tensor-parallel-size", "-tp")
PIPELINE_PARALLEL = ("--pipeline-parallel-size", "-pp")
SPLIT_MODES = ("none", "layer", "row")  # llama.cpp's; "layer" is its default with several GPUs


def flag_value(setting: dict | None, args, flags: tuple[str, ...]):
    """The value one of these flags has as the server is started: its setting's, else the
    arguments' (`-sm row` or `-sm=row`); None when neither sets it."""
    for f in flags:
        if f in (setting or {}):
            return setting[f]
    args = list(args or ())
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f + "="):
                return a.split("=", 1)[1]
    return None


def _positive_int(value, name: str) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise ValueError(f"{name} is a whole number of GPUs, not {value!r}") from None
    if n < 1:
        raise ValueError(f"{name} is at least 1, not {n}")
    return n


def _tensor_split(value) -> list[float]:
    """llama.cpp's --tensor-split "3,1" (or "3/1"): the share of the model per GPU."""
    parts = [p for p in str(value).replace("/", ",").split(",") if p.strip()]
    try:
        shares = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"--tensor-split is shares per GPU separated by commas, e.g. 1,1 or 3,1, not {value!r}") \
            from None
    if not shares or any(s < 0 for s in shares) or not any(s > 0 for s in shares):
        raise ValueError(f"--tensor-split needs a positive share for at least one GPU, not {value!r}")
    return shares


@dataclass(frozen=True)
class Spread:
    """How many GPUs the model is spread over, and how: "one GPU", "layer split", "row split",
    "tensor parallel", "pipeline parallel", "tensor x pipeline parallel"."""

    gpus_used: int = 1
    how: str = "one GPU"

    @property
    def label(self) -> str:
        return self.how if self.gpus_used == 1 else f"{self.gpus_used} GPUs, {self.how}"


def spread(backend: str, setting: dict | None, args, visible: int | None) -> Spread:
    """The spread of a server of this backend at this setting, given `visible` GPUs (None: as
    many as its environment gives, not known here), as its backend module reads its flags
    (Backend.spread). Raises ValueError for flags it cannot read."""
    from benchmarks.engine import backends  # the backend modules import this one's readings

    return backends.get(backend).spread(setting, args, visible)


def layer_or_row_split(setting: dict | None, args, visible: int | None) -> Spread:
    """llama.cpp's --split-mode none|layer|row and --tensor-split (common/arg.cpp): layer by
    default, over every GPU it is given unless --tensor-split gives some none."""
    mode = flag_value(setting, args, SPLIT_MODE)
    mode = "layer" if mode is None else str(mode)
    if mode not in SPLIT_MODES:
        raise ValueError(f"--split-mode is one of {', '.join(SPLIT_MODES)}, not {mode!r}")
    shares = flag_value(setting, args, TENSOR_SPLIT)
    if mode == "none":
        return Spread(1, "one GPU")
    if shares is not None:
        used = sum(1 for s in _tensor_split(shares) if s > 0)
        if visible is not None:
            used = min(used, visible)
    else:
        used = visible or 1
    return Spread(used, f"{mode} split") if used > 1 else Spread(1, "one GPU")


def tensor_times_pipeline(setting: dict | None, args) -> Spread:
    """vLLM's --tensor-parallel-size × --pipeline-parallel-size GPUs (1 each by default)."""
    tp, pp = (_positive_int(1 if (v := flag_value(setting, args, flags)) is None else v, flags[0])
              for flags in (TENSOR_PARALLEL, PIPELINE_PARALLEL))
    how = ("tensor x pipeline parallel" if tp > 1 and pp > 1 else "tensor parallel" if tp > 1
           else "pipeline parallel" if pp > 1 else "one GPU")
    return Spread(tp * pp, how)


def as_given(visible: int | None) -> Spread:
    """A server whose flags are not read here: over the GPUs it is given."""
    return Spread(visible or 1, "one GPU" if (visible or 1) == 1 else "as the server spreads it")


def problem(backend, args, sweep: dict | None, gpu_lists: list[tuple[int, ...] | None]) -> str:
    """Why a recipe's multi-GPU flags cannot work for its `backend` (a Backend), or "": each
    setting of its sweep read, and a spread over more GPUs than it is given refused where the
    backend needs them all (vLLM needs tensor x pipeline GPUs)."""
    sweep = dict(sweep or {})
    keys = [k for k in sweep if k in backend.spread_flags]
    settings = [dict(zip(keys, values)) for values in product(*(sweep[k] for k in keys))] if keys else [{}]
    for gpus in gpu_lists or [None]:
        for setting in settings:
            try:
                s = backend.spread(setting, args, len(gpus) if gpus is not None else None)
            except ValueError as exc:
                return str(exc)
            if backend.spread_needs_its_gpus and gpus is not None and s.gpus_used > len(gpus):
                return (f"{s.label} needs {s.gpus_used} GPUs; the server is given {len(gpus)} "
                        f"({','.join(map(str, gpus))})")
    return ""
