"""`vllm bench serve --save-result` JSON (and the older benchmarks/benchmark_serving.py).

Schema checked against vllm-project/vllm: vllm/benchmarks/serve.py (`benchmark()` builds the
result dict, `main_async()` adds date/backend/model_id/... and drops per-request arrays unless
--save-detailed) and benchmarks/benchmark_serving.py (the pre-CLI script; same metric keys, no
'failed'). One object per run; `--append-result` appends further objects one per line, which
are read here as further levels.

Metric keys: mean_/median_/std_<m>_ms and p<P>_<m>_ms for m in ttft, tpot, itl, e2el, only for
the metrics chosen with --percentile-metrics (default ttft,tpot,itl) and the percentiles chosen
with --metric-percentiles (default 99). vLLM's TPOT is (latency - ttft) / (output tokens - 1)
per request and its ITL is the gap between streamed chunks: the same definitions as ours.
"""
from __future__ import annotations

import re
from datetime import datetime

from ._fields import Fields, fmt, json_type, small_meta
from .model import ImportedLevel, ImportedReport, ReportFormatError

WHERE = "vllm bench serve JSON"
SIGNATURE = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "request_throughput",
             "output_throughput", "total_token_throughput")
_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
_PCT_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
MAX_PERCENTILES = 20  # per metric (--metric-percentiles); each is stored with every level
_PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
                "queue_times", "generated_texts", "errors")
_CONFIG = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
           "num_prompts", "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy",
           "ramp_up_start_rps", "ramp_up_end_rps")


def looks_like(doc: object) -> bool:
    return isinstance(doc, dict) and any(k in doc for k in SIGNATURE)


def parse(docs: list) -> ImportedReport:
    if not docs:
        raise ReportFormatError(f"{WHERE}: no result objects")
    many = len(docs) > 1
    levels, notes = [], []
    for i, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            where = f"{WHERE}: result {i}" if many else WHERE
            raise ReportFormatError(f"{where}: top level must be an object, got {json_type(doc)}")
        levels.append(_level(Fields(doc, f"{WHERE}: result {i}" if many else WHERE)))

    first = Fields(docs[0], WHERE)
    model = first.string("model_id")
    created = _date(first)
    client = first.string("backend") or first.string("endpoint_type")
    notes.append("Imported from a vllm bench serve result file: not measured by this site.")
    notes.append(
        f"The file does not say which server engine answered; its 'backend' field "
        f"({client or 'absent'}) is the client request type, so the report's backend is unset.")
    notes.append("vllm bench serve's TPOT is (E2E − TTFT) / (output tokens − 1) per request and "
                 "its ITL is the gap between streamed chunks — the same definitions as ours.")
    if created:
        notes.append("The file's date is the client's local time (it carries no time zone).")
    if many:
        notes.append(f"{len(docs)} results appended in one file (--append-result): one level each.")

    raw = small_meta(docs[0], _CONFIG)
    extra = {k: v for k, v in small_meta(docs[0]).items()
             if k not in raw and isinstance(v, str) and not k.endswith("_ms")}
    if extra:  # --metadata KEY=VALUE pairs land at the top level as strings
        raw["metadata"] = dict(list(extra.items())[:20])
    label = first.string("label")
    title = f"vllm bench serve — {model or 'unknown model'}"
    if not many:
        title += f", {levels[0].label}"
    return ImportedReport(
        kind="vllm-bench-serve", tool_label="vllm bench serve" + (f" ({label})" if label else ""),
        title=title, model=model, backend=None, gpu=None, created=created, levels=levels,
        notes=notes, raw_meta=raw)


def _level(f: Fields) -> ImportedLevel:
    completed = f.number("completed", required=True, integer=True)
    f.number("duration", required=True, positive=True)
    f.number("mean_ttft_ms", required=True)  # a serving result without TTFT is not one we chart
    failed = f.number("failed", integer=True)
    notes: list[str] = []

    for key in _PER_REQUEST:
        f.array(key)  # type-check only; per-request data is not imported
    if failed is None and f.has("errors"):
        failed = sum(1 for e in f.obj["errors"] if e)
        notes.append("failed = number of non-empty entries in 'errors'.")
    if f.has("ttfts"):
        notes.append(f"The file carries per-request details for {len(f.obj['ttfts'])} requests "
                     "(--save-detailed); only the summary figures are imported.")

    rate = _request_rate(f)
    max_conc = f.number("max_concurrency", integer=True, positive=True)
    if max_conc and rate:
        label = f"{fmt(rate)} req/s, max concurrency {max_conc}"
    elif max_conc:
        label = f"concurrency {max_conc}"
    elif rate:
        label = f"{fmt(rate)} req/s"
    else:
        label = "all requests at once"
        notes.append("request_rate inf and no max_concurrency: every request was sent at t=0, "
                     "so concurrency is not a fixed level.")

    level = ImportedLevel(label=label, concurrency=float(max_conc) if max_conc else None,
                          request_rate=rate, completed=completed, failed=failed, notes=notes)
    if completed == 0:
        notes.append("No request completed: vllm bench serve writes zeros for the latencies, "
                     "so none were imported.")
        return level

    for metric, attr in _METRICS.items():
        setattr(level, attr, _latency(f, metric))
    level.request_throughput = f.number("request_throughput")
    level.aggregate_tok_s = f.number("output_throughput")
    total_in, total_out = f.number("total_input_tokens"), f.number("total_output_tokens")
    if total_in is not None:
        level.prompt_tokens = total_in / completed
    if total_out is not None:
        level.output_tokens = total_out / completed
    if total_in is not None or total_out is not None:
        notes.append("Prompt/output tokens are per completed request: total_input_tokens and "
                     "total_output_tokens divided by completed.")
    median_tpot = level.tpot_ms.get("p50")
    if median_tpot:
        level.decode_tok_s = {"p50": 1000.0 / median_tpot}
        notes.append("Per-stream decode = 1000 / median TPOT (ms).")
    return level


def _latency(f: Fields, metric: str) -> dict[str, float]:
    out: dict[str, float] = {}
    mean = f.number(f"mean_{metric}_ms")
    if mean is not None:
        out["mean"] = mean
    stated: dict[str, float] = {}
    for key in f.obj:
        m = _PCT_KEY.match(key) if isinstance(key, str) else None
        if m and m.group(2) == metric:
            value = f.number(key)
            if value is not None:
                stated[f"p{m.group(1)}"] = value
            if len(stated) > MAX_PERCENTILES:
                raise ReportFormatError(f"{f.where}: more than {MAX_PERCENTILES} percentiles of "
                                        f"{metric}; at most {MAX_PERCENTILES} are read")
    median = f.number(f"median_{metric}_ms")
    if median is not None:
        stated.setdefault("p50", median)
    out.update(sorted(stated.items(), key=lambda kv: float(kv[0][1:])))
    return out


def _request_rate(f: Fields) -> float | None:
    value = f.obj.get("request_rate")
    if isinstance(value, str):  # vLLM writes the string "inf" for an unlimited rate
        if value.strip().lower() in ("inf", "infinity"):
            return None
        raise ReportFormatError(f"{f.where}: field 'request_rate' must be a number or \"inf\", "
                                f"got {value[:40]!r}")
    if isinstance(value, float) and value == float("inf"):
        return None
    return f.number("request_rate", positive=True)


def _date(f: Fields) -> str | None:
    value = f.string("date")  # written as datetime.now().strftime("%Y%m%d-%H%M%S"), local time
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return None
