"""Import benchmark results people already have into one normalized structure.

    report = parse_report(uploaded_bytes, filename="run.json")   # kind detected from content
    report.to_dict()  -> JSON-safe dict to store;  ImportedReport.from_dict(d) reads it back

Formats (details and the upstream files they were checked against are in each module):
- "vllm-bench-serve": `vllm bench serve --save-result` / benchmarks/benchmark_serving.py JSON,
  including --save-detailed per-request arrays and --append-result (one object per line).
- "guidellm": GuideLLM JSON reports, v0.4+ layout (metadata.version 1) and v0.2–v0.3 layout.
- "llama-bench": llama.cpp `llama-bench -o json` (array) or `-o jsonl`.
- "published": not parsed from files; see `published.v100_writeup_reports()`.

Any unusable input raises ReportFormatError (a ValueError) whose message says what is wrong.
Nothing is invented: only figures the file states, plus unit conversions that are noted.
"""
from __future__ import annotations

from . import guidellm, llama_bench, vllm_serve
from ._fields import MAX_BYTES, MAX_LEVELS, MAX_VALUES, json_type, load_documents, size_text
from .model import KINDS, LATENCY_KEYS, ImportedLevel, ImportedReport, ReportFormatError
from .published import v100_writeup_reports

__all__ = ["KINDS", "LATENCY_KEYS", "MAX_BYTES", "MAX_LEVELS", "MAX_VALUES", "ImportedLevel",
           "ImportedReport", "ReportFormatError", "detect_kind", "parse_report", "size_text",
           "v100_writeup_reports"]

_PARSEABLE = ("vllm-bench-serve", "guidellm", "llama-bench")
_EXPECTED = ("expected a vllm bench serve result (object with 'mean_ttft_ms', "
             "'request_throughput', ...), a GuideLLM report (object with 'benchmarks') or "
             "llama-bench -o json output (array of entries with 'avg_ts')")


def parse_report(data: bytes, filename: str = "", kind: str | None = None, *,
                 max_bytes: int = MAX_BYTES, max_levels: int = MAX_LEVELS) -> ImportedReport:
    """Parse an uploaded result file. `kind` None means: detect it from the content.

    A file over `max_bytes` or with more than `max_levels` levels is refused, and so is any text
    the report would store that a database cannot (NUL, lone surrogates) or that is too long."""
    try:
        return _parse(data, filename, kind, max_bytes, max_levels)
    except ReportFormatError:
        raise
    except RecursionError:
        raise ReportFormatError("not usable JSON: nested too deeply") from None
    except Exception as exc:  # a gap in validation must still reach the user as a clear error
        raise ReportFormatError(f"could not read the file ({type(exc).__name__}: {exc})") from None


def _parse(data: bytes, filename: str, kind: str | None, max_bytes: int,
           max_levels: int) -> ImportedReport:
    if kind is not None and kind not in _PARSEABLE:
        if kind == "published":
            raise ReportFormatError("kind 'published' is built in "
                                    "(published.v100_writeup_reports()), not parsed from files")
        raise ReportFormatError(f"unknown kind {kind!r}; expected one of {', '.join(_PARSEABLE)}")
    lower = (filename or "").lower()
    try:
        docs = load_documents(data, max_bytes)
    except ReportFormatError as exc:
        if lower.endswith((".yaml", ".yml", ".csv", ".md")) and str(exc).startswith("not JSON"):
            raise ReportFormatError(
                f"{exc}; only JSON is read — save GuideLLM / llama-bench results as JSON "
                "(llama-bench -o json, GuideLLM --outputs json)") from None
        raise
    kind = kind or detect_kind(docs)
    count, what = _levels_in(kind, docs)
    if count > max_levels:
        raise ReportFormatError(f"{_WHERE[kind]}: {count:,} {what}; one import holds at most "
                                f"{max_levels:,} — split the file")

    if kind == "vllm-bench-serve":
        report = vllm_serve.parse(docs if len(docs) > 1 else _as_list_of_objects(docs[0]))
    elif kind == "guidellm":
        if len(docs) > 1:
            raise ReportFormatError(f"{guidellm.WHERE}: expected one JSON document, "
                                    f"found {len(docs)} (JSON Lines)")
        report = guidellm.parse(docs[0])
    else:
        report = llama_bench.parse(docs if len(docs) > 1 else docs[0])

    if filename:
        report.raw_meta.setdefault("filename", filename[:200])
    if len(report.title) > TITLE_LENGTH:  # a title made from long model and GPU names
        report.title = report.title[:TITLE_LENGTH - 1] + "…"
    _check_storable(report)
    _check_plausible(report)
    if not any(level.has_figures() for level in report.levels):
        raise ReportFormatError(f"{report.tool_label}: nothing to chart — no level states a "
                                "usable figure (no successful requests, or only pp+tg tests)")
    return report


# No figure a real run gives is past these (a day of latency; ten million tokens a second): a value
# beyond is a broken file, refused with its level and field rather than charted.
PLAUSIBLE_MAX = {"ms": 86_400_000.0, "tok_s": 1e7}
_ORDER = ("min", "p25", "p50", "p75", "p90", "p95", "p99", "p99.9", "max")  # a distribution's rising statistics


def _check_plausible(report: ImportedReport) -> None:
    """Every stated figure finite, not negative, within PLAUSIBLE_MAX, and each distribution's
    percentiles in order (a p99 below the median cannot be): else ReportFormatError naming the
    level and the field."""
    where = _WHERE.get(report.kind, report.tool_label)
    for level in report.levels:
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "decode_tok_s", "prefill_tok_s"):
            stats = getattr(level, name) or {}
            limit = PLAUSIBLE_MAX["ms" if name.endswith("_ms") else "tok_s"]
            for stat, value in stats.items():
                if not isinstance(value, (int, float)) or not 0 <= value <= limit:
                    raise ReportFormatError(f"{where}: level {level.label}: {name} {stat} is {value!r}, outside "
                                            f"0 to {limit:g}: not a figure a run gives")
            ordered = [(k, stats[k]) for k in _ORDER if k in stats]
            for (a, x), (b, y) in zip(ordered, ordered[1:]):
                if y < x:
                    raise ReportFormatError(f"{where}: level {level.label}: {name} {b} ({y:g}) is below its {a} "
                                            f"({x:g}): percentiles cannot fall")
        for name, limit in (("aggregate_tok_s", PLAUSIBLE_MAX["tok_s"]), ("request_throughput", 1e6)):
            value = getattr(level, name)
            if value is not None and not 0 <= value <= limit:
                raise ReportFormatError(f"{where}: level {level.label}: {name} is {value!r}, outside 0 to {limit:g}")


_WHERE = {"vllm-bench-serve": vllm_serve.WHERE, "guidellm": guidellm.WHERE,
          "llama-bench": llama_bench.WHERE}
TITLE_LENGTH = 300
# The longest text the report may hold, by place: names the site shows in one line (and stores in
# columns of these lengths), then labels, notes and anything else.
_TEXT_LIMITS = {"model": 200, "gpu": 200, "backend": 30, "created": 64, "tool_label": 200,
                "label": 300, "notes": 2000}
_TEXT_DEFAULT = 300


def _levels_in(kind: str, docs: list) -> tuple[int, str]:
    """How many levels the documents would become, counted before any is parsed."""
    if kind == "guidellm":
        benchmarks = docs[0].get("benchmarks") if len(docs) == 1 and isinstance(docs[0], dict) else None
        return (len(benchmarks) if isinstance(benchmarks, list) else 0), "benchmarks"
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    return len(docs), "test entries" if kind == "llama-bench" else "results"


def _check_storable(report: ImportedReport) -> None:
    """Refuse text that PostgreSQL cannot store (NUL, lone surrogates) or that is too long, naming
    where in the report it would have gone."""
    where = _WHERE.get(report.kind, report.kind)

    def check(value: object, path: str, limit: int) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                check(key, f"{path} (a key)", 100)
                check(item, f"{path}.{key}", limit)
        elif isinstance(value, list):
            for i, item in enumerate(value, 1):
                check(item, f"{path} {i}", limit)
        elif isinstance(value, str):
            if "\x00" in value:
                raise ReportFormatError(f"{where}: the {path} contains a NUL character "
                                        "(\\u0000), which cannot be stored")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ReportFormatError(
                    f"{where}: the {path} contains a lone surrogate "
                    f"(\\u{ord(value[exc.start]):04x}), which is not valid Unicode text") from None
            if len(value) > limit:
                raise ReportFormatError(f"{where}: the {path} is {len(value):,} "
                                        f"characters long; at most {limit:,} are accepted")

    stored = report.to_dict()
    for key in ("model", "gpu", "backend", "created", "tool_label", "raw_meta", "title", "notes"):  # sources first
        check(stored[key], _PLACES.get(key, key), _TEXT_LIMITS.get(key, _TEXT_DEFAULT))
    for i, level in enumerate(stored["levels"], 1):
        for key, value in level.items():
            check(value, f"level {i} {_PLACES.get(key, key)}", _TEXT_LIMITS.get(key, _TEXT_DEFAULT))


_PLACES = {"tool_label": "tool name", "model": "model name", "gpu": "GPU name", "created": "date",
           "raw_meta": "file details"}


def _as_list_of_objects(doc: object) -> list:
    # A single vLLM result is an object; an array of result objects is accepted too.
    if isinstance(doc, list):
        if not doc:
            raise ReportFormatError(f"{vllm_serve.WHERE}: empty array, no results")
        return doc
    return [doc]


def detect_kind(docs: list) -> str:
    """Which format the loaded document(s) are, judged by content only."""
    if len(docs) > 1:  # JSON Lines
        kinds = {_detect_one(d) for d in docs}
        if len(kinds) > 1:
            raise ReportFormatError("JSON Lines file mixes formats: " + ", ".join(sorted(kinds)))
        return kinds.pop()
    return _detect_one(docs[0])


def _detect_one(doc: object) -> str:
    if isinstance(doc, list):
        if not doc:
            raise ReportFormatError("empty JSON array: nothing to import")
        if llama_bench.looks_like(doc):
            return "llama-bench"
        if all(vllm_serve.looks_like(d) for d in doc):
            return "vllm-bench-serve"
        raise ReportFormatError(f"unrecognised JSON array (first item is {json_type(doc[0])}"
                                f"{_keys(doc[0])}); {_EXPECTED}")
    if isinstance(doc, dict):
        if guidellm.looks_like(doc):
            return "guidellm"
        if llama_bench.looks_like(doc):
            return "llama-bench"
        if vllm_serve.looks_like(doc):
            return "vllm-bench-serve"
        raise ReportFormatError(f"unrecognised JSON object{_keys(doc)}; {_EXPECTED}")
    raise ReportFormatError(f"unrecognised JSON: top level is {json_type(doc)}; {_EXPECTED}")


def _keys(obj: object) -> str:
    if not isinstance(obj, dict):
        return ""
    names = [str(k)[:30] for k in list(obj)[:8]]
    return (" with keys " + ", ".join(names) + (", ..." if len(obj) > 8 else "")) if names \
        else " with no keys"
