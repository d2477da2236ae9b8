"""The metric catalogue: every figure the product shows, once, with its key, label, unit,
definition, which direction is better and how a level summarises it. Django-free.

The key is the one name of a metric everywhere: in the level summary the engine stores
(`metrics.summarize_level`), in imported reports, in comparison and advisor points, in charts,
CSVs and the advisor's evidence. A figure is a metric read at one statistic: `Figure("ttft_ms",
"p50")` is "TTFT p50 (ms)", named `ttft_ms_p50` where a name must be an identifier (a point's
figures, the advisor's evidence) and read from a summary at `summary["ttft_ms"]["p50"]`.

The results table, the comparison sentences, the points, the advisor's figures and the charts
say which figures they show in the lists at the end of this module. Adding a metric that
shows in the table, the charts, the CSVs and the comparisons is an entry in `METRICS` (and in
those lists) plus the code that computes it in `metrics.summarize_level`.
"""
from __future__ import annotations

from dataclasses import dataclass

HIGHER, LOWER = "higher", "lower"  # which direction is better
DISTRIBUTION, SCALAR = "distribution", "scalar"  # over the level's requests, or one per level
PERCENTILES = (50, 90, 99)
STATS = ("p50", "p90", "p99", "mean", "min", "max")  # a distribution's statistics (and "count")


@dataclass(frozen=True)
class Metric:
    key: str
    label: str  # short, for table heads, axes and sentences: "TTFT"
    name: str  # in words: "Time to first token"
    unit: str  # "ms", "tok/s", "req/s", "%", "GiB"; "" for a pure number (perplexity)
    definition: str
    better: str  # HIGHER or LOWER
    summary: str  # DISTRIBUTION (count, mean, min, max, p50/p90/p99 over requests) or SCALAR
    digits: int = 1  # decimals shown
    scale: float = 1.0  # stored value x scale = the value in `unit` (a share stored 0-1, shown in %)
    phrase: str = ""  # a comparison's verb: "{winner} decodes {ratio} faster than {loser}" ({ratio}: "1.75×";
    # a quality figure's: its difference from the winner's, "2.1 %", or in points for a share)
    quoted: str = ""  # how a sentence quotes a value: "56.0 tok/s per stream"
    needs: str = ""  # the run page shows it only for runs with this: "chat" (reasoning), "slo" or "schedule" (rate mode)
    source: str = "requests"  # computed from: "requests" (the client), "gpu" (NVML), "quality", "launch" or
    # "cost" (a level's wall time and energy at its host's stated price, engine/cost.py)
    # ("launch": a server the lab started from a recipe, engine/launcher.py's LaunchReport)

    @property
    def lower_is_better(self) -> bool:
        return self.better == LOWER


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric("ttft_ms", "TTFT", "Time to first token", "ms",
           "Request sent until the first chunk carrying generated content (text, reasoning or tool "
           "call). Role-only and usage-only chunks do not count.", LOWER, DISTRIBUTION, 1,
           phrase="{winner} reaches the first token {ratio} sooner than {loser}"),
    Metric("tpot_ms", "TPOT", "Time per output token", "ms",
           "(E2E - TTFT) / (output tokens - 1), per request; output tokens from the server's usage.",
           LOWER, DISTRIBUTION, 2),
    Metric("e2e_ms", "E2E latency", "End-to-end latency", "ms",
           "Request sent until the last content chunk.", LOWER, DISTRIBUTION, 0),
    Metric("ttft_from_schedule_ms", "TTFT from schedule", "Time to first token from the scheduled send", "ms",
           "Rate mode: when the request was due to leave (its place in the arrival schedule) until the first "
           "content chunk. Beside TTFT it shows the time a request waited in the client (behind the cap on "
           "requests in flight, or a client that fell behind) that TTFT from the actual send hides (coordinated "
           "omission).", LOWER, DISTRIBUTION, 1, needs="schedule"),
    Metric("e2e_from_schedule_ms", "E2E from schedule", "End-to-end latency from the scheduled send", "ms",
           "Rate mode: when the request was due to leave until its last content chunk.", LOWER, DISTRIBUTION, 0,
           needs="schedule"),
    Metric("itl_ms", "ITL", "Inter-token latency", "ms",
           "Gaps between content chunks (a chunk can carry several tokens).", LOWER, DISTRIBUTION, 2),
    Metric("itl_per_token_ms", "ITL per token", "Inter-token latency per token", "ms",
           "Each gap between content chunks divided by the tokens the later chunk carried (our own "
           "count).", LOWER, DISTRIBUTION, 2),
    Metric("answer_ms", "First answer token", "Time to first answer token", "ms",
           "Request sent until the first non-reasoning content (equals TTFT for models that do not "
           "reason).", LOWER, DISTRIBUTION, 1, needs="chat"),
    Metric("decode_tok_s", "Decode per stream", "Per-stream decode speed", "tok/s",
           "1 / TPOT, per request.", HIGHER, DISTRIBUTION, 1,
           phrase="{winner} decodes {ratio} faster than {loser}", quoted="tok/s per stream"),
    Metric("prefill_tok_s", "Prefill", "Prefill throughput", "tok/s",
           "Prompt tokens / TTFT, per request.", HIGHER, DISTRIBUTION, 0),
    Metric("server_decode_tok_s", "Server decode", "The server's own decode speed", "tok/s",
           "What the server reports per request (llama.cpp timings.predicted_per_second).",
           HIGHER, DISTRIBUTION, 1),
    Metric("server_prefill_tok_s", "Server prefill", "The server's own prefill speed", "tok/s",
           "What the server reports per request (llama.cpp timings.prompt_per_second).",
           HIGHER, DISTRIBUTION, 0),
    Metric("aggregate_tok_s", "Aggregate output", "Aggregate output throughput", "tok/s",
           "Output tokens of all completed requests / wall time of the level (first send until "
           "the last completion).", HIGHER, SCALAR, 1,
           phrase="{winner} delivers {ratio} the aggregate output throughput of {loser}",
           quoted="tok/s aggregate"),
    Metric("request_throughput", "Request throughput", "Request throughput", "req/s",
           "Completed requests / wall time of the level.", HIGHER, SCALAR, 2),
    Metric("goodput", "Goodput", "Goodput", "req/s",
           "Requests that met every SLO (TTFT, TPOT, E2E) per second of the level; failed "
           "requests count as missing every SLO.", HIGHER, SCALAR, 2, needs="slo"),
    Metric("goodput_ratio", "Goodput share", "Share of requests within the SLOs", "%",
           "Requests that met every SLO / all requests of the level, failed ones included.",
           HIGHER, SCALAR, 0, scale=100.0, needs="slo"),
    Metric("peak_memory_gib", "Peak GPU memory", "Peak GPU memory", "GiB",
           "The most device memory in use on the endpoint's GPUs while the level ran (NVML, whole "
           "device: weights, KV cache and anything else on it).", LOWER, SCALAR, 2, source="gpu"),
    Metric("energy_per_token_j", "Energy per token", "GPU energy per output token", "J/token",
           "The energy the endpoint's GPUs used over the level, by NVML's total-energy counter read at its "
           "start and end (Volta and newer; else their power samples integrated), over the output tokens "
           "of its completed requests. Idle draw included.", LOWER, SCALAR, 3, source="gpu",
           phrase="{winner} spends {ratio} less GPU energy per output token than {loser}", quoted="J/token"),
    Metric("idle_energy_share", "Idle share of energy", "Share of the energy the GPUs would have drawn idle",
           "%", "The GPUs' draw just before the level times the level's span, over the energy they used in it: "
           "what serving added is the rest.", LOWER, SCALAR, 0, scale=100.0, source="gpu"),
    Metric("tokens_per_joule", "Tokens per joule", "Output tokens per joule of GPU energy", "tok/J",
           "The inverse of energy per token: output tokens of the level's completed requests over the energy "
           "its GPUs used in it.", HIGHER, SCALAR, 2, source="gpu",
           phrase="{winner} serves {ratio} the tokens per joule of {loser}"),
    Metric("cost_per_mtok", "Cost per M tokens", "Cost per million output tokens", "per M tok",
           "At the host's stated price (engine/cost.py): rented, its hourly rate times the level's wall time; "
           "owned, the cards' amortisation per hour times the wall time plus the GPUs' energy (as above) at "
           "its electricity price; over the level's output tokens, times a million. In the host's currency.",
           LOWER, SCALAR, 2, source="cost"),
    # Start-up (engine/launcher.py): one figure per server the lab started from a recipe, not per level.
    Metric("health_s", "Start → /health", "Start-up time to /health", "s",
           "The server's process start until its /health answered 200 (the lab started it from a recipe).",
           LOWER, SCALAR, 2, source="launch"),
    Metric("first_token_s", "Start → first token", "Start-up time to a first token", "s",
           "The server's process start until the first token of a probe request sent once /health answered.",
           LOWER, SCALAR, 2, source="launch"),
    Metric("memory_loaded_gib", "Memory after load", "Memory after load", "GiB",
           "What the server's processes hold once it answers, before any level: GPU memory per process "
           "(NVML); where there is no GPU, their resident memory (RSS), said so beside the value. vLLM "
           "takes its --gpu-memory-utilization share at start, so this is its allocation, not its need.",
           LOWER, SCALAR, 2, source="launch"),
    # Quality (engine/quality.py): one figure per endpoint and evaluation text, not per level.
    Metric("perplexity", "Perplexity", "Perplexity on the evaluation text", "",
           "exp(mean negative log-likelihood of each actual next token), over the scored half of "
           "every window (llama-perplexity's windows: -c N --chunks M); ± its standard error.",
           LOWER, SCALAR, 3, phrase="{loser}'s perplexity is {ratio} above {winner}'s", source="quality"),
    Metric("kl_mean", "KL divergence", "Mean KL divergence from the reference", "nats",
           "KL(reference || endpoint) of the next-token distributions, summed over the reference's "
           "top-k tokens plus one bucket for the rest of the vocabulary (a lower bound of the full "
           "KL), averaged over the scored positions.", LOWER, SCALAR, 4,
           phrase="{loser}'s KL divergence from the reference is {ratio} above {winner}'s", source="quality"),
    Metric("kl_p99", "KL p99", "99th percentile of the KL divergence", "nats",
           "The per-position KL divergence (as above) that 99 % of positions stay under.",
           LOWER, SCALAR, 4, source="quality"),
    Metric("same_top_share", "Same top token", "Same top token as the reference", "%",
           "Share of scored positions where the endpoint's most likely next token is the reference's.",
           HIGHER, SCALAR, 1, scale=100.0,
           phrase="{loser}'s share of the reference's top token is {ratio} below {winner}'s", source="quality"),
    Metric("greedy_identical_share", "Greedy agreement", "Identical greedy continuation tokens", "%",
           "Same prompts, temperature 0: share of generated tokens identical to the reference's at "
           "the same position.", HIGHER, SCALAR, 1, scale=100.0,
           phrase="{loser}'s greedy agreement with the reference is {ratio} below {winner}'s", source="quality"),
    Metric("quality_tok_s", "Scoring speed", "Tokens scored per second", "tok/s",
           "Positions scored / wall time of the perplexity pass through the endpoint.",
           HIGHER, SCALAR, 1, source="quality"),
)}


def metric(key: str) -> Metric:
    try:
        return METRICS[key]
    except KeyError:
        raise KeyError(f"{key!r} is not in the metric catalogue (engine/catalogue.py)") from None


@dataclass(frozen=True)
class Figure:
    """A metric at one statistic (`stat` None for a scalar metric)."""

    key: str
    stat: str | None = None

    def __post_init__(self):
        m = metric(self.key)
        if (self.stat is None) != (m.summary == SCALAR) or (self.stat is not None and self.stat not in STATS):
            raise ValueError(f"{self.key} is a {m.summary}: {self.stat!r} is not one of its figures")

    @property
    def metric(self) -> Metric:
        return METRICS[self.key]

    @property
    def name(self) -> str:
        """The identifier: "ttft_ms_p50", "aggregate_tok_s"."""
        return self.key if self.stat is None else f"{self.key}_{self.stat}"

    @property
    def label(self) -> str:
        return self.metric.label if self.stat is None else f"{self.metric.label} {self.stat}"

    @property
    def title(self) -> str:
        """ "TTFT p50 (ms)": table heads, axis titles, CSV columns."""
        return f"{self.label} ({self.metric.unit})" if self.metric.unit else self.label

    @property
    def quoted(self) -> str:
        """How a sentence names the unit after a value: "ms TTFT p50", "tok/s per stream"."""
        return self.metric.quoted or f"{self.metric.unit} {self.label}".strip()

    def read(self, values: dict | None) -> float | None:
        """This figure from a summary-shaped dict (`{"ttft_ms": {"p50": ...}, "aggregate_tok_s": ...}`)."""
        value = (values or {}).get(self.key)
        if self.stat is not None:
            value = value.get(self.stat) if isinstance(value, dict) else None
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def number(value: float, digits: int) -> str:
    """A figure with the catalogue's decimals; past a million in powers of ten (a random-weight
    model's perplexity can be 1e27), so that a table column keeps its width."""
    return f"{value:.4g}" if abs(value) >= 1e6 else f"{value:,.{digits}f}"


def shown(f: Figure, value: float | None) -> str:
    """A value in the catalogue's unit and decimals; "—" when there is none."""
    m = f.metric
    return "—" if value is None else number(value * m.scale, m.digits)


def figure(name: str) -> Figure:
    """The figure with this identifier ("ttft_ms_p50", "aggregate_tok_s")."""
    if name in METRICS:
        return Figure(name)
    key, _, stat = name.rpartition("_")
    if key in METRICS and stat in STATS:
        return Figure(key, stat)
    raise KeyError(f"{name!r} names no figure of the metric catalogue (engine/catalogue.py)")


@dataclass(frozen=True)
class Column:
    """A column (group) of the run page's results table: a metric at these statistics."""

    key: str
    stats: tuple[str, ...] = ()

    @property
    def metric(self) -> Metric:
        return METRICS[self.key]

    @property
    def figures(self) -> tuple[Figure, ...]:
        return tuple(Figure(self.key, s) for s in self.stats) if self.stats else (Figure(self.key),)


# What each place shows, in order -----------------------------------------------------------
# The run page's results table, one column (group) per entry.
RESULTS_TABLE = (
    Column("ttft_ms", ("p50", "p90", "p99")), Column("tpot_ms", ("p50", "p90", "p99")),
    Column("e2e_ms", ("p50", "p90", "p99")), Column("ttft_from_schedule_ms", ("p99",)),
    Column("e2e_from_schedule_ms", ("p99",)), Column("answer_ms", ("p50",)),
    Column("decode_tok_s", ("p50",)), Column("aggregate_tok_s"), Column("prefill_tok_s", ("p50",)),
    Column("server_decode_tok_s", ("p50",)), Column("goodput"), Column("goodput_ratio"),
)
# The run page's first screen: per endpoint and load, its throughput and latency in one line.
HEADLINE = (Figure("aggregate_tok_s"), Figure("decode_tok_s", "p50"), Figure("ttft_ms", "p50"),
            Figure("e2e_ms", "p99"))
# A comparison or advisor point: one load level's headline figures (engine.points.Point).
POINT_FIGURES = (Figure("ttft_ms", "p50"), Figure("ttft_ms", "p90"), Figure("ttft_ms", "p99"),
                 Figure("tpot_ms", "p50"), Figure("decode_tok_s", "p50"), Figure("aggregate_tok_s"),
                 Figure("peak_memory_gib"), Figure("energy_per_token_j"), Figure("tokens_per_joule"))
# What the comparison page's table shows of each point, and what its sentences compare.
COMPARISON_TABLE = POINT_FIGURES[:6] + (Figure("energy_per_token_j"),)
COMPARED = (Figure("decode_tok_s", "p50"), Figure("aggregate_tok_s"), Figure("ttft_ms", "p50"),
            Figure("energy_per_token_j"))
# The throughput chart: the left axis (solid lines) and the right one (dotted).
THROUGHPUT_CHART = (Figure("aggregate_tok_s"), Figure("decode_tok_s", "p50"))
# The energy chart: what a joule of the GPUs' energy served, against load.
ENERGY_CHART = (Figure("tokens_per_joule"),)
# The run page's sweep table (servers started from recipes): per setting and load level; and the
# figure that picks each recipe's best setting (goodput when the run has SLOs).
SWEEP_TABLE = (Figure("aggregate_tok_s"), Figure("ttft_ms", "p99"))
SWEEP_BEST, SWEEP_BEST_SLO = Figure("aggregate_tok_s"), Figure("goodput")
# The run page's per-level distribution charts (chart name in its URL -> a per-request metric).
DISTRIBUTION_CHARTS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
# What the advisor reads of each evidence row (advisor.specs.Evidence has one field per name).
ADVISOR_FIGURES = (Figure("ttft_ms", "p50"), Figure("ttft_ms", "p90"), Figure("tpot_ms", "p50"),
                   Figure("decode_tok_s", "p50"), Figure("aggregate_tok_s"), Figure("peak_memory_gib"),
                   Figure("energy_per_token_j"))
# The requests CSV: each request's value of these per-request metrics, after its stored fields.
REQUEST_CSV = ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_from_schedule_ms", "e2e_from_schedule_ms", "server_decode_tok_s")
# A comparison's start-up table (series served by servers the lab started) and the decision page's
# measured start-up: per launch, not per level.
LAUNCH_FIGURES = (Figure("health_s"), Figure("first_token_s"), Figure("memory_loaded_gib"))
# A comparison's quality table (and its CSV), and what its quality sentences compare.
COMPARISON_QUALITY = (Figure("perplexity"), Figure("kl_mean"), Figure("kl_p99"), Figure("same_top_share"),
                      Figure("greedy_identical_share"))
QUALITY_COMPARED = (Figure("perplexity"), Figure("kl_mean"), Figure("same_top_share"),
                    Figure("greedy_identical_share"))
# A workload's history page (one chart each, over time) and what each new run is tested on for a
# regression against its comparable runs (engine/regression.py).
HISTORY_FIGURES = (Figure("aggregate_tok_s"), Figure("decode_tok_s", "p50"), Figure("ttft_ms", "p50"),
                   Figure("tpot_ms", "p50"), Figure("energy_per_token_j"))




@dataclass(frozen=True)
class Series:
    """A figure sampled over time while levels ran (a column of gpu_series or server_series)."""

    key: str
    label: str
    unit: str
    definition: str
    source: str  # "gpu" (NVML, per GPU) or "server" (its /metrics)
    scale: float = 1.0  # stored value x scale = the value in `unit`

    @property
    def title(self) -> str:
        return f"{self.label} ({self.unit})"


SERIES: dict[str, Series] = {s.key: s for s in (
    Series("memory_used_mib", "GPU memory", "GiB", "Device memory in use (NVML, the whole GPU).", "gpu",
           1 / 1024),
    Series("utilization_gpu", "GPU utilization", "%", "Share of the last sample period in which a kernel "
           "ran (NVML).", "gpu"),
    Series("utilization_memory", "GPU memory busy", "%", "Share of the last sample period in which device "
           "memory was read or written (NVML).", "gpu"),
    Series("temperature_c", "GPU temperature", "°C", "The GPU's core temperature (NVML).", "gpu"),
    Series("power_w", "GPU power", "W", "The board's power draw (NVML).", "gpu"),
    Series("running", "Running requests", "requests", "Requests the server was decoding, from its own "
           "/metrics.", "server"),
    Series("waiting", "Waiting requests", "requests", "Requests queued in the server, not yet started, "
           "from its own /metrics.", "server"),
    Series("kv_cache_usage", "KV cache use", "0–1", "Share of the server's KV cache in use, from its own "
           "/metrics.", "server"),
)}
# The run page's telemetry charts, one panel (or trace) per entry.
GPU_CHART = tuple(SERIES[k] for k in ("memory_used_mib", "utilization_gpu", "temperature_c", "power_w"))
SERVER_CHART = tuple(SERIES[k] for k in ("running", "waiting", "kv_cache_usage"))


@dataclass(frozen=True)
class GpuLevelFigure:
    """One figure of the run page's GPUs side by side: a GPU series read over one level (its
    statistic, and the engine's GpuStats field that holds it)."""

    series: Series
    stat: str  # "peak" | "mean"
    field: str
    digits: int = 0  # shown with this many decimals, in the series' unit

    @property
    def title(self) -> str:
        return f"{self.stat.capitalize()} {self.series.label} ({self.series.unit})"


GPU_SIDE_BY_SIDE = (GpuLevelFigure(SERIES["memory_used_mib"], "peak", "peak_memory_used_mib", 2),
                    GpuLevelFigure(SERIES["utilization_gpu"], "mean", "mean_utilization_gpu"),
                    GpuLevelFigure(SERIES["utilization_memory"], "mean", "mean_utilization_memory"))


@dataclass(frozen=True)
class Note:
    """How a kind of figure is made, beside the metrics' definitions (not a metric of its own)."""

    key: str
    label: str
    definition: str
    unit: str = ""
    better: str = ""


ACROSS_TRIALS = Note(
    "across_trials", "Mean and 95 % interval across trials",
    "A run with n trials (n ≥ 2) measures every level n times; each figure shown is the mean of its n "
    "trials' values (a percentile is each trial's percentile over that trial's requests, then averaged), "
    "and ± is the half-width of its Student-t 95 % confidence interval: t(0.975, n − 1) × s / √n, s the "
    "standard deviation of the n values. With one trial no interval is shown. A comparison calls one "
    "series faster than another only when Welch's t-test (unequal variances, Welch–Satterthwaite degrees "
    "of freedom, two-sided, 5 %) finds the difference significant; with one trial on either side it says "
    "so and claims nothing.")
SLO_SEARCH = Note(
    "slo_search", "Load within the SLOs",
    "The highest number of concurrent users (closed loop) at which every trial's level kept each SLO at "
    "its percentile (p50, p90 or p99 over its requests) with no failed request; found by bisection over "
    "whole concurrency levels from 1 to the highest asked, at most 2 + ⌈log2(highest − 1)⌉ levels, each "
    "of the run's requests per level; or the highest request rate (open loop, sent as the run's arrivals "
    "say) on a grid of rates each a fixed step above the last, so the rate found meets the SLOs and the "
    "next one up on the grid misses them. It assumes latency grows with load. Beside the answer, its "
    "level's figures across the trials, each with its 95 % confidence interval (Student t).")


def definitions() -> list[Metric | Series]:
    """Every entry, in catalogue order: the run page's "How each number is defined"."""
    return [*METRICS.values(), *SERIES.values()]
