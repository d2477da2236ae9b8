"""The step-time model against the figure table: the committed fit is what the table gives, and its
estimates hold on GPUs and sources it was never fitted to, within the bounds stated here (and in
docs/using.md). The refit runs once for the module (about half a minute)."""

import csv
import json
import math
from pathlib import Path

import pytest

from benchmarks.advisor import DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, GpuSpec, Workload
from benchmarks.advisor import fit
from benchmarks.advisor.backends import DEFAULT_CANDIDATES, engine_of
from benchmarks.advisor.gpus import peak_of
from benchmarks.advisor.prior import Layout, setup_of
from benchmarks.advisor.steptime import Params, predict

# What the decision page promises of its estimates where they were never fitted: the median
# |predicted / published - 1| of the figures of a GPU (or a source) left out of the fit, per engine
# and regime, and the share inside the band. llama-server under load was measured on one GPU only
# (this project's H200): held out, nothing is left to fit its batching on, so its bound says only
# "within 2x" and its band is the fit's own spread (band_basis "in-sample"), which docs/using.md says.
# vLLM's bounds by source rose from 0.25 to 0.30 when four sources joined that the model finds hard
# (4-bit weights at 4-32 users on an A100 PCIe: estimated about 30 % fast; TP over PCIe): held out,
# each now raises the median (one user 20 -> 28 %, several users 19 -> 27 %).
BOUNDS = {  # (engine, regime): (leave one GPU out, leave one source out, least share inside the band)
    ("llamacpp", "one user"): (0.25, 0.25, 0.70),
    ("llamacpp", "several users"): (1.00, 1.00, 0.0),
    ("vllm", "one user"): (0.50, 0.30, 0.30),
    ("vllm", "several users"): (0.30, 0.30, 0.70),
}
COLUMNS = ("source", "url", "date", "engine", "version", "tool", "gpu", "gpu_count", "model", "quant", "users",
           "prompt_tokens", "output_tokens", "metric", "value", "quote")


@pytest.fixture(scope="module")
def refit():
    return fit.fit_all()


@pytest.fixture(scope="module")
def table():
    with open(fit.TABLE, newline="") as f:
        return list(csv.DictReader(f))


def test_the_table_is_large_varied_and_every_row_says_where_it_was_read(table):
    assert len(table) >= 150
    gpus = {r["gpu"] for r in table}
    assert len(gpus) >= 20 and {r["engine"] for r in table} >= {"llamacpp", "vllm"}
    for r in table:
        missing = [c for c in COLUMNS if not r[c]]
        assert not missing, (r["source"], missing)
        assert r["url"].startswith(("https://", "benchmarks/")) and float(r["value"]) > 0
        assert peak_of(r["gpu"]) is not None  # every GPU has its datasheet row
    # most rows are usable by the model; the others are said
    rows, left = fit.usable(table)
    assert len(rows) >= 0.95 * len(table)


def test_the_committed_fit_is_what_the_table_gives(refit):
    committed = fit.load_fitted()
    assert committed["table_sha256"] == refit["table_sha256"], "the table changed: python -m benchmarks.advisor.fit"
    for name, e in refit["engines"].items():
        c = committed["engines"][name]
        for k, v in e["params"].items():
            assert c["params"][k] == pytest.approx(v, rel=0.02), (name, k)
        for fam, band in e["bands"].items():
            assert c["bands"][fam] == pytest.approx(band, abs=0.05), (name, fam)


@pytest.mark.parametrize("engine, regime", sorted(BOUNDS))
def test_estimates_hold_on_gpus_and_sources_they_were_never_fitted_to(refit, engine, regime):
    e = refit["engines"][engine]
    assert e["leave_one_gpu_out"]["all"]["rows"] == e["leave_one_source_out"]["all"]["rows"] == e["rows"]
    by_gpu, by_source = (e["by_regime"][regime][k] for k in ("leave_one_gpu_out", "leave_one_source_out"))
    gpu_bound, source_bound, inside = BOUNDS[engine, regime]
    assert by_gpu["rows"] >= 20  # each regime rests on figures, held out one at a time
    assert by_gpu["median_abs_error"] <= gpu_bound and by_source["median_abs_error"] <= source_bound
    assert by_gpu["within_band"] >= inside
    assert len(e["leave_one_gpu_out"]["per_gpu"]) >= 4


def test_a_band_is_held_out_unless_one_gpu_holds_its_figures(refit):
    llama, vllm = refit["engines"]["llamacpp"], refit["engines"]["vllm"]
    assert llama["band_basis"]["speed"] == "held-out" and vllm["band_basis"]["speed-many"] == "held-out"
    assert llama["band_basis"]["speed-many"] == "in-sample"  # the H200's llama-server runs, the only ones
    for e in (llama, vllm):
        for lo, hi in e["bands"].values():
            assert lo < hi


def test_the_advisor_asks_the_model_what_the_fit_fitted(refit):
    # one setup through the advisor's path (prior._setup) and through the fit's rows (fit.usable):
    # the same model, the same parameters, the same figure
    params = fit.params_of("llamacpp", refit)
    h100 = GpuSpec("NVIDIA H100 PCIe", (9, 0), 80)
    q4 = next(c for c in DEFAULT_CANDIDATES if c.key == "llamacpp-q4_k_m")
    work = Workload(users=1, prompt_tokens=0, output_tokens=128)
    weights = 4.9 / 8 * (R1_7B.params_b - R1_7B.embedding_params_b) * 1e9 + 4.9 / 8 * R1_7B.embedding_params_b * 1e9
    via_advisor = predict(params, setup_of(q4, R1_7B, h100, work, weights, Layout(1, ""))).decode_tok_s
    row = {"engine": "llamacpp", "gpu": "H100 PCIe", "shape": "Qwen2.5-7B", "quant": "Q4_K_M", "metric": "decode_tok_s",
           "value": "1", "prompt_tokens": "0", "output_tokens": "128", "users": "1", "slots": "1", "depth": "0",
           "gpu_count": "1", "split": "", "interconnect": "", "source": "s", "arrival": "closed"}
    rows, _ = fit.usable([row])
    via_fit = fit.predict_rows(params, rows)[0]
    # the built-in R1-7B and the table's Qwen2.5-7B are one architecture (R1-Distill-Qwen-7B is Qwen2.5-Math-7B)
    assert via_advisor == pytest.approx(via_fit, rel=0.02)
    # and the figure is physical: under the weights' read at the datasheet's 2,000 GB/s
    assert via_advisor < 2000e9 / weights


def test_the_command_writes_the_fit_and_checks_it(tmp_path, monkeypatch, refit):
    monkeypatch.setattr(fit, "fit_all", lambda table: refit)  # the module's refit, not a third one
    out = tmp_path / "fitted.json"
    assert fit.main(["--out", str(out)]) == 0
    assert fit.main(["--check", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    data["engines"]["vllm"]["params"]["step_ms"] *= 2
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    assert fit.main(["--check", "--out", str(out)]) == 1


def test_the_model_is_physical_for_every_candidate_and_gpu():
    # every estimate: under the bandwidth ceiling of its weights, slower per stream as users grow,
    # more in all at 64 users than one stream alone (llama-server's total may peak before 64: its
    # per-sequence cost grows with the batch, as this project's H200 run measured)
    for name, peak in (("Tesla V100-PCIE-16GB", (7, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0)),
                       ("NVIDIA GeForce RTX 4090", (8, 9)), ("NVIDIA H200", (9, 0))):
        g = GpuSpec(name, peak, 80)
        for c in DEFAULT_CANDIDATES:
            fmt = engine_of(c.backend).formats.get(c.quantization)
            params = fit.params_of(c.backend)
            if fmt is None or params is None:
                continue
            weights = fmt.weight_bytes(R1_7B.params_b, R1_7B.embedding_params_b)
            last = first = None
            for users in (1, 4, 16, 64):
                s = setup_of(c, R1_7B, g, Workload(users, 512, 128), weights, Layout(1, ""))
                p = predict(params, s)
                assert p.decode_tok_s < peak_of(name).bandwidth_gbs * 1e9 / weights
                assert math.isfinite(p.ttft_p90_ms) and p.ttft_p90_ms >= p.ttft_p50_ms > 0
                # a server never serves more in all than its own kernels decode with no prompt arriving
                # (llama-batched-bench's figure for llama.cpp)
                assert p.output_tok_s <= p.batch_decode_tok_s * (1 + 1e-9)
                if last:
                    assert p.decode_tok_s <= last.decode_tok_s
                last, first = p, first or p
            assert last.output_tok_s > first.output_tok_s
    assert isinstance(params, Params)


def test_the_user_docs_show_the_committed_accuracy():
    docs = (Path(fit.__file__).parents[2] / "docs" / "using.md").read_text()
    start = docs.index("<!-- accuracy: python -m benchmarks.advisor.fit --report -->\n")
    block = docs[start:docs.index("<!-- /accuracy -->")].split("\n", 1)[1]
    assert block.strip() == fit.report(fit.load_fitted()).strip(), "run python -m benchmarks.advisor.fit --report"


def test_the_fit_is_checked_against_a_table_kept_elsewhere(tmp_path):
    """`fit --against CSV`: the committed fit on another table of the same columns, each engine's
    error and band coverage, and the rows it could not read named with why."""
    lines = (fit.TABLE.read_text().splitlines())
    header = lines[0]
    llama = next(line for line in lines[1:] if ",llamacpp," in line and ",RTX 3090," in line)
    vllm = next(line for line in lines[1:] if ",vllm," in line)
    unknown = llama.replace(",RTX 3090,", ",Voodoo3,")
    # a dataset run (ShareGPT) whose lengths vary per request and are not stated: refused, not a crash
    columns = header.split(",")
    cells = next(csv.reader([vllm]))
    cells[columns.index("prompt_tokens")] = ""
    no_lengths = ",".join(f'"{c}"' for c in cells)
    table = tmp_path / "elsewhere.csv"
    table.write_text("\n".join([header, llama, vllm, unknown, no_lengths]) + "\n")
    result = fit.against(table)
    assert result["rows"] == 2 and len(result["refused"]) == 2, result["refused"]
    assert "row 4" in result["refused"][0] and "no datasheet row" in result["refused"][0]
    assert "row 5" in result["refused"][1] and "no prompt, output or user count" in result["refused"][1]
    assert set(result["engines"]) == {"llamacpp", "vllm"}
    for engine in result["engines"].values():
        assert engine["all"]["rows"] == 1 and 0 <= engine["all"]["median_abs_error"] < 1
        assert engine["all"]["within_band"] in (0.0, 1.0)


def _pair(gpu, source, error, family="speed"):
    row = fit.Row(0, "vllm", gpu, source, "decode_tok_s", 100.0, "", family, (1, "", "", "closed"), {})
    return row, 100.0 / math.exp(error)  # log(published / predicted) = error


def test_a_band_held_out_by_gpu_falls_back_to_sources_then_to_the_fit_itself():
    # one GPU holds every figure, from five sources: the band is what leaving each source out gave
    gpu_pairs = [_pair("A100", f"s{i % 5}", 0.0) for i in range(20)]
    by_source = [_pair("A100", f"s{i % 5}", (i - 10) / 20) for i in range(20)]
    in_sample = [_pair("A100", f"s{i % 5}", (i - 10) / 100) for i in range(20)]
    bands, basis = fit.bands_of(gpu_pairs, in_sample, by_source)
    assert basis["speed"] == "held-out by source"
    assert bands["speed"][0] == pytest.approx(fit._quantile([(i - 10) / 20 for i in range(20)], 0.1))
    # one source as well: nothing is left to hold out, so the band is the fit's own spread, said
    one_source = [(r.__class__(**{**r.__dict__, "source": "s0"}), p) for r, p in by_source]
    bands, basis = fit.bands_of(gpu_pairs, in_sample, one_source)
    assert basis["speed"] == "in-sample"
    assert bands["speed"][1] == pytest.approx(fit._quantile([(i - 10) / 100 for i in range(20)], 0.9))
    # figures spread over GPUs: the band held out one GPU at a time
    spread = [_pair(f"g{i % 4}", "s0", (i - 10) / 40) for i in range(20)]
    bands, basis = fit.bands_of(spread, in_sample, by_source)
    assert basis["speed"] == "held-out" and bands["speed"][0] == pytest.approx(
        fit._quantile([(i - 10) / 40 for i in range(20)], 0.1))
