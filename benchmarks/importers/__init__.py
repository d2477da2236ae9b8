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
from ._fields import MAX_BYTES, json_type, load_documents
from .model import KINDS, LATENCY_KEYS, ImportedLevel, ImportedReport, ReportFormatError
from .published import v100_writeup_reports

__all__ = ["KINDS", "LATENCY_KEYS", "MAX_BYTES", "ImportedLevel", "ImportedReport",
           "ReportFormatError", "detect_kind", "parse_report", "v100_writeup_reports"]

_PARSEABLE = ("vllm-bench-serve", "guidellm", "llama-bench")
_EXPECTED = ("expected a vllm bench serve result (object with 'mean_ttft_ms', "
             "'request_throughput', ...), a GuideLLM report (object with 'benchmarks') or "
             "llama-bench -o json output (array of entries with 'avg_ts')")


def parse_report(data: bytes, filename: str = "", kind: str | None = None) -> ImportedReport:
    """Parse an uploaded result file. `kind` None means: detect it from the content."""
    try:
        return _parse(data, filename, kind)
    except ReportFormatError:
        raise
    except RecursionError:
        raise ReportFormatError("not usable JSON: nested too deeply") from None
    except Exception as exc:  # a gap in validation must still reach the user as a clear error
        raise ReportFormatError(f"could not read the file ({type(exc).__name__}: {exc})") from None


def _parse(data: bytes, filename: str, kind: str | None) -> ImportedReport:
    if kind is not None and kind not in _PARSEABLE:
        if kind == "published":
            raise ReportFormatError("kind 'published' is built in "
                                    "(published.v100_writeup_reports()), not parsed from files")
        raise ReportFormatError(f"unknown kind {kind!r}; expected one of {', '.join(_PARSEABLE)}")
    lower = (filename or "").lower()
    try:
        docs = load_documents(data)
    except ReportFormatError as exc:
        if lower.endswith((".yaml", ".yml", ".csv", ".md")) and str(exc).startswith("not JSON"):
            raise ReportFormatError(
                f"{exc}; only JSON is read — save GuideLLM / llama-bench results as JSON "
                "(llama-bench -o json, GuideLLM --outputs json)") from None
        raise
    kind = kind or detect_kind(docs)

    if kind == "vllm-bench-serve":
        report = vllm_serve.parse(docs if len(docs) > 1 else _as_list_of_objects(docs[0]))
    elif kind == "guidellm":
        if len(docs) > 1:
            raise ReportFormatError(f"{guidellm.WHERE}: expected one JSON document, "
                                    f"found {len(docs)} (JSON Lines)")
        report = guidellm.parse(docs[0])
    else:
        report = llama_bench.parse(docs if len(docs) > 1 else docs[0])

    if not any(level.has_figures() for level in report.levels):
        raise ReportFormatError(f"{report.tool_label}: nothing to chart — no level states a "
                                "usable figure (no successful requests, or only pp+tg tests)")
    if filename:
        report.raw_meta.setdefault("filename", filename[:200])
    return report


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
