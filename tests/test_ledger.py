"""The prediction ledger (issue 39): every answer kept as an immutable prediction, paired with the
runs measured here (through the worker's own code, against the simulator) or imported later that
measure it, shown on the run page, the prediction's page, /accuracy/ (its scatter and CSV) and the
API; and the correction the team's runs teach the estimates per host and engine, checked by
leaving each run out on simulated hosts of a known bias."""
import csv
import io
import json
import math
import random
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks import services
from benchmarks.ledger import services as ledger
from benchmarks.models import Decision, Gpu, Host, LevelResult, Prediction, PredictionPair, Run
from factories import decide, endpoint, execute_in_process, user
from test_decisions import API, measured_run

DATA = Path(__file__).parent / "data" / "imports"
METRICS = ("decode_tok_s_p50", "aggregate_tok_s", "tpot_ms_p50", "ttft_ms_p50", "ttft_ms_p90")


def h200(name="h200-1"):
    host = Host.objects.create(name=name, interconnect="pcie")
    Gpu.objects.create(host=host, index=0, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    return host


def inputs(host, users=4, prompt=64, output=16, **more):
    return {"host": host.pk, "gpu_name": "", "compute_capability": "", "vram_gib": None, "gpu_count": 1,
            "interconnect": "pcie", "model": None, "users": users, "prompt_tokens": prompt, "output_tokens": output,
            "context_tokens": 4096, "ttft_p90_ms": None, "tpot_ms": None, "min_user_tok_s": None,
            "priority": "throughput", **more}


def estimate_of(prediction: Prediction, candidate: str) -> dict:
    return next(e for e in prediction.estimates if e["candidate"] == candidate)["metrics"]


def level_figure(level: LevelResult, metric: str) -> float:
    """A level's figure read from its stored summary (not through the ledger)."""
    name, _, stat = metric.rpartition("_") if metric.endswith(("_p50", "_p90")) else (metric, "", "")
    return level.stats.stat(name, stat) if stat else level.stats.stat(name)


@pytest.fixture
def member(client):
    client.force_login(user())
    return client


# --- stored, paired, shown ---------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_prediction_is_paired_with_the_simulator_run_that_measures_it_and_drawn_on_the_scatter(member, simulator):
    host = h200()
    decision = decide(inputs(host), owner=user())
    prediction = decision.predictions.get()
    assert prediction.gpu_name == "NVIDIA H200" and prediction.users == 4 and prediction.host == host
    fp8 = estimate_of(prediction, "vllm-fp8")
    assert set(fp8) == set(METRICS)
    assert all(v["band"][0] < v["value"] < v["band"][1] and v["raw"] == v["value"] for v in fp8.values())

    # A run on that host measuring vLLM FP8 at 1 and 4 users, prompt 70 and output 18 (within ±20 %),
    # through the worker's own code: its finish pairs it.
    e = endpoint(simulator(prefill_ms=20, decode_ms=5).url, name="h200-fp8", host=host.name,
                 quantization="fp8_e4m3")
    run = Run.objects.create(owner=user(), prompt_tokens=70, output_tokens=18, temperature=0, requests_per_level=8,
                             warmup_requests=0, concurrency_levels=[1, 4], progress_total=16)
    run.endpoints.set([e])
    run = execute_in_process(run)
    assert run.status == Run.SUCCEEDED, run.error
    level = run.levels.get(concurrency=4)
    pairs = {p.metric: p for p in PredictionPair.objects.filter(run=run)}
    assert set(pairs) == set(METRICS), "the 4-user level pairs; the 1-user one is another workload"
    for metric, pair in pairs.items():
        assert pair.level == level and pair.prediction == prediction and pair.candidate == "vllm-fp8"
        assert pair.estimated == fp8[metric]["value"]
        assert pair.measured == pytest.approx(level_figure(level, metric))
    aggregate = pairs["aggregate_tok_s"]
    error = aggregate.measured / aggregate.estimated - 1

    # The run page says it in words, the prediction's page lists the run.
    page = member.get(run.get_absolute_url()).content.decode()
    assert "the decision page predicted" in page and f"{error * 100:+.0f} %".replace("-", "−") in page
    detail = member.get(prediction.get_absolute_url()).content.decode()
    assert run.get_absolute_url() in detail and 'id="prediction-pairs"' in detail

    # The scatter: measured on x, predicted on y, the band as whiskers, the run's permalink on the point.
    fig = member.get(reverse("accuracy-chart") + "?metric=aggregate_tok_s").json()
    trace = next(t for t in fig["data"] if t["mode"] == "markers")
    assert trace["x"] == [aggregate.measured] and trace["y"] == [aggregate.estimated]
    assert trace["error_y"]["array"] == [pytest.approx(aggregate.band_high - aggregate.estimated)]
    assert trace["customdata"][0][1].startswith(run.get_absolute_url())
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
    identity = next(t for t in fig["data"] if t["mode"] == "lines")
    assert identity["x"] == identity["y"]

    # /accuracy/ and its API: the pair counted, its error the median, inside the band or not.
    body = member.get("/api/v1/accuracy/?engine=vllm&metric=aggregate_tok_s").json()
    [group] = body["groups"]
    assert group["pairs"] == 1 and group["median_abs_error"] == pytest.approx(abs(error))
    assert group["in_band_share"] == (1.0 if aggregate.band_low <= aggregate.measured <= aggregate.band_high else 0.0)
    assert "accuracy-table" in member.get(reverse("accuracy")).content.decode()

    # Deleting the run removes its pairs; the prediction stays as it was.
    run.delete()
    assert not PredictionPair.objects.exists() and Prediction.objects.get() == prediction


@pytest.mark.django_db
def test_the_api_answer_is_a_prediction_and_its_address_returns_it_with_its_runs(member):
    host = h200()
    r = member.post(API, data=json.dumps({"host": host.pk, "users": 8, "prompt_tokens": 512, "output_tokens": 100}),
                    content_type="application/json")
    assert r.status_code == 200, r.content
    public_id = r.json()["prediction"]["public_id"]
    assert not Decision.objects.exists() and Prediction.objects.get().public_id == public_id
    fp8 = estimate_of(Prediction.objects.get(), "vllm-fp8")
    e = endpoint(name="h200-fp8", host=host.name, quantization="fp8_e4m3")
    run = measured_run({e: {8: (fp8["ttft_ms_p50"]["value"] * 1.1, fp8["ttft_ms_p90"]["value"] * 1.1,
                                fp8["tpot_ms_p50"]["value"] * 0.9, fp8["aggregate_tok_s"]["value"] * 1.2)}})
    services.run_finished(run=run)  # what the worker does once a run's status is final
    got = member.get(f"/api/v1/predictions/{public_id}/").json()
    assert got["users"] == 8 and got["gpu"] == "NVIDIA H200" and got["advisor_version"].startswith("advisor result")
    pair = next(p for p in got["pairs"] if p["metric"] == "aggregate_tok_s")
    assert pair["error"] == pytest.approx(0.2) and pair["measured_at"].startswith("http")
    assert pair["measured_at"].endswith(f"#level-{run.levels.get().public_id}")
    # Saved decisions are predictions too, each its own.
    r = member.post(API, data=json.dumps({"host": host.pk, "users": 8, "prompt_tokens": 512, "output_tokens": 100,
                                          "save": True}), content_type="application/json")
    assert r.status_code == 201 and r.json()["prediction"]["public_id"] != public_id
    assert Prediction.objects.count() == 2 and Decision.objects.get().predictions.count() == 1


@pytest.mark.django_db
def test_a_prediction_is_immutable():
    decide(inputs(h200()))
    p = Prediction.objects.get()
    p.users = 99
    with pytest.raises(ValueError, match="immutable"):
        p.save()
    assert Prediction.objects.get().users == 4


@pytest.mark.django_db
def test_only_runs_finished_after_the_prediction_and_of_its_workload_pair():
    host = h200()
    e = endpoint(name="h200-fp8", host=host.name, quantization="fp8_e4m3")
    earlier = measured_run({e: {8: (50.0, 60.0, 10.0, 700.0)}}, title="before")
    earlier.finished = earlier.created
    earlier.save(update_fields=["finished"])
    decide(inputs(host, users=8, prompt=512, output=100))
    assert ledger.pair_run(earlier) == 0, "a run the estimate could have seen is no check of it"
    longer = measured_run({e: {8: (50.0, 60.0, 10.0, 700.0)}}, prompt=640, output=100)  # +25 %: another workload
    other_users = measured_run({e: {4: (50.0, 60.0, 10.0, 700.0)}})
    q4 = endpoint(name="h200-q4", host=host.name, quantization="gguf_q4_k_m", backend="llamacpp")
    same = measured_run({e: {8: (50.0, 60.0, 10.0, 700.0)}, q4: {8: (80.0, 99.0, 12.0, 500.0)}}, prompt=600, output=90)
    assert ledger.pair_run(longer) == ledger.pair_run(other_users) == 0
    assert ledger.pair_run(same) == 10, "both candidates, five figures each"
    assert {p.candidate for p in PredictionPair.objects.all()} == {"vllm-fp8", "llamacpp-q4_k_m"}
    assert ledger.pair_run(same) == 0, "pairing again adds nothing"


@pytest.mark.django_db
def test_an_imported_report_pairs_with_the_prediction_it_measures(django_capture_on_commit_callbacks):
    decide({"host": "", "gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": "16",
            "gpu_count": "1", "interconnect": "pcie", "model": "", "users": "8", "prompt_tokens": "512",
            "output_tokens": "100", "context_tokens": "8192", "priority": "throughput"})
    data = (DATA / "vllm_bench_serve_c8_detailed.json").read_bytes()
    # vllm bench serve is a client: this file measured a llama-server, as the importer is told.
    with django_capture_on_commit_callbacks(execute=True):  # the pairing runs once the report is committed
        report = services.report_import(owner=user(), data=data, filename="c8.json", backend="llamacpp",
                                        quantization="gguf_q4_k_m", gpu="Tesla V100-PCIE-16GB")
    pairs = PredictionPair.objects.filter(report=report)
    stated = json.loads(data)
    aggregate = pairs.get(metric="aggregate_tok_s")
    assert aggregate.measured == pytest.approx(stated["output_throughput"])
    assert aggregate.candidate == "llamacpp-q4_k_m" and aggregate.measured_at == report.get_absolute_url()
    report.delete()
    assert not PredictionPair.objects.exists()


# --- accuracy: bad queries, the export -------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("query, field", [("engine=tensorrt", "engine"), ("metric=perplexity", "metric"),
                                          ("gpu=Voodoo3", "gpu"), ("gpu=H200%00", "gpu"), ("colour=red", "colour")])
def test_a_wrong_accuracy_query_is_a_400_naming_the_field(member, query, field):
    r = member.get(f"/api/v1/accuracy/?{query}")
    assert r.status_code == 400 and field in r.json()["errors"], r.content
    r = member.get(f"{reverse('accuracy')}?{query}")
    assert r.status_code == 400 and field in r.content.decode()
    assert member.get(f"{reverse('accuracy-csv')}?{query}").status_code == 400


@pytest.mark.django_db
def test_the_accuracy_pages_need_a_member(client):
    for url in (reverse("accuracy"), reverse("accuracy-chart"), reverse("accuracy-csv")):
        assert client.get(url).status_code == 302
    assert client.get("/api/v1/accuracy/").status_code in (401, 403)


@pytest.mark.django_db
def test_the_ledger_exports_as_csv_with_units(member):
    host = h200()
    decide(inputs(host, users=8, prompt=512, output=100))
    e = endpoint(name="h200-fp8", host=host.name, quantization="fp8_e4m3")
    run = measured_run({e: {8: (50.0, 60.0, 10.0, 700.0)}})
    services.run_finished(run=run)
    rows = list(csv.DictReader(io.StringIO(member.get(reverse("accuracy-csv")).content.decode())))
    assert len(rows) == 5
    by = {r["figure"]: r for r in rows}
    assert by["aggregate_tok_s"]["unit"] == "tok/s" and by["ttft_ms_p50"]["unit"] == "ms"
    assert float(by["aggregate_tok_s"]["measured"]) == pytest.approx(700.0)
    assert float(by["ttft_ms_p50"]["error (%)"]) == pytest.approx(
        (50.0 / float(by["ttft_ms_p50"]["predicted"]) - 1) * 100, abs=0.01)
    assert by["ttft_ms_p50"]["measured at"].startswith("http") and run.public_id in by["ttft_ms_p50"]["measured at"]


# --- learning --------------------------------------------------------------------------------

def biased_runs(host, e, bias: float, runs: int, rng: random.Random) -> None:
    """Runs at 8 users whose every figure is the newest estimate's × bias (a speed; a time ÷ bias),
    each within ±8 % noise, each after a new prediction, each finished as the worker finishes one."""
    for _ in range(runs):
        p = decide(inputs(host, users=8, prompt=512, output=100)).predictions.get()
        est = {m: v["raw"] for m, v in estimate_of(p, "vllm-fp8").items()}
        noise = rng.uniform(0.92, 1.08)
        run = measured_run({e: {8: (est["ttft_ms_p50"] / bias / noise, est["ttft_ms_p90"] / bias / noise,
                                    est["tpot_ms_p50"] / bias / noise, est["aggregate_tok_s"] * bias * noise)}})
        services.run_finished(run=run)


@pytest.mark.django_db
def test_on_hosts_of_a_known_bias_the_correction_lowers_the_leave_one_run_out_error(member):
    rng = random.Random(7)
    fast, slow = h200("h200-fast"), h200("h200-slow")
    biased_runs(fast, endpoint(name="fast-fp8", host=fast.name, quantization="fp8_e4m3"), 1.6, 5, rng)
    biased_runs(slow, endpoint(name="slow-fp8", host=slow.name, quantization="fp8_e4m3"), 0.6, 5, rng)
    body = member.get("/api/v1/accuracy/?engine=vllm&metric=aggregate_tok_s").json()
    [group] = body["groups"]
    # A run pairs with every prediction for its GPU model made before it: the fast host's k-th run with
    # its k (1 + ... + 5 = 15), the slow host's j-th with the fast host's 5 and its own j (6 + ... + 10 = 40).
    assert (group["corrected_hosts"], group["runs"], group["pairs"]) == (2, 10, 55)
    assert group["corrected_before"] > 0.35, group
    assert group["corrected_after"] < group["corrected_before"] / 2, group

    # The advisor now corrects the estimates for those hosts, and says so.
    later = decide(inputs(fast, users=8, prompt=512, output=100)).predictions.get()
    [fp8] = [e for e in later.estimates if e["candidate"] == "vllm-fp8"]
    k = fp8["metrics"]["aggregate_tok_s"]["value"] / fp8["metrics"]["aggregate_tok_s"]["raw"]
    assert 1.3 < k < 1.6, "toward the bias, shrunk toward 1"
    assert fp8["correction"].startswith("Corrected by the team's 5 runs on this host")
    assert f"aggregate ×{k:.2f}" in fp8["correction"]
    slower = decide(inputs(slow, users=8, prompt=512, output=100)).predictions.get()
    k_slow = estimate_of(slower, "vllm-fp8")["aggregate_tok_s"]
    assert 0.6 < k_slow["value"] / k_slow["raw"] < 0.8
    # A host with no runs is not corrected.
    other = decide(inputs(h200("h200-new"), users=8, prompt=512, output=100)).predictions.get()
    assert all(e["correction"] == "" for e in other.estimates)
    assert math.isclose(estimate_of(other, "vllm-fp8")["aggregate_tok_s"]["value"],
                        estimate_of(other, "vllm-fp8")["aggregate_tok_s"]["raw"])
