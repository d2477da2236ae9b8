"""Fit the step-time model (steptime.py) to the figure table (figures.csv) and check it where it was
never fitted: leave one GPU out, leave one source out. Writes fitted.json, which the advisor reads.

    python -m benchmarks.advisor.fit            # refit and rewrite benchmarks/advisor/fitted.json
    python -m benchmarks.advisor.fit --check    # refit and fail if fitted.json is not what it gives

Deterministic: the same table gives the same file (a fixed start, no randomness, rounded output).
Needs numpy and scipy (requirements-test.txt); the advisor itself reads only the JSON.

Each engine is fitted on its own rows by robust least squares on log(predicted / published), each
row weighted by 1 / sqrt(its source's rows) so one large table does not outvote ten small ones,
with a weak pull of every parameter toward its physical default (steptime.PARAMETERS) and of each
architecture's factor toward 1. The band an estimate carries is the 10th to 90th percentile of
log(published / predicted) for figures of its kind (speed, per-token time, time to first token;
one user or several) when each GPU in turn was left out of the fit: what the model's error was on
GPUs it had not seen. Where one GPU holds most figures of a kind, leaving it out leaves nothing to
fit them on: that band is the fit's own spread instead, and fitted.json says so (band_basis).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from .backends import engine_of
from .gpus import peak_of
from .memory import kv_bytes_per_token
from .model_shapes import BY_NAME
from .steptime import ARCH_FACTORS, PARAMETERS, Params, predict_arrays

HERE = Path(__file__).resolve().parent
TABLE = HERE / "figures.csv"
FITTED = HERE / "fitted.json"
FORMAT_VERSION = 1

# The table's metric -> the model's figure (steptime.Predicted) it is compared with.
FIGURE_OF = {"decode_tok_s": "decode_tok_s", "per_user_tok_s": "decode_tok_s", "tpot_ms": "tpot_ms",
             "output_tok_s": "output_tok_s", "total_tok_s": "output_tok_s", "ttft_ms": "ttft_p50_ms",
             "prefill_tok_s": "prefill_tok_s", "batch_decode_tok_s": "batch_decode_tok_s", "ttft_p90_ms": "ttft_p90_ms",
             "request_tok_s": "request_tok_s", "latency_s": "latency_s"}
# Which band a figure's error counts toward, in its own unit: speeds (tok/s), per-token and batch
# times, or the time to first token (queueing makes it the hardest to predict); each for one user
# alone and for several ("-many": the server's batching and queueing, far less often published).
KIND = {"ttft_ms": "ttft", "ttft_p90_ms": "ttft", "tpot_ms": "time", "latency_s": "time"}
FAMILIES = ("speed", "time", "ttft", "speed-many", "time-many", "ttft-many")


def family_of(metric: str, users: float) -> str:
    return KIND.get(metric, "speed") + ("-many" if users > 1 else "")
MIN_BAND_FIGURES = 10
ONE_GPU = 0.8  # a family whose figures are more than this share one GPU's (or source's) has no band held out by it
PRIOR_WEIGHT = 0.05  # per parameter, in log units: a weak pull toward the physical default
ARCH_WEIGHT = 0.5  # per architecture factor, toward 1
BOUNDS = {"bw_eff_16": (0.05, 1.0), "bw_eff_8": (0.05, 1.0), "bw_eff_4": (0.05, 1.0), "mma_eff": (0.005, 1.0),
          "kv_eff": (0.01, 1.0),
          "pf_eff": (0.005, 1.0)}


def load_table(path: Path = TABLE) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class Row:
    """A table row the model can predict: its setup's numbers and what was published."""

    index: int
    engine: str
    gpu: str
    source: str
    metric: str
    value: float
    url: str
    family: str  # its band's (family_of)
    group: tuple  # (gpus, split, link, arrival): evaluated together
    numbers: dict


def usable(rows: list[dict]) -> tuple[list[Row], list[tuple[int, str]]]:
    """The rows with a known GPU, model shape, weight format and lengths; the others with why not."""
    out, left = [], []
    for i, r in enumerate(rows):
        engine = engine_of(r["engine"])
        peak = peak_of(r["gpu"])
        shape = BY_NAME.get(r["shape"])
        fmt = engine.formats.get(r["quant"].lower())
        # a dataset's lengths that vary per request (ShareGPT) and are not stated: no setup to predict
        lengths = all((r.get(k) or "").strip() for k in ("prompt_tokens", "output_tokens", "users"))
        if peak is None or shape is None or fmt is None or r["metric"] not in FIGURE_OF or not lengths:
            left.append((i, "no datasheet row" if peak is None else "no model shape" if shape is None
                         else "no weight format" if fmt is None else "metric not modelled"
                         if r["metric"] not in FIGURE_OF else "no prompt, output or user count"))
            continue
        value = float(r["value"])
        prompt, output = float(r["prompt_tokens"]), float(r["output_tokens"])
        if r["metric"] == "total_tok_s":  # input and output counted: the output's share of it
            value = value * output / (prompt + output)
        decode_tflops, prefill_tflops = fmt.tflops(peak)
        numbers = dict(
            weight_bytes=fmt.weight_bytes(shape.params_b, shape.embedding_params_b),
            kv_bytes_per_token=kv_bytes_per_token(shape),
            params_b=shape.params_b, layers=shape.layers, attention_width=shape.attention_heads * shape.head_dim,
            bits=fmt.bits, bandwidth_gbs=peak.bandwidth_gbs, decode_tflops=decode_tflops,
            prefill_tflops=prefill_tflops, users=float(r["users"]), prompt_tokens=prompt,
            output_tokens=output, depth=float(r.get("depth") or 0), slots=float(r.get("slots") or 256))
        # The KV cache holds only so many sequences at this context: the pool stated, or what vLLM's
        # default share of the GPU (engine.memory_share) leaves after the weights and its runtime.
        cards = int(r["gpu_count"]) if r["split"] == "tp" else 1
        pool = float(r["kv_pool_gib"]) * 1024**3 if r.get("kv_pool_gib") else None
        share = engine.memory_share(None)
        if pool is None and share:
            pool = share * peak.memory_gib * 1024**3 - numbers["weight_bytes"] / cards \
                - engine.runtime_overhead_gib * 1024**3
        if pool is not None:
            per_sequence = (numbers["depth"] + prompt + output) * numbers["kv_bytes_per_token"]
            numbers["slots"] = min(numbers["slots"], max(1.0, pool * cards // per_sequence))
        group = (int(r["gpu_count"]), r["split"] if int(r["gpu_count"]) > 1 else "",
                 r["interconnect"] if int(r["gpu_count"]) > 1 else "", r.get("arrival") or "closed")
        out.append(Row(i, r["engine"], r["gpu"], r["source"], r["metric"], value, r.get("url", ""),
                       family_of(r["metric"], float(r["users"])), group, numbers))
    return out, left


def _arches(rows: list[Row]) -> list[str]:
    return sorted({peak_of(r.gpu).architecture for r in rows})


class Problem:
    """One engine's rows as arrays, and the map from a parameter vector to Params."""

    def __init__(self, rows: list[Row], arches: list[str]):
        import numpy as np
        self.rows, self.arches = rows, arches
        self.names = list(PARAMETERS)
        self.groups = {}
        for g in sorted({r.group for r in rows}):
            idx = [k for k, r in enumerate(rows) if r.group == g]
            cols = {key: np.array([rows[k].numbers[key] for k in idx]) for key in rows[0].numbers}
            arch = np.array([arches.index(peak_of(rows[k].gpu).architecture) for k in idx])
            self.groups[g] = (np.array(idx), SimpleNamespace(**cols, gpus=g[0], split=g[1], link=g[2], arrival=g[3]),
                              arch)
        self.observed = np.log(np.array([r.value for r in rows]))
        counts = {}
        for r in rows:
            counts[r.source] = counts.get(r.source, 0) + 1
        self.weights = np.array([1 / math.sqrt(counts[r.source]) for r in rows])
        self.figures = [FIGURE_OF[r.metric] for r in rows]
        # per group, which of its rows read which figure: one fancy-indexed copy per figure
        self.picks = {g: [(f, np.array([k for k, i in enumerate(idx) if self.figures[i] == f]))
                          for f in sorted({self.figures[i] for i in idx})]
                      for g, (idx, _, _) in self.groups.items()}
        self.x0 = np.array([math.log(PARAMETERS[n]) for n in self.names] + [0.0] * (len(arches) * len(ARCH_FACTORS)))

    def params(self, x) -> tuple[Params, object]:
        import numpy as np
        values = {n: math.exp(v) for n, v in zip(self.names, x[:len(self.names)])}
        factors = np.exp(np.array(x[len(self.names):]).reshape(len(self.arches), len(ARCH_FACTORS)))
        arch = {a: {f: float(factors[i, j]) for j, f in enumerate(ARCH_FACTORS)} for i, a in enumerate(self.arches)}
        return Params(values, arch), factors

    def predicted(self, x):
        import numpy as np
        p, factors = self.params(x)
        out = np.empty(len(self.rows))
        for g, (idx, s, arch) in self.groups.items():
            pred = predict_arrays(p, s, factors[arch, 0], factors[arch, 1])
            for figure, ks in self.picks[g]:
                out[idx[ks]] = getattr(pred, figure)[ks]
        return out

    def residuals(self, x):
        import numpy as np
        r = (np.log(self.predicted(x)) - self.observed) * self.weights
        prior = (x[:len(self.names)] - self.x0[:len(self.names)]) * PRIOR_WEIGHT
        arch = x[len(self.names):] * ARCH_WEIGHT
        return np.concatenate([r, prior, arch])

    def solve(self, start=None):
        import numpy as np
        from scipy.optimize import least_squares
        lo = [math.log(BOUNDS.get(n, (1e-4, 1e4))[0]) for n in self.names] + [-3.0] * (len(self.x0) - len(self.names))
        hi = [math.log(BOUNDS.get(n, (1e-4, 1e4))[1]) for n in self.names] + [3.0] * (len(self.x0) - len(self.names))
        x0 = np.clip(self.x0 if start is None else start, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
        return least_squares(self.residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2,
                             x_scale=1.0, max_nfev=400).x


def fit_rows(rows: list[Row], start: Params | None = None) -> Params:
    """The parameters that fit these rows best; `start` (a fit on more rows) only speeds it up."""
    problem = Problem(rows, _arches(rows))
    x = None
    if start is not None:
        x = [math.log(start[n]) for n in problem.names]
        x += [math.log(start.factor(a, f)) for a in problem.arches for f in ARCH_FACTORS]
    return problem.params(problem.solve(x))[0]


def predict_rows(params: Params, rows: list[Row]) -> list[float]:
    """The model's figure for each row with these parameters (an architecture they have no factor
    for gets 1)."""
    arches = sorted(set(_arches(rows)) | set(params.arch))
    problem = Problem(rows, arches)
    x = [math.log(params[n]) for n in problem.names]
    x += [math.log(params.factor(a, f)) for a in arches for f in ARCH_FACTORS]
    return [float(v) for v in problem.predicted(x)]


def held_out(rows: list[Row], key, start: Params | None = None) -> list[tuple[Row, float]]:
    """Each row predicted by a fit on every row whose `key` differs from its own."""
    out = []
    for k in sorted({key(r) for r in rows}):
        train = [r for r in rows if key(r) != k]
        test = [r for r in rows if key(r) == k]
        if not train:
            continue
        params = fit_rows(train, start)
        out += list(zip(test, predict_rows(params, test)))
    return out


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _errors(pairs: list[tuple[Row, float]]) -> list[float]:
    """log(published / predicted) per pair."""
    return [math.log(r.value / p) for r, p in pairs]


def summary(pairs: list[tuple[Row, float]], bands: dict[str, tuple[float, float]]) -> dict:
    """Median |error| (predicted / published - 1), the share inside the band, per held-out group."""
    if not pairs:
        return {"rows": 0}
    abs_err = [abs(p / r.value - 1) for r, p in pairs]
    inside = [bands[r.family][0] <= math.log(r.value / p) <= bands[r.family][1] for r, p in pairs]
    return {"rows": len(pairs), "median_abs_error": round(_quantile(abs_err, 0.5), 4),
            "within_band": round(sum(inside) / len(inside), 4)}


def bands_of(pairs: list[tuple[Row, float]], in_sample: list[tuple[Row, float]],
             by_source: list[tuple[Row, float]] = ()) -> tuple[dict, dict]:
    """The 10th-90th percentile of log(published / predicted) per family, and how each was made:
    from the pairs held out one GPU at a time; where one GPU holds most of the family's figures
    (leaving it out leaves nothing to fit that figure on), from the pairs held out one source at a
    time; where one source holds most of them too, from the fit's own residuals, said. A family
    with fewer than MIN_BAND_FIGURES figures borrows the speed band (inverted for times: a time is
    a speed's inverse)."""
    out, basis = {}, {}
    for family in FAMILIES:
        mine = [(r, p) for r, p in pairs if r.family == family]
        if _one_holds_most(mine, lambda r: r.gpu):
            mine, how = [(r, p) for r, p in by_source if r.family == family], "held-out by source"
            if not mine or _one_holds_most(mine, lambda r: r.source):
                mine, how = [(r, p) for r, p in in_sample if r.family == family], "in-sample"
        else:
            how = "held-out"
        errs = _errors(mine)
        if len(errs) >= MIN_BAND_FIGURES:
            out[family], basis[family] = (_quantile(errs, 0.1), _quantile(errs, 0.9)), how
    for many in ("", "-many"):  # what a family lacks it borrows: a time is a speed's inverse
        if "speed" + many not in out:
            out["speed" + many], basis["speed" + many] = out["speed"], basis["speed"]
        lo, hi = out["speed" + many]
        if "time" + many not in out:
            out["time" + many], basis["time" + many] = (-hi, -lo), basis["speed" + many]
        if "ttft" + many not in out:
            out["ttft" + many], basis["ttft" + many] = out["time" + many], basis["time" + many]
    return out, basis


def _one_holds_most(pairs: list[tuple[Row, float]], key) -> bool:
    counts = {}
    for r, _ in pairs:
        counts[key(r)] = counts.get(key(r), 0) + 1
    return bool(counts) and max(counts.values()) > ONE_GPU * len(pairs)


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def fit_engine(rows: list[Row]) -> dict:
    params = fit_rows(rows)
    by_source = held_out(rows, lambda r: r.source, params)
    by_gpu = held_out(rows, lambda r: r.gpu, params)
    fitted = predict_rows(params, rows)
    bands, band_basis = bands_of(by_gpu, list(zip(rows, fitted)), by_source)
    per_gpu = {}
    for g in sorted({r.gpu for r, _ in by_gpu}):
        per_gpu[g] = summary([(r, p) for r, p in by_gpu if r.gpu == g], bands)
    per_source = {}
    for s in sorted({r.source for r, _ in by_source}):
        mine = [r for r in rows if r.source == s]
        per_source[s] = {**summary([(r, p) for r, p in by_source if r.source == s], bands),
                         "url": mine[0].url, "gpus": sorted({r.gpu for r in mine})}
    regimes = {"one user": lambda r: not r.family.endswith("-many"),
               "several users": lambda r: r.family.endswith("-many")}
    return {
        "by_regime": {name: {"leave_one_gpu_out": summary([(r, p) for r, p in by_gpu if keep(r)], bands),
                             "leave_one_source_out": summary([(r, p) for r, p in by_source if keep(r)], bands)}
                      for name, keep in regimes.items()},
        "params": {k: _round(v) for k, v in params.values.items()},
        "arch": {a: {f: _round(v) for f, v in fs.items()} for a, fs in params.arch.items()},
        "bands": {f: [_round(lo), _round(hi)] for f, (lo, hi) in bands.items()}, "band_basis": band_basis,
        "rows": len(rows), "gpus": sorted({r.gpu for r in rows}), "sources": sorted({r.source for r in rows}),
        "in_sample": summary(list(zip(rows, fitted)), bands),
        "leave_one_gpu_out": {"all": summary(by_gpu, bands), "per_gpu": per_gpu},
        "leave_one_source_out": {"all": summary(by_source, bands), "per_source": per_source},
    }


def fit_all(path: Path = TABLE) -> dict:
    table = load_table(path)
    rows, left = usable(table)
    engines = {}
    for name in sorted({r.engine for r in rows}):
        engines[name] = fit_engine([r for r in rows if r.engine == name])
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return {"format": FORMAT_VERSION, "table": path.name, "table_sha256": digest, "table_rows": len(table),
            "rows_used": len(rows), "rows_left_out": len(left), "engines": engines}


def load_fitted(path: Path = FITTED) -> dict:
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: format {data.get('format')}, expected {FORMAT_VERSION}: refit it")
    return data


def params_of(engine: str, fitted: dict | None = None) -> Params | None:
    data = (fitted or load_fitted())["engines"].get(engine)
    return Params(dict(data["params"]), {a: dict(f) for a, f in data["arch"].items()}) if data else None


def report(result: dict) -> str:
    """The held-out accuracy as Markdown (docs/using.md shows it): per engine, every GPU left out of
    the fit in turn, then every source."""
    lines = []
    for name, e in sorted(result["engines"].items()):
        g = e["leave_one_gpu_out"]
        lines += [f"**{name}**: {e['rows']} figures on {len(e['gpus'])} GPUs from {len(e['sources'])} sources.", "",
                  "| figures of | left out | figures | median error | inside the band | speed band | band from |",
                  "|---|---|---:|---:|---:|---|---|"]
        for regime, many in (("one user", ""), ("several users", "-many")):
            lo, hi = e["bands"]["speed" + many]
            for how, key in (("one GPU at a time", "leave_one_gpu_out"),
                             ("one source at a time", "leave_one_source_out")):
                v = e["by_regime"][regime][key]
                lines.append(f"| {regime} | {how} | {v['rows']} | {v['median_abs_error'] * 100:.0f} % | "
                             f"{v['within_band'] * 100:.0f} % | {math.exp(lo) * 100:.0f}-{math.exp(hi) * 100:.0f} % | "
                             f"{e['band_basis']['speed' + many]} |")
        lines += ["", "| GPU left out | figures | median error | inside the band |", "|---|---:|---:|---:|"]
        lines += [f"| {gpu} | {v['rows']} | {v['median_abs_error'] * 100:.0f} % | {v['within_band'] * 100:.0f} % |"
                  for gpu, v in g["per_gpu"].items()]
        lines.append("")
    return "\n".join(lines)


def against(path: Path, fitted: dict | None = None) -> dict:
    """The committed fit on figures it was never fitted to (a table of the same columns kept
    elsewhere): per engine and regime, the median |error|, the share inside the band and the
    band's half-width at the median, and the rows it could not read, with why."""
    fitted = fitted or load_fitted()
    rows, left = usable(load_table(path))
    out = {"rows": len(rows), "refused": [f"row {i + 2}: {why}" for i, why in left], "engines": {}}
    inside_all, errors_all = [], []
    for engine in sorted({r.engine for r in rows}):
        params = params_of(engine, fitted)
        if params is None:
            continue
        mine = [r for r in rows if r.engine == engine]
        bands = {k: tuple(v) for k, v in fitted["engines"][engine]["bands"].items()}
        pairs = list(zip(mine, predict_rows(params, mine)))
        half = [(math.exp(bands[r.family][1]) - math.exp(bands[r.family][0])) / 2 for r, _ in pairs]
        out["engines"][engine] = {
            "all": {**summary(pairs, bands), "band_half_width": round(_quantile(half, 0.5), 4),
                    "gpus": len({r.gpu for r in mine})},
            **{regime: summary([(r, p) for r, p in pairs if r.family.endswith("-many") == many], bands)
               for regime, many in (("one user", False), ("several users", True))}}
        errors_all += [abs(p / r.value - 1) for r, p in pairs]
        inside_all += [bands[r.family][0] <= math.log(r.value / p) <= bands[r.family][1] for r, p in pairs]
    if errors_all:
        out["all"] = {"rows": len(errors_all), "median_abs_error": round(_quantile(errors_all, 0.5), 4),
                      "within_band": round(sum(inside_all) / len(inside_all), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if fitted.json differs from a refit")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--out", type=Path, default=FITTED)
    ap.add_argument("--report", action="store_true", help="print the held-out accuracy of fitted.json as Markdown")
    ap.add_argument("--against", type=Path, metavar="CSV",
                    help="print fitted.json's accuracy on a table of figures it was never fitted to (same columns)")
    args = ap.parse_args(argv)
    if args.against:
        print(json.dumps(against(args.against, load_fitted(args.out)), indent=1))
        return 0
    if args.report:
        print(report(load_fitted(args.out)))
        return 0
    result = fit_all(args.table)
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print("fitted.json matches the table" if same else f"{args.out} is not what {args.table.name} gives: refit")
        return 0 if same else 1
    args.out.write_text(text)
    for name, e in result["engines"].items():
        print(f"{name}: {e['rows']} rows on {len(e['gpus'])} GPUs; leave one GPU out: "
              f"{e['leave_one_gpu_out']['all']}; leave one source out: {e['leave_one_source_out']['all']}; "
              f"bands {e['bands']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
