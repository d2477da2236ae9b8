"""llama.cpp `llama-bench -o json` (an array of test entries) and `-o jsonl` (one per line).

Schema checked against ggml-org/llama.cpp tools/llama-bench/llama-bench.cpp (`test::get_fields`,
`get_field_type`, `json_printer`, `jsonl_printer`) and tools/llama-bench/README.md. Each entry:
build_commit, build_number, cpu_info, gpu_info, backends, model_filename, model_type,
model_size, model_n_params, n_batch, n_ubatch, n_threads, type_k, type_v, n_gpu_layers,
flash_attn (bool in older builds, int -1/0/1 now), ..., n_prompt, n_gen, n_depth (newer
builds), test_time (RFC 3339), avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts.

A test is pp (n_prompt > 0, n_gen = 0), tg (n_prompt = 0, n_gen > 0) or pg (both, `-pg`).
avg_ts is (n_prompt + n_gen) / time averaged over repetitions, for one sequence:
pp -> prefill_tok_s, tg -> decode_tok_s (each its mean), both at concurrency 1. A pg figure mixes
the two phases, so it is kept as a note only.
"""
from __future__ import annotations

from ._fields import Fields, basename, json_type, small_meta
from .model import ImportedLevel, ImportedReport, ReportFormatError

WHERE = "llama-bench JSON"
ENTRY_KEYS = ("avg_ts", "n_prompt", "n_gen", "samples_ts", "build_commit", "model_type")
# Settings that tell entries apart when one file sweeps them (-ngl 10,99, -b 256,512, ...).
_CONFIG = ("model_filename", "n_gpu_layers", "n_batch", "n_ubatch", "n_threads", "type_k",
           "type_v", "flash_attn", "split_mode", "main_gpu", "no_kv_offload", "n_cpu_moe",
           "devices", "tensor_split", "cpu_mask", "poll", "embeddings", "use_mmap")
_META = ("build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
         "model_type", "model_size", "model_n_params") + _CONFIG[1:]


def looks_like(doc: object) -> bool:
    """An entry list, or a single entry (one line of -o jsonl)."""
    if isinstance(doc, list):
        return bool(doc) and isinstance(doc[0], dict) and any(k in doc[0] for k in ENTRY_KEYS)
    return isinstance(doc, dict) and "avg_ts" in doc and ("n_prompt" in doc or "n_gen" in doc)


def parse(entries: object) -> ImportedReport:
    if isinstance(entries, dict) and looks_like(entries):
        entries = [entries]
    if not isinstance(entries, list):
        raise ReportFormatError(
            f"{WHERE}: top level must be an array of entries, got {json_type(entries)}")
    if not entries:
        raise ReportFormatError(f"{WHERE}: empty array, no test entries")
    rows = [Fields(e, f"{WHERE}: entry {i}", nested=True) for i, e in enumerate(entries, 1)]
    varying = [k for k in _CONFIG
               if len({repr(r.obj.get(k)) for r in rows}) > 1]
    levels = [_level(r, varying) for r in rows]

    def common(key: str) -> str | None:
        values = {r.obj.get(key) for r in rows if isinstance(r.obj.get(key), str)}
        return values.pop() if len(values) == 1 else None

    first = rows[0]
    model = basename(common("model_filename"))
    gpu = common("gpu_info") or None
    commit, number = first.string("build_commit"), first.number("build_number", integer=True)
    build = ", ".join(x for x in (f"build {number}" if number is not None else "", commit) if x)
    tool = "llama-bench" + (f" ({build})" if build else "")
    notes = [
        "Imported from llama-bench output: not measured by this site.",
        "llama-bench times one sequence at a time with synthetic tokens, in-process (no HTTP "
        "server, no tokenization or sampling): pp = prefill speed, tg = decode speed, both at "
        "concurrency 1.",
    ]
    if varying:
        notes.append("Entries differ in: " + ", ".join(varying) + " (shown in the level labels).")
    if model is None and any(r.has("model_filename") for r in rows):
        notes.append("Several models in one file: see the level labels.")
    raw = small_meta(first.obj, _META)
    if first.string("model_type"):
        notes.append(f"Model type as llama.cpp describes it: {first.obj['model_type']}.")
    return ImportedReport(
        kind="llama-bench", tool_label=tool,
        title=f"llama-bench — {model or 'several models'}" + (f" on {gpu}" if gpu else ""),
        model=model, backend="llamacpp", gpu=gpu,
        created=next((r.string("test_time") for r in rows if r.has("test_time")), None),
        levels=levels, notes=notes, raw_meta=raw)


def _level(r: Fields, varying: list[str]) -> ImportedLevel:
    n_prompt = r.number("n_prompt", required=True, integer=True)
    n_gen = r.number("n_gen", required=True, integer=True)
    avg_ts = r.number("avg_ts", required=True)
    if not avg_ts:
        raise ReportFormatError(f"{r.where}: field 'avg_ts' must be greater than 0, got 0")
    stddev = r.number("stddev_ts")
    depth = r.number("n_depth", integer=True) or 0
    samples = r.array("samples_ts")
    r.string("test_time")  # type-check: it becomes the report date
    if n_prompt == 0 and n_gen == 0:
        raise ReportFormatError(f"{r.where} has n_prompt = 0 and n_gen = 0: not a pp or tg test")

    test = (f"pp{n_prompt}" if not n_gen else f"tg{n_gen}" if not n_prompt
            else f"pp{n_prompt}+tg{n_gen}")
    label = test + (f" @ d{depth}" if depth else "")
    if varying:
        shown = []
        for key in varying:
            value = r.obj.get(key)
            shown.append(f"{key}={basename(value) if key == 'model_filename' else value}")
        label += " [" + ", ".join(shown) + "]"

    level = ImportedLevel(label=label, concurrency=1.0, prompt_tokens=float(n_prompt),
                          output_tokens=float(n_gen))
    spread = f" ± {stddev:.2f}" if stddev is not None else ""
    reps = f" over {len(samples)} repetitions" if samples else ""
    if n_gen == 0:
        level.prefill_tok_s = {"mean": avg_ts}
        level.notes.append(f"prefill = avg_ts {avg_ts:.2f}{spread} t/s{reps}.")
    elif n_prompt == 0:
        level.decode_tok_s = {"mean": avg_ts}
        level.notes.append(f"decode = avg_ts {avg_ts:.2f}{spread} t/s{reps}.")
    else:
        level.notes.append(
            f"pp+tg test: avg_ts {avg_ts:.2f}{spread} t/s is (prompt + generated tokens) / total "
            "time, neither prefill nor decode speed, so it is not charted.")
    if depth:
        level.notes.append(f"Run with {depth} tokens already in the KV cache (n_depth).")
    return level
