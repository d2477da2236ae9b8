"""GuideLLM JSON reports (`benchmarks.json`, from --output-path / --outputs json).

Two layouts are read, both checked against vllm-project/guidellm:
- v0.4 and later (GenerativeBenchmarksReport in src/guidellm/benchmark/schemas/report.py and
  schemas/generative/{report,benchmark,metrics}.py): top level {args, benchmarks}, newer files
  also {metadata: {version: 1, guidellm_version, ...}}; each benchmark has `config.strategy`,
  `metrics.request_totals` and the metric distributions under `metrics`.
- v0.2–v0.3 (src/guidellm/benchmark/benchmark.py, output.py): top level {benchmarks}; each
  benchmark has `args.strategy`, `request_totals` beside `metrics`, `worker.backend_model`.
Strategies (src/guidellm/scheduler/strategies.py): synchronous, concurrent (streams),
throughput (max_concurrency cap), constant and poisson (rate req/s).

Each metric is a StatusDistributionSummary {successful, incomplete, errored, total}; only
`successful` is imported (mean, median, percentiles.p90/p95/p99; GuideLLM writes zeros for an
empty distribution, so count 0 means "no figure").

Metric mapping (definitions from src/guidellm/schemas/request_stats.py):
- time_to_first_token_ms -> TTFT.
- inter_token_latency_ms = (last token - first token) / (output tokens - 1) per request: our
  TPOT definition, so it is imported as TPOT. GuideLLM has no chunk-gap distribution: ITL stays
  empty.
- time_per_output_token_ms = (last token - request start) / output tokens includes TTFT: not
  our TPOT, so it is not imported.
- request_latency is in seconds -> E2E ms (x1000).
- output_tokens_per_second and requests_per_second are rate distributions over the run: their
  mean is the aggregate output throughput / request throughput.
"""
from __future__ import annotations

from ._fields import Fields, epoch_to_iso, fmt, json_type, small_meta
from .model import ImportedLevel, ImportedReport, ReportFormatError

WHERE = "GuideLLM JSON"
_ARGS_META = ("target", "backend", "model", "profile", "rate", "max_seconds", "max_requests",
              "random_seed", "processor")


def looks_like(doc: object) -> bool:
    return isinstance(doc, dict) and "benchmarks" in doc


def parse(doc: object) -> ImportedReport:
    if not isinstance(doc, dict):
        raise ReportFormatError(
            f"{WHERE}: top level must be an object with 'benchmarks', got {json_type(doc)}")
    f = Fields(doc, WHERE)
    benchmarks = f.array("benchmarks", required=True)
    if not benchmarks:
        raise ReportFormatError(f"{WHERE}: 'benchmarks' is empty")
    meta = f.sub("metadata")
    args = f.sub("args")
    version = meta.string("guidellm_version") if meta else None
    schema = meta.number("version", integer=True) if meta else None

    levels, models, starts = [], [], []
    for i, bench in enumerate(benchmarks, 1):
        level, model, start = _benchmark(Fields(bench, f"{WHERE}: benchmark {i}", nested=True))
        levels.append(level)
        models.append(model)
        starts.append(start)

    model = (args.string("model") if args else None) or next((m for m in models if m), None)
    notes = [
        "Imported from a GuideLLM report: not measured by this site.",
        "Figures are over successful requests only.",
        "GuideLLM's inter_token_latency_ms ((last − first token) / (output tokens − 1)) is our "
        "TPOT and is shown as TPOT; its time_per_output_token_ms includes TTFT and is not "
        "imported; it has no chunk-gap (ITL) distribution.",
        "The report does not say which server engine answered, so the report's backend is unset.",
    ]
    first = benchmarks[0]
    layout = "v0.4+ (config.strategy)" if isinstance(first, dict) and "config" in first \
        else "v0.2–v0.3 (args.strategy)"
    if schema is not None and schema != 1:
        notes.append(f"Report schema version {schema}: only version 1 was checked; read with care.")
    raw = {"layout": layout, **(small_meta(args.obj, _ARGS_META) if args else {})}
    if meta:
        raw.update(small_meta(meta.obj, ("version", "guidellm_version", "python_version",
                                         "platform")))
    tool = "GuideLLM" + (f" {version}" if version else "")
    return ImportedReport(
        kind="guidellm", tool_label=tool, title=f"{tool} — {model or 'unknown model'}",
        model=model, backend=None, gpu=None, created=next((s for s in starts if s), None),
        levels=levels, notes=notes, raw_meta=raw)


def _benchmark(b: Fields) -> tuple[ImportedLevel, str | None, str | None]:
    metrics = b.sub("metrics", required=True)
    config, legacy = b.sub("config"), b.sub("args")
    strategy = (config.sub("strategy") if config else None) or (
        legacy.sub("strategy") if legacy else None)
    if strategy is None:
        raise ReportFormatError(f"{b.where} has no scheduling strategy "
                                "('config.strategy' in v0.4+, 'args.strategy' in v0.2–v0.3)")
    level = _strategy_level(strategy)

    totals = metrics.sub("request_totals") or b.sub("request_totals")
    if totals is None:
        raise ReportFormatError(f"{b.where} has no 'request_totals' ('metrics.request_totals' "
                                "in v0.4+, beside 'metrics' in v0.2–v0.3)")
    level.completed = totals.number("successful", required=True, integer=True)
    level.failed = totals.number("errored", integer=True)
    incomplete = totals.number("incomplete", integer=True)
    if incomplete:
        level.notes.append(f"{incomplete} requests were cut off at the end of the benchmark "
                           "(GuideLLM 'incomplete'); not counted as failed.")

    if not metrics.has("time_to_first_token_ms"):
        raise ReportFormatError(f"{metrics.where} has no 'time_to_first_token_ms'")
    level.ttft_ms = _dist(metrics, "time_to_first_token_ms")
    level.tpot_ms = _dist(metrics, "inter_token_latency_ms")
    level.e2e_ms = _dist(metrics, "request_latency", scale=1000.0)
    if level.e2e_ms:
        level.notes.append("E2E = GuideLLM request_latency (seconds) × 1000.")
    level.prompt_tokens = _dist(metrics, "prompt_token_count").get("mean")
    level.output_tokens = _dist(metrics, "output_token_count").get("mean")
    level.aggregate_tok_s = _dist(metrics, "output_tokens_per_second").get("mean")
    level.request_throughput = _dist(metrics, "requests_per_second").get("mean")
    if level.tpot_ms.get("p50"):
        level.decode_tok_s = {"p50": 1000.0 / level.tpot_ms["p50"]}
        level.notes.append("Per-stream decode = 1000 / median TPOT (ms), TPOT being GuideLLM's "
                           "inter_token_latency_ms.")
    if level.completed == 0:
        level.notes.append("No successful requests in this benchmark.")

    backend = config.sub("backend") if config else None
    worker = b.sub("worker")
    model = (backend.string("model") if backend else None) or (
        worker.string("backend_model") if worker else None)
    start = b.number("start_time")
    if start is None:
        sched = b.sub("scheduler_metrics")
        start = sched.number("measure_start_time") if sched else None
    return level, model, epoch_to_iso(start)


def _strategy_level(s: Fields) -> ImportedLevel:
    kind = s.string("type_", required=True)
    cap = s.number("max_concurrency", integer=True)
    if kind == "synchronous":
        return ImportedLevel(label="synchronous", concurrency=1.0)
    if kind == "concurrent":
        streams = s.number("streams", required=True, integer=True, positive=True)
        return ImportedLevel(label=f"concurrent@{streams}", concurrency=float(streams))
    if kind in ("constant", "poisson"):
        rate = s.number("rate", required=True, positive=True)
        level = ImportedLevel(label=f"{kind}@{fmt(rate)} req/s", request_rate=rate)
        if cap:
            level.notes.append(f"Concurrency capped at {cap}.")
        return level
    if kind == "throughput":
        level = ImportedLevel(label="throughput (max load)")
        level.notes.append("Throughput strategy: all requests released at once"
                           + (f", at most {cap} in flight." if cap else "."))
        return level
    level = ImportedLevel(label=kind)
    level.notes.append(f"Unknown GuideLLM strategy {kind!r}: load level not interpreted.")
    return level


def _dist(metrics: Fields, name: str, scale: float = 1.0) -> dict[str, float]:
    """One distribution's successful-request summary as {mean, p50, p90, p95, p99}."""
    dist = metrics.sub(name)
    if dist is None:
        return {}
    ok = dist.sub("successful", required=True)
    ok = Fields(ok.obj, ok.where)  # top-level style: "...successful: missing field 'mean'"
    if ok.number("count", integer=True) == 0:
        return {}
    def conv(value: float) -> float:  # s -> ms without float noise such as 2216.0099999999998
        return float(f"{value * scale:.12g}") if scale != 1.0 else value

    out = {"mean": conv(ok.number("mean", required=True))}
    pct = ok.sub("percentiles", where=f"{ok.where}.percentiles")
    p50 = (pct.number("p50") if pct else None)
    if p50 is None:
        p50 = ok.number("median")
    if p50 is not None:
        out["p50"] = conv(p50)
    for key in ("p90", "p95", "p99"):
        value = pct.number(key) if pct else None
        if value is not None:
            out[key] = conv(value)
    return out
