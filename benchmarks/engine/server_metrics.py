"""The server's own view of a run: its Prometheus /metrics, sampled on the client's clock, and
who it says it is (each backend's identity endpoints: vLLM /version, llama-server /props and
/slots, SGLang /get_model_info and /get_server_info, ...).

Backends name the same figures differently, and rename some between versions; `scrape()` maps
them onto one set of keys (`backends.METRIC_KEYS`, each backend's `metrics` says its names) and
sums over label sets (model_name, engine, ...). Parsing is prometheus_client's (the library vLLM
itself exports with), fed only the lines we chart: a whole vLLM page (hundreds of histogram
buckets) takes 20-30 ms to parse, which would stall the event loop that is timing requests;
picking our lines and parsing them takes about 0.5 ms.
"""
from __future__ import annotations

import asyncio
import functools
import math
import time
from dataclasses import asdict, dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from . import backends
from .backends import HISTOGRAM_KEYS, METRIC_KEYS, trim  # noqa: F401 (trim: re-exported)

# Status codes that mean "this server has no /metrics for us": 404 (no route), 501 (llama-server
# started without --metrics answers 501 not_supported_error), 401/403 (behind an API key).
_UNAVAILABLE = (401, 403, 404, 405, 501)


@dataclass(frozen=True)
class _Names:
    figures: dict  # key -> sample names over every backend, each backend's newer name first
    histograms: dict  # key -> histogram names (we read <name>_sum and <name>_count)
    wanted: frozenset  # every sample line we parse
    owners: tuple  # (backend name, the sample names only it exports), to say whose page it is


@functools.lru_cache(maxsize=8)
def _names_of(registered: tuple) -> _Names:
    figures: dict = {k: () for k in METRIC_KEYS if k not in HISTOGRAM_KEYS}
    histograms: dict = {k: () for k in METRIC_KEYS if k in HISTOGRAM_KEYS}
    owners = []
    for backend in registered:
        own = set()
        for key, sample_names in backend.metrics.items():
            if key in HISTOGRAM_KEYS:
                histograms[key] += sample_names
                own.update(n + suffix for n in sample_names for suffix in ("_sum", "_count"))
            else:
                figures[key] += sample_names
                own.update(sample_names)
        owners.append((backend.name, frozenset(own)))
    wanted = frozenset().union(*(own for _, own in owners))
    return _Names(figures, histograms, wanted, tuple(owners))


def _names() -> _Names:
    """The sample names of the backends registered now (one registered later is included)."""
    return _names_of(tuple(backends.BACKENDS.values()))


def _sample_lines(text: str, wanted: frozenset) -> str:
    """Only the sample lines we chart, found with str.find (C speed: ~0.2 ms on a 50 KB vLLM
    page, against ~0.5 ms splitting it into lines). Comments are dropped too: without a TYPE
    line the parser keeps each sample's name exactly as written (it renames counters else)."""
    text = "\n" + text
    keep = []
    for name in wanted:
        needle = "\n" + name
        i = text.find(needle)
        while i >= 0:
            end = text.find("\n", i + 1)
            line = text[i + 1:end if end >= 0 else None]
            if line[len(name):len(name) + 1] in ("{", " ", "\t"):  # not a longer name
                keep.append(line)
            i = text.find(needle, i + 1)
    return "\n".join(keep) + "\n"


def parse_samples(text: str) -> dict[str, float]:
    """Sample name -> value summed over its label sets, for the names the backends map."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(_sample_lines(text, _names().wanted)):
        for s in family.samples:
            if math.isfinite(s.value):  # NaN would not survive a PostgreSQL jsonb column
                totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


def scrape(text: str) -> dict:
    """The figures we chart from one /metrics page, under our own keys (`METRIC_KEYS`;
    histograms give `<key>_sum` and `<key>_count`). Keys the server does not export are
    absent. `dialect` is the backend whose names the page uses, or None."""
    names = _names()
    raw = parse_samples(text)
    out: dict = {}
    for key, sample_names in names.figures.items():
        for name in sample_names:
            if name in raw:
                out[key] = raw[name]
                break
    for key, sample_names in names.histograms.items():
        for name in sample_names:
            if name + "_count" in raw:
                out[key + "_sum"] = raw.get(name + "_sum")
                out[key + "_count"] = raw[name + "_count"]
                break
    out["dialect"] = next((backend for backend, own in names.owners if not own.isdisjoint(raw)), None)
    return out


@dataclass
class MetricsSample:
    t: float  # time.perf_counter() when the scrape was sent (the client's clock)
    rtt_s: float  # until the page was read; the server's gauges are from within [t, t + rtt_s]
    values: dict = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def server_was_idle(first_sample) -> bool | None:
    """True when nothing was running or waiting at the first sample; None when unknown.
    Takes a MetricsSample or its `values` dict."""
    values = first_sample.values if isinstance(first_sample, MetricsSample) else first_sample
    if not values:
        return None
    running, waiting = values.get("running"), values.get("waiting")
    if running is None or waiting is None:
        return None
    return running == 0 and waiting == 0


SERIES_FIELDS = ("running", "waiting", "kv_cache_usage", "prompt_tokens_total", "generation_tokens_total")
_GAUGES = ("running", "waiting", "kv_cache_usage")
_COUNTERS = tuple(k for k in METRIC_KEYS if k.endswith("_total"))
_HISTOGRAMS = tuple(k for k in METRIC_KEYS if k in HISTOGRAM_KEYS)
STORED_VERSION = 2  # of server_summary and server_series; rows without "version" read the same


@dataclass(frozen=True)
class ServerSeries:
    """Scraped samples as columns for storage and charts: `t` and one column per figure the
    server exported (SERIES_FIELDS)."""

    t: list = field(default_factory=list)
    columns: dict = field(default_factory=dict)  # field -> [...]

    def column(self, name: str) -> list:
        return self.columns.get(name) or []

    def shifted(self, t0: float) -> "ServerSeries":
        return ServerSeries([round(t - t0, 4) for t in self.t], self.columns)

    def to_dict(self) -> dict:
        """{"version", "t": [...], field: [...]}; no samples: {} (nothing stored)."""
        if not self.t:
            return {}
        return {"version": STORED_VERSION, "t": list(self.t), **self.columns}

    @classmethod
    def from_dict(cls, data) -> "ServerSeries":
        data = data if isinstance(data, dict) else {}
        return cls(list(data.get("t") or []),
                   {f: list(data[f]) for f in SERIES_FIELDS if isinstance(data.get(f), list)})


def series(samples: list[MetricsSample]) -> ServerSeries:
    ok = [s for s in samples if s.error is None]
    columns = {f: [s.values.get(f) for s in ok] for f in SERIES_FIELDS if any(f in s.values for s in ok)}
    return ServerSeries([s.t for s in ok], columns)


@dataclass(frozen=True)
class ServerSummary:
    """One level from the server's side: whether it was idle at the start, how full it got
    (`maxima` of its gauges), and what its counters (`deltas`, keyed without "_total") and
    histograms (`means`, seconds, keyed without "_seconds": the server's own TTFT/ITL) add up
    to over the sampled span. `dialect`: the backend whose /metrics names it used."""

    status: str = ""
    samples: int = 0
    errors: int = 0
    idle_at_start: bool | None = None
    span_s: float | None = None
    dialect: str | None = None
    maxima: dict = field(default_factory=dict)
    deltas: dict = field(default_factory=dict)
    means: dict = field(default_factory=dict)

    @property
    def max_running(self):
        return self.maxima.get("running")

    @property
    def max_waiting(self):
        return self.maxima.get("waiting")

    @property
    def max_kv_cache_usage(self):
        return self.maxima.get("kv_cache_usage")

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Share of the prompt tokens looked up in the prefix cache that it held, over the level
        (vLLM's prefix_cache_hits / prefix_cache_queries); None where the server exports neither."""
        hits, queries = self.deltas.get("cached_prompt_tokens"), self.deltas.get("prefix_cache_queries")
        return hits / queries if hits is not None and queries else None

    def to_dict(self) -> dict:
        """Flat, as first stored: max_<gauge>, <counter>_delta, <histogram>_mean_s."""
        out: dict = {"version": STORED_VERSION, "status": self.status, "samples": self.samples,
                     "errors": self.errors, "idle_at_start": self.idle_at_start}
        if self.span_s is not None:
            out["span_s"] = self.span_s
        out.update({f"max_{k}": v for k, v in self.maxima.items()})
        out.update({f"{k}_delta": v for k, v in self.deltas.items()})
        out.update({f"{k}_mean_s": v for k, v in self.means.items()})
        if self.samples:
            out["dialect"] = self.dialect
        return out

    @classmethod
    def from_dict(cls, data) -> "ServerSummary":
        """Every version is the flat shape; rows without "version" are the first ones."""
        data = data if isinstance(data, dict) else {}
        maxima, deltas, means = {}, {}, {}
        for key, value in data.items():
            if key.startswith("max_"):
                maxima[key.removeprefix("max_")] = value
            elif key.endswith("_delta"):
                deltas[key.removesuffix("_delta")] = value
            elif key.endswith("_mean_s"):
                means[key.removesuffix("_mean_s")] = value
        return cls(status=data.get("status") or "", samples=data.get("samples") or 0,
                   errors=data.get("errors") or 0, idle_at_start=data.get("idle_at_start"),
                   span_s=data.get("span_s"), dialect=data.get("dialect"),
                   maxima=maxima, deltas=deltas, means=means)


def summary(samples: list[MetricsSample], status: str = "") -> ServerSummary:
    """What the server's counters and histograms add up to over the sampled span (last -
    first)."""
    ok = [s for s in samples if s.error is None]
    if not ok:
        return ServerSummary(status=status, errors=len(samples))
    maxima = {}
    for f in _GAUGES:
        v = [s.values[f] for s in ok if s.values.get(f) is not None]
        if v:
            maxima[f] = max(v)
    first, last = ok[0].values, ok[-1].values
    deltas = {c.removesuffix("_total"): last[c] - first[c] for c in _COUNTERS if c in first and c in last}
    means = {}
    for h in _HISTOGRAMS:
        n0, n1 = first.get(h + "_count"), last.get(h + "_count")
        if n0 is not None and n1 is not None and n1 > n0:
            means[h.removesuffix("_seconds")] = (last[h + "_sum"] - first[h + "_sum"]) / (n1 - n0)
    return ServerSummary(status=status, samples=len(ok), errors=len(samples) - len(ok),
                         idle_at_start=server_was_idle(ok[0]), span_s=ok[-1].t - ok[0].t,
                         dialect=last.get("dialect"), maxima=maxima, deltas=deltas, means=means)


def _reason(response: httpx.Response) -> str:
    text = " ".join(response.text.split())[:200]
    return f"HTTP {response.status_code}" + (f" ({text})" if text else "")


class MetricsSampler:
    """Scrapes `<base_url>/metrics` every `interval_s` as an asyncio task, on an absolute grid
    of `time.perf_counter()` ticks (missed ticks are skipped, never shifted). A server with no
    /metrics (404, 501 from llama-server without --metrics, 401/403) sets `status` to
    "not available: HTTP <code> ..." and the task ends; it never raises into the caller.
    Other failures (a timeout, a 500) are recorded as samples with `error` and sampling goes on.

        sampler = MetricsSampler(url, client=client); sampler.start(); ...; await sampler.stop()
    """

    def __init__(self, base_url: str, interval_s: float = 0.5, client: httpx.AsyncClient | None = None,
                 timeout_s: float = 5.0, clock=time.perf_counter):
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.client = client  # pass the run's client to reuse its auth headers and pool
        self._own_client = client is None
        self.timeout_s = timeout_s
        self.clock = clock
        self.status = "not started"
        self.samples: list[MetricsSample] = []
        self.skipped_ticks = 0
        self._task: asyncio.Task | None = None
        self._first_done: asyncio.Event | None = None

    def start(self) -> None:
        """Call from inside the running event loop."""
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=self.timeout_s)
        self.status = "running"
        self._first_done = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metrics-sampler")

    async def first_scraped(self) -> None:
        """Returns once the first scrape has its answer (or the task ended): a level begun after
        it cannot be counted in the sample that says whether the server was idle at the start."""
        if self._first_done is None or self._task is None:
            return
        waiter = asyncio.ensure_future(self._first_done.wait())
        try:
            await asyncio.wait([waiter, self._task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()

    async def _scrape_once(self) -> bool:
        """One scrape into self.samples; False when the endpoint is not available."""
        t = self.clock()
        try:
            r = await self.client.get(self.url, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            self.samples.append(MetricsSample(t, self.clock() - t, error=f"{type(exc).__name__}: {exc}"))
            return True
        rtt = self.clock() - t
        if r.status_code in _UNAVAILABLE:
            self.status = f"not available: {_reason(r)}"
            return False
        if r.status_code != 200:
            self.samples.append(MetricsSample(t, rtt, error=_reason(r)))
            return True
        try:
            values = scrape(r.text)
        except ValueError as exc:  # a line the parser rejects: keep the run going, say so
            self.samples.append(MetricsSample(t, rtt, error=f"unparsable /metrics: {exc}"))
            return True
        self.samples.append(MetricsSample(t, rtt, values))
        return True

    async def _run(self) -> None:
        start = self.clock()
        k = 0
        while await self._scrape_once():
            self._first_done.set()
            k += 1
            now = self.clock()
            late = int((now - start) / self.interval_s) + 1
            if late > k:
                self.skipped_ticks += late - k
                k = late
            await asyncio.sleep(start + k * self.interval_s - now)

    async def stop(self, final_scrape: bool = True) -> list[MetricsSample]:
        """Ends the task (an in-flight scrape is cancelled) and, if the endpoint answered,
        takes one last scrape so counters cover the whole measured span."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # our caller was cancelled: pass it on
                    raise
            except Exception as exc:  # a bug here must not fail the run being measured
                self.status = f"error: {type(exc).__name__}: {exc}"
            self._task = None
            if self.status == "running" and final_scrape:
                await self._scrape_once()
            if self.status == "running":
                errors = [s.error for s in self.samples if s.error]
                self.status = ("ok" if len(errors) < len(self.samples)
                               else f"failed: {errors[-1] if errors else 'no samples'}")
        if self._own_client and self.client is not None:
            await self.client.aclose()
            self.client = None
        return self.samples

    def summary(self) -> ServerSummary:
        return summary(self.samples, self.status)

    def series(self) -> ServerSeries:
        return series(self.samples)


# ---------------------------------------------------------------------------------- identity
async def _get_json(client: httpx.AsyncClient, url: str, notes: list[str], timeout_s: float):
    try:
        r = await client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        notes.append(f"GET {url}: {type(exc).__name__}: {exc}")
        return None
    if r.status_code != 200:
        notes.append(f"GET {url}: {_reason(r)}")
        return None
    try:
        return r.json()
    except ValueError:
        notes.append(f"GET {url}: not JSON")
        return None


@dataclass(frozen=True)
class StoredIdentity:
    """What a run keeps of one endpoint's server (Run.server_config[endpoint id]): what
    `server_identity` read and what the inventory declared when the run measured it
    (history.declared_identity). The one reader of that stored shape."""

    said: dict = field(default_factory=dict)  # server_identity's answer: "backend" and its identity
    declared_version: str = ""
    declared_flags: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, config) -> "StoredIdentity":
        config = config if isinstance(config, dict) else {}
        declared = config.get("declared") if isinstance(config.get("declared"), dict) else {}
        flags = declared.get("launch_flags")
        return cls({k: v for k, v in config.items() if k != "declared"}, str(declared.get("engine_version") or ""),
                   dict(flags) if isinstance(flags, dict) else {})

    @property
    def backend(self) -> backends.Backend:
        """Its backend's reading (a plain OpenAI server's where the name is not registered here)."""
        try:
            return backends.get(str(self.said.get("backend") or ""))
        except backends.UnknownBackend:
            return backends.Backend()

    @property
    def version(self) -> str:
        """The version the server said it was ("" when it said none)."""
        return self.backend.served_version(self.said)

    @property
    def flags(self) -> dict:
        """The flags the inventory declared, with the settings the server reported beside them."""
        reported = self.backend.reported_flags(self.said)
        return {**self.declared_flags, **{k: v for k, v in reported.items() if k not in self.declared_flags}}


async def server_identity(client: httpx.AsyncClient, base_url: str, backend: str,
                          timeout_s: float = 5.0) -> dict:
    """What the server says it is, small enough to store with the run: what its backend reads
    from its identity endpoints (`Backend.identity`). Every call is optional: what fails is
    listed in `notes`, nothing raises."""
    base = base_url.rstrip("/")
    notes: list[str] = []
    out: dict = {"backend": backend}
    try:
        engine = backends.get(backend)
    except backends.UnknownBackend as exc:
        notes.append(str(exc))
        engine = None

    async def get(*paths: str):
        """The first of `paths` that answers JSON; only the last failure is noted (the earlier
        paths are other releases' names for the same thing)."""
        for i, path in enumerate(paths):
            value = await _get_json(client, base + path, notes if i == len(paths) - 1 else [], timeout_s)
            if value is not None:
                return value
        return None

    if engine is not None:
        try:
            out.update(await engine.identity(get))
        except Exception as exc:  # a surprising answer must not fail the run being measured
            notes.append(f"reading the identity failed: {type(exc).__name__}: {exc}")
    out["notes"] = notes
    return out
