"""The decision page and API: a stated workload -> a ranked, evidenced recommendation behind a
permalink. The advisor's own rules are tested in test_advisor_*; here: the form, the evidence
read from the database, the pages, the API and the "measure this next" links."""
import json
import math
import time
from datetime import timedelta
from urllib.parse import quote, urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings as hsettings, strategies as st

from benchmarks.advisor import published_v100_evidence
from benchmarks.decisions import presenter, selectors
from benchmarks.decisions.forms import DecisionForm
from benchmarks.engine.client import LevelOutcome
from benchmarks.engine.metrics import RequestResult
from benchmarks.models import Decision, Gpu, Host, LevelResult, Model, Run, ServerRecipe, Variant
from benchmarks.services import level_store
from factories import advice, decide, endpoint, gpu_samples, gpu_telemetry, user

pytestmark = pytest.mark.django_db

V100 = {"host": "", "gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": "16",
        "gpu_count": "1", "interconnect": "pcie", "model": "", "users": "8", "prompt_tokens": "512",
        "output_tokens": "100", "context_tokens": "8192", "ttft_p90_ms": "", "tpot_ms": "",
        "min_user_tok_s": "", "priority": "single_user_speed"}
V100_JSON = {"gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": 16, "users": 8,
             "prompt_tokens": 512, "output_tokens": 100, "context_tokens": 8192}
API = "/api/decide"


def form(**overrides):
    return {**V100, **overrides}


def api(client, body, **extra):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(API, data=data, content_type="application/json", **extra)


@pytest.fixture
def member(client):
    client.force_login(user())
    return client


# --- measured data on an H200 host -------------------------------------------------------------

def h200_host(name="h200-1"):
    host = Host.objects.create(name=name, interconnect="pcie")
    Gpu.objects.create(host=host, index=0, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    return host


def level_requests(*, ttft_p50, ttft_p90, tpot_p50, output=100, prompt=512, n=101):
    """Requests as the engine's client records them (engine.metrics.RequestResult) whose level
    summary, as summarize_level makes it, has exactly these figures: with 10k + 1 requests (at
    least 101, enough for no few_samples flag) p50 is TTFT number 5k + 1 and p90 number 9k + 1."""
    assert n % 10 == 1 and n >= 101
    ttfts = [ttft_p50] * (n // 2 + 1) + [ttft_p90] * (n - n // 2 - 1)
    return [RequestResult(index=i, sent=0.0, prompt_tokens_asked=prompt, output_tokens_asked=output,
                          first_content=t / 1000, chunk_times=[t / 1000 + k * tpot_p50 / 1000 for k in range(output)],
                          chunk_tokens=[1] * output, prompt_tokens=prompt, output_tokens=output,
                          client_output_tokens=output, finish_reason="length")
            for i, t in enumerate(ttfts)]


def exact_level(output: int, aggregate: float) -> tuple[int, float]:
    """A request count (10k + 1) and a wall time whose output tokens over it are exactly
    `aggregate` tok/s as summarize_level divides them."""
    for n in range(101, 1001, 10):
        for wall in (n * output / aggregate, math.nextafter(n * output / aggregate, 0),
                     math.nextafter(n * output / aggregate, math.inf)):
            if n * output / wall == aggregate:
                return n, wall
    raise AssertionError(aggregate)


def measured_run(figures, *, status=Run.SUCCEEDED, load_mode="concurrency", prompt=512, output=100,
                 created=None, title="H200 sweep"):
    """figures: {endpoint: {concurrency: (ttft_p50, ttft_p90, tpot_p50, aggregate)}}, stored through
    the real service (level_store) with the GPU telemetry the engine makes of its samples (peak
    5980 MiB on GPU 0)."""
    levels = sorted({c for per in figures.values() for c in per})
    run = Run.objects.create(title=title, prompt_tokens=prompt, output_tokens=output, temperature=0.7,
                             load_mode=load_mode, concurrency_levels=levels, requests_per_level=101,
                             warmup_requests=2, status=status, created=created or timezone.now())
    run.endpoints.set(figures)
    for e, per in figures.items():
        for i, (c, (t50, t90, tpot, agg)) in enumerate(sorted(per.items())):
            n, wall = exact_level(output, agg)
            results = level_requests(ttft_p50=t50, ttft_p90=t90, tpot_p50=tpot, output=output, prompt=prompt, n=n)
            outcome = LevelOutcome(c, results, time.time(), wall, rate=1.0 if load_mode == "rate" else None)
            level_store(run=run, endpoint=e, outcome=outcome, level_index=i,
                        gpu=gpu_telemetry(gpu_samples(peak_mib=5980.0)))
    return run


def h200_setup(fp8_aggregate, llamacpp_aggregate):
    """Measured FP8 and Q4_K_M on one H200 at 1 and 8 users, 512/100 tokens (llama.cpp's figures
    are the ones measured on this machine, shared/reference/measured-here.md)."""
    host = h200_host()
    fp8 = endpoint(name="h200-vllm-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3")
    q4 = endpoint(name="h200-llama-q4", backend="llamacpp", host=host.name, quantization="gguf_q4_k_m")
    run = measured_run({
        fp8: {1: (40.0, 48.0, 5.0, 190.0), 8: (70.0, 95.0, 8000 / fp8_aggregate, fp8_aggregate)},
        q4: {1: (97.5, 103.0, 4.42, 186.0), 8: (393.0, 623.0, 8000 / llamacpp_aggregate, llamacpp_aggregate)},
    })
    return host, run, fp8, q4


def h200_inputs(host, users=8, priority="throughput", **targets):
    return {"host": host.pk if host else None, "gpu_name": "", "compute_capability": "", "vram_gib": None, "gpu_count": 1,
            "interconnect": "pcie", "model": None, "users": users, "prompt_tokens": 512, "output_tokens": 100,
            "context_tokens": 8192, "ttft_p90_ms": None, "tpot_ms": None, "min_user_tok_s": None,
            "priority": priority, **targets}


# --- login -------------------------------------------------------------------------------------

def test_the_form_requires_login(client):
    r = client.get(reverse("decision-new"))
    assert r.status_code == 302 and reverse("login") in r.url
    r = client.post(reverse("decision-new"), V100)
    assert r.status_code == 302 and reverse("login") in r.url and not Decision.objects.exists()


def test_the_form_shows_for_a_member(member):
    r = member.get(reverse("decision-new"))
    assert r.status_code == 200
    for name in ("host", "gpu_name", "compute_capability", "vram_gib", "gpu_count", "interconnect", "model",
                 "users", "prompt_tokens", "output_tokens", "context_tokens", "ttft_p90_ms", "tpot_ms",
                 "min_user_tok_s", "priority"):
        assert f'name="{name}"' in r.content.decode()


# --- the V100 must-hold -----------------------------------------------------------------------

@pytest.mark.parametrize("users", range(1, 9))
def test_the_page_recommends_llamacpp_on_a_v100_from_the_published_figures(member, users):
    r = member.post(reverse("decision-new"), form(users=users))
    decision = Decision.objects.get()
    assert r.status_code == 302 and r.url == decision.get_absolute_url()
    assert decision.recommended == "llamacpp-q4_k_m" and decision.owner.username == "alice"
    page = member.get(r.url).content.decode()
    assert "Run llama.cpp Q4_K_M" in page
    assert 'id="rank-llamacpp-q4_k_m" data-key="llamacpp-q4_k_m" data-eligible="true" class="recommended' in page


def test_the_page_shows_fp8_and_awq_refused_on_a_v100_with_the_reason(member):
    r = member.post(reverse("decision-new"), V100, follow=True)
    page = r.content.decode()
    for key in ("vllm-fp8", "vllm-awq"):
        assert f'id="rank-{key}" data-key="{key}" data-eligible="false"' in page
    assert "Cannot start on compute capability 7.0" in page
    assert "Minimum capability: 80" in page and "fp8.py" in page  # FP8's reason and source
    assert "awq.py (get_min_capability 75); issues #1488, #4202" in page  # AWQ's
    assert "vLLM FP8 and vLLM AWQ cannot start on compute capability 7.0" in page
    assert "refused on this GPU" in page


def test_the_page_flags_the_published_vllm_figures_as_not_reproducible(member):
    page = member.post(reverse("decision-new"), V100, follow=True).content.decode()
    for key in ("vllm-fp8", "vllm-awq"):  # the rows used: FP8 at 8 users, AWQ's only one at 1 user
        section = page.split(f'id="candidate-{key}"')[1].split("</section>")[0]
        assert 'class="flag not-reproducible">not reproducible with upstream vLLM' in section
        assert section.count("These figures are not reproducible with upstream vLLM") == 1  # said once
    assert "V100 write-up (published, not measured here)" in page
    # where the published figures come from, in words a reader can follow (no file of ours)
    assert "a blog post: vLLM FP8 against llama.cpp Q4_K_M on 2 x Tesla V100 PCIe 16 GB" in page
    assert "shared/reference" not in page and "measured-here.md" not in page


@pytest.mark.parametrize("users", range(1, 9))
def test_the_api_recommends_llamacpp_on_a_v100_and_refuses_fp8_and_awq(member, users):
    r = api(member, {**V100_JSON, "users": users})
    assert r.status_code == 200, r.content
    rec = r.json()["recommendation"]
    assert rec["recommended"] == "llamacpp-q4_k_m" and rec["ranked"][0]["key"] == "llamacpp-q4_k_m"
    by_key = {c["key"]: c for c in rec["ranked"]}
    assert "Minimum capability: 80" in by_key["vllm-fp8"]["ineligible_reasons"][0]
    assert "#1488" in by_key["vllm-awq"]["ineligible_reasons"][0]
    for key in ("vllm-fp8", "vllm-awq"):
        assert not by_key[key]["eligible"]
        assert by_key[key]["evidence"] and all(
            e["flags"][0].startswith("not reproducible with upstream vLLM") for e in by_key[key]["evidence"])
    assert not Decision.objects.exists()  # computed, not saved


# --- compute capability 9.0 with measured data -------------------------------------------------

@pytest.mark.parametrize("fp8_aggregate, llamacpp_aggregate, expected", [
    (900.0, 349.0, "vllm-fp8"),
    (300.0, 349.0, "llamacpp-q4_k_m"),
])
def test_on_an_h200_fp8_is_eligible_and_the_ranking_follows_the_measurements(
        fp8_aggregate, llamacpp_aggregate, expected):
    host, run, *_ = h200_setup(fp8_aggregate, llamacpp_aggregate)
    decision = decide(h200_inputs(host), owner=user())
    result = decision.result
    by_key = {c["key"]: c for c in result["ranked"]}
    assert by_key["vllm-fp8"]["eligible"] and by_key["vllm-fp8"]["ineligible_reasons"] == []
    assert decision.recommended == expected == result["ranked"][0]["key"]
    for key, aggregate in (("vllm-fp8", fp8_aggregate), ("llamacpp-q4_k_m", llamacpp_aggregate)):
        assert by_key[key]["evidence_basis"] == "measured on this host"
        assert by_key[key]["predicted"]["aggregate_tok_s"] == {
            **by_key[key]["predicted"]["aggregate_tok_s"], "value": aggregate, "how": "measured"}
    # can start, nothing measured: only estimated, ranked below both measured ones
    awq = by_key["vllm-awq"]
    assert awq["eligible"] and awq["rank"] > 2 and awq["priority_how"] == "estimated"


def test_a_missed_target_outranks_raw_throughput(member):
    host, *_ = h200_setup(300.0, 349.0)  # llama.cpp is faster in aggregate, but its TTFT p90 is 623 ms
    page = member.post(reverse("decision-new"), form(host=host.pk, priority="throughput", ttft_p90_ms="100"),
                       follow=True).content.decode()
    assert Decision.objects.get().recommended == "vllm-fp8"
    assert "TTFT p90 target 100 ms: met, 95 ms" in page and "TTFT p90 target 100 ms: missed, 623 ms" in page


def test_on_an_h200_single_user_speed_follows_the_measured_decode():
    host, *_ = h200_setup(900.0, 349.0)
    result = advice(h200_inputs(host, users=1, priority="single_user_speed"))
    # llama.cpp decodes one stream at 1000/4.42 = 226 tok/s against FP8's 200.
    assert result["recommended"] == "llamacpp-q4_k_m"
    assert result["ranked"][0]["predicted"]["decode_tok_s_p50"]["value"] == pytest.approx(1000 / 4.42)


def test_a_stated_h200_uses_the_measurements_of_the_same_gpu_model():
    h200_setup(900.0, 349.0)
    inputs = {**h200_inputs(None), "host": None, "gpu_name": "H200", "compute_capability": "9.0",
              "vram_gib": 141.0}
    result = advice(inputs)
    assert result["recommended"] == "vllm-fp8"
    assert result["ranked"][0]["evidence_basis"] == "measured on the same GPU model"


def test_evidence_links_on_the_page_point_at_run_permalinks(member):
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    r = member.post(reverse("decision-new"), form(host=host.pk, gpu_name="", compute_capability="",
                                                    vram_gib="", priority="throughput"), follow=True)
    page = r.content.decode()
    levels = LevelResult.objects.filter(run=run, concurrency=8)
    for level in levels:
        href = f'href="{run.get_absolute_url()}#level-{level.public_id}"'  # never the database id
        assert href in page and f"#level-{level.pk}\"" not in page
    assert "H200 sweep · h200-vllm-fp8 · 8 concurrent" in page
    # The link opens the run.
    assert member.get(urlsplit(f"{run.get_absolute_url()}#level-1").path).status_code == 200


# --- evidence from the database ------------------------------------------------------------

def test_evidence_skips_what_cannot_be_used_and_says_how_much():
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    other = endpoint(name="h200-fp16", backend="vllm", host=host.name, quantization="fp16")
    nogpu = endpoint(name="bare-llama", backend="llamacpp", host="bare", quantization="gguf_q4_k_m")
    novariant = endpoint(name="h200-unknown", backend="vllm", host=host.name)
    novariant.variant = None
    novariant.save()
    measured_run({other: {1: (40.0, 50.0, 5.0, 190.0)}, nogpu: {1: (90.0, 100.0, 5.0, 180.0)},
                  novariant: {1: (40.0, 50.0, 5.0, 190.0)}})
    measured_run({fp8: {4: (60.0, 70.0, 6.0, 600.0)}}, status=Run.RUNNING)  # not finished
    measured_run({fp8: {2: (60.0, 70.0, 6.0, 400.0)}}, load_mode="rate")  # rate mode
    evidence = selectors.evidence_from_db()
    measured = [e for e in evidence if e.kind == "measured"]
    assert {(e.candidate, e.concurrency) for e in measured} == {
        ("vllm-fp8", 1), ("vllm-fp8", 8), ("llamacpp-q4_k_m", 1), ("llamacpp-q4_k_m", 8)}
    assert evidence.skipped == {"not one of the candidates (backend and variant)": 2,
                                "GPU or its compute capability unknown": 1}
    assert [e for e in evidence if e.kind == "published"] == published_v100_evidence()
    e = next(e for e in measured if e.candidate == "vllm-fp8" and e.concurrency == 8)
    assert (e.gpu_name, e.compute_capability, e.host_id) == ("NVIDIA H200", (9, 0), str(host.pk))
    assert (e.ttft_ms_p90, e.aggregate_tok_s, e.prompt_tokens, e.output_tokens) == (95.0, 900.0, 512, 100)
    assert e.url.startswith(run.get_absolute_url() + "#level-")
    assert e.peak_memory_gib == 5980.0 / 1024  # the host's only GPU


def test_evidence_comes_newest_first_and_prefers_the_endpoints_own_gpu():
    host = h200_host()
    Gpu.objects.create(host=host, index=1, name="NVIDIA L4", memory_total_mib=23034, compute_capability="8.9")
    e = endpoint(name="l4-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3")
    e.gpus.set(host.gpus.filter(index=1))
    old = measured_run({e: {1: (40.0, 50.0, 9.0, 100.0)}}, created=timezone.now() - timedelta(days=1), title="old")
    new = measured_run({e: {1: (40.0, 50.0, 8.0, 120.0)}}, title="new")
    measured = [ev for ev in selectors.evidence_from_db() if ev.kind == "measured"]
    assert [ev.label.split(" · ")[0] for ev in measured] == ["new", "old"]
    assert measured[0].url.startswith(new.get_absolute_url() + "#level-")
    assert measured[1].url.startswith(old.get_absolute_url() + "#level-")
    assert (measured[0].gpu_name, measured[0].compute_capability) == ("NVIDIA L4", (8, 9))


def test_evidence_labels_carry_the_levels_validity_flags():
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    LevelResult.objects.filter(endpoint=fp8, concurrency=8).update(
        flags=[{"code": "throttled", "reason": "GPU throttled"}])
    ev = next(e for e in selectors.evidence_from_db() if e.candidate == "vllm-fp8" and e.concurrency == 8)
    assert ev.label.endswith("(flags: throttled)")


def test_evidence_is_read_in_a_bounded_number_of_queries(django_assert_max_num_queries):
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    for i in range(15):
        measured_run({fp8: {1: (40.0, 50.0, 5.0, 190.0), 2: (45.0, 55.0, 5.5, 360.0)},
                      q4: {1: (97.0, 103.0, 4.4, 186.0)}}, title=f"sweep {i}")
    with django_assert_max_num_queries(6):
        evidence = selectors.evidence_from_db()
    assert len([e for e in evidence if e.kind == "measured"]) == 4 + 15 * 3


def test_the_host_gpu_spec_comes_from_the_inventory():
    host = h200_host()
    Gpu.objects.create(host=host, index=1, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    spec = selectors.gpu_spec_from_host(host)
    assert (spec.name, spec.compute_capability, spec.count, spec.host_id) == ("NVIDIA H200", (9, 0), 2, str(host.pk))
    assert spec.vram_gib == pytest.approx(140.4, abs=0.1)


# --- the form's messages ------------------------------------------------------------------

def errors_for(**overrides):
    f = DecisionForm(form(**overrides))
    assert not f.is_valid()
    return f.errors


@pytest.mark.parametrize("field, value, message", [
    ("compute_capability", "seven", "such as 7.0 or 9.0"),
    ("compute_capability", "2.0", "from 3.0 to 15.9"),
    ("compute_capability", "7.0.1", "such as 7.0"),
    ("compute_capability", "", "state the compute capability"),
    ("gpu_name", "  ", "Pick a registered host, or state the GPU model"),
    ("vram_gib", "0", "greater than or equal to 1"),
    ("vram_gib", "", "state the VRAM per GPU"),
    ("gpu_count", "0", "greater than or equal to 1"),
    ("interconnect", "carrier-pigeon", "Select a valid choice"),
    ("users", "0", "greater than or equal to 1"),
    ("users", "2000", "less than or equal to 1024"),
    ("users", "", "This field is required"),
    ("prompt_tokens", "0", "greater than or equal to 1"),
    ("output_tokens", "lots", "Enter a whole number"),
    ("context_tokens", "100", "at least 612 tokens"),
    ("context_tokens", "200000", "handles at most 131072 tokens"),
    ("ttft_p90_ms", "0", "greater than 0"),
    ("tpot_ms", "-5", "greater than 0"),
    ("min_user_tok_s", "nan", "Enter a number"),
    ("priority", "vibes", "Select a valid choice"),
    ("host", "987654", "Pick a registered host"),
    ("host", "1.5", "Pick a registered host"),
    ("model", "987654", "Pick a registered model"),
])
def test_it_rejects_bad_values_with_a_field_message(field, value, message):
    # a GPU no datasheet row knows: what is left blank cannot be filled in
    assert message in " ".join(errors_for(**{"gpu_name": "Custom board", field: value})[field])


def test_a_gpu_from_the_table_fills_in_what_is_left_blank_and_a_stated_value_wins():
    # NVIDIA's datasheets: the H100 SXM is compute capability 9.0 with 80 GB; the A10G is AWS's A10 variant, 24 GB
    f = DecisionForm(form(gpu_name="H100 (SXM)", compute_capability="", vram_gib=""))
    assert f.is_valid(), f.errors
    assert f.specs.gpu.compute_capability == (9, 0) and f.specs.gpu.vram_gib == 80.0
    f = DecisionForm(form(gpu_name="NVIDIA A10G", compute_capability="", vram_gib="22.5"))
    assert f.is_valid(), f.errors
    assert f.specs.gpu.compute_capability == (8, 6) and f.specs.gpu.vram_gib == 22.5


def test_the_page_offers_the_gpu_table(member):
    page = member.get(reverse("decision-new")).content.decode()
    assert 'list="gpu-models"' in page and '<option value="Tesla V100 (PCIe)">' in page
    assert '<option value="H200">' in page and '<option value="A10G">' in page


def test_the_form_and_the_api_read_a_blank_context_alike(member):
    # one question, one answer: a blank context is the prompt and the output (512 + 100) in both doors
    body = {**V100_JSON, "users": 8}
    del body["context_tokens"]
    api_rec = api(member, body).json()["recommendation"]
    page = member.get(reverse("decision-new")).content.decode()
    assert 'name="context_tokens" value=' not in page.split('id="decision-form"')[1].split("</form>")[0]
    posted = member.post(reverse("decision-new"), form(context_tokens=""), follow=True).content.decode()
    q4 = next(c for c in api_rec["ranked"] if c["key"] == "llamacpp-q4_k_m")
    assert "-c 4896 --parallel 8" in q4["launch"]["command"] and "-c 4896 --parallel 8" in posted


def test_it_rejects_a_host_without_gpus_in_the_inventory():
    host = Host.objects.create(name="bare")
    assert "has no GPU in the inventory" in " ".join(errors_for(host=host.pk)["host"])
    Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16160)
    assert "no valid compute capability" in " ".join(errors_for(host=host.pk)["host"])


def test_it_rejects_a_registered_model_without_its_shape():
    model = Model.objects.create(name="Mystery-7B", params_b=7.0)
    assert "lacks layers, KV heads, head size, context length" in " ".join(errors_for(model=model.pk)["model"])


def test_a_registered_model_brings_its_shape_and_variant_sizes(member):
    model = Model.objects.create(name="Qwen2.5-7B-Instruct", params_b=7.62, layers=28, kv_heads=4, head_dim=128,
                                 context_length=32768)
    Variant.objects.create(model=model, name="Q4_K_M", quantization="gguf_q4_k_m", size_bytes=4_683_073_536)
    r = api(member, {**V100_JSON, "model": model.pk})
    rec = r.json()["recommendation"]
    q4 = next(c for c in rec["ranked"] if c["key"] == "llamacpp-q4_k_m")
    assert rec["model"]["name"] == "Qwen2.5-7B-Instruct" and q4["fit"]["weights_source"] == "the variant's size as given"
    r = api(member, {**V100_JSON, "model": model.pk, "context_tokens": 65536})
    assert r.status_code == 400 and "at most 32768" in r.json()["errors"]["context_tokens"][0]


def test_a_picked_host_overrides_the_stated_gpu(member):
    host, *_ = h200_setup(900.0, 349.0)
    r = member.post(reverse("decision-new"), form(host=host.pk, compute_capability="7.0"), follow=True)
    result = Decision.objects.get().result
    assert result["gpu"]["name"] == "NVIDIA H200" and result["host"] == "h200-1"
    assert "registered host <strong>h200-1</strong>" in r.content.decode()


# --- the permalink ----------------------------------------------------------------------------

def test_the_permalink_opens_logged_out_and_read_only(client):
    decision = decide(_v100_inputs(), owner=user())
    r = client.get(decision.get_absolute_url())
    page = r.content.decode()
    assert r.status_code == 200 and "Run llama.cpp Q4_K_M" in page
    assert "<form" not in page.split("<main>")[1]  # nothing to submit, no change link
    assert "Change the workload" not in page


def _v100_inputs(**overrides):
    f = DecisionForm(form(**overrides))
    assert f.is_valid(), f.errors
    return f.inputs


def test_the_permalink_requires_login_when_configured(client, settings):
    settings.PERMALINKS_REQUIRE_LOGIN = True
    decision = decide(_v100_inputs(), owner=user())
    r = client.get(decision.get_absolute_url())
    assert r.status_code == 302 and reverse("login") in r.url
    client.force_login(user())
    assert client.get(decision.get_absolute_url()).status_code == 200


@pytest.mark.parametrize("public_id", ["nope", "a" * 40, "%00", "x%00y"])
def test_an_unknown_permalink_is_a_404(client, public_id):
    assert client.get(f"/d/{public_id}/").status_code == 404


def test_the_page_shows_no_secrets(member):
    host = h200_host()
    e = endpoint(name="h200-vllm-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3",
                 api_key="sk-very-secret-key")
    measured_run({e: {1: (40.0, 48.0, 5.0, 190.0)}})
    page = member.post(reverse("decision-new"), form(host=host.pk, users=4), follow=True).content.decode()
    assert "h200-vllm-fp8" in page and "sk-very-secret-key" not in page


def test_change_the_workload_starts_from_the_saved_inputs(member):
    decision = decide(_v100_inputs(users=3, tpot_ms="50"), owner=user())
    f = member.get(reverse("decision-new") + f"?from={decision.public_id}").context["form"]
    assert f["users"].value() == 3 and f["tpot_ms"].value() == 50 and f["gpu_name"].value() == "Tesla V100-PCIE-16GB"
    assert member.get(reverse("decision-new") + "?from=%00").status_code == 200


# --- measure this next ----------------------------------------------------------------------

def test_measure_next_links_prefill_the_run_form(member):
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    page = member.post(reverse("decision-new"), form(host=host.pk, users=4, priority="throughput"),
                       follow=True)
    links = {m["candidate"]: m for m in page.context["measure_next"]}
    # 4 users lies between the measured 1 and 8: interpolated, so measure it.
    assert {"vllm-fp8", "llamacpp-q4_k_m", "vllm-awq"} <= set(links)
    assert links["vllm-fp8"]["url"] in page.content.decode().replace("&amp;", "&")
    f = member.get(links["vllm-fp8"]["url"]).context["form"]
    assert [str(v) for v in f["endpoints"].value()] == [str(fp8.pk)]
    assert f["concurrency_levels"].value() == "1,2,4"
    assert str(f["prompt_tokens"].value()) == "512" and str(f["output_tokens"].value()) == "100"
    assert "Measure vLLM FP8" in f["title"].value()
    f = member.get(links["llamacpp-q4_k_m"]["url"]).context["form"]
    assert [str(v) for v in f["endpoints"].value()] == [str(q4.pk)]


def test_measure_next_says_when_no_endpoint_serves_the_candidate(client):
    host, *_ = h200_setup(900.0, 349.0)
    decision = decide(h200_inputs(host, users=8), owner=user())
    client.force_login(user())
    page = client.get(decision.get_absolute_url()).content.decode()
    assert "No enabled vLLM AWQ endpoint (vllm, awq) is registered on h200-1" in page
    assert "Ask a staff member" in page and reverse("admin:benchmarks_endpoint_add") not in page
    client.force_login(user("root", staff=True))
    assert reverse("admin:benchmarks_endpoint_add") in client.get(decision.get_absolute_url()).content.decode()


def test_a_logged_out_reader_is_asked_to_log_in_before_measuring(client):
    host, *_ = h200_setup(900.0, 349.0)
    decision = decide(h200_inputs(host, users=4), owner=user())
    page = client.get(decision.get_absolute_url()).content.decode()
    assert 'class="button measure"' not in page
    assert f'href="{reverse("login")}?next={quote(reverse("run-new"))}%3Fendpoints%3D' in page


def test_measure_next_for_a_stated_gpu_finds_endpoints_on_the_same_gpu_model():
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    inputs = {**h200_inputs(None, users=4), "host": None, "gpu_name": "NVIDIA H200",
              "compute_capability": "9.0", "vram_gib": 140.0}
    links = {m["candidate"]: m for m in presenter.measure_next_links(advice(inputs))}
    assert links["vllm-fp8"]["endpoints"] == [fp8] and links["vllm-awq"]["url"] is None


# --- the JSON API -------------------------------------------------------------------------

def test_the_api_requires_login(client):
    r = api(client, V100_JSON)
    assert r.status_code == 401 and "log in" in r.json()["error"]


def test_the_api_refuses_get(member):
    r = member.get(API)
    assert r.status_code == 405 and r["Allow"] == "POST"


@pytest.mark.parametrize("body, message", [
    ("{", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    ("[" * 100000, "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('"users"', "JSON object"),
    (json.dumps({**V100_JSON, "tpot": 5}), "unknown fields: tpot"),
    (json.dumps({**V100_JSON, "save": "yes"}), "save must be true or false"),
])
def test_the_api_rejects_a_malformed_body_with_the_reason(member, body, message):
    r = api(member, body)
    assert r.status_code == 400 and message in r.json()["error"]


@pytest.mark.parametrize("field, value, message", [
    ("users", 0, "greater than or equal to 1"),
    ("users", 1.5, "Enter a whole number"),
    ("users", True, "Enter a whole number"),
    ("compute_capability", 99, "from 3.0 to 15.9"),
    ("vram_gib", "sixteen", "Enter a number"),
    ("host", True, "Pick a registered host"),
    ("host", 10**30, "Pick a registered host"),
    ("ttft_p90_ms", -1, "greater than 0"),
    ("priority", ["throughput"], "Select a valid choice"),
    ("users", 2.5, "Enter a whole number"),
    ("gpu_memory_utilization", 1.5, "at most 1"),  # was "24 GiB usable" on a 16 GiB card
    ("gpu_memory_utilization", 0, "more than 0"),
    ("vllm_version", "latest", "such as 0.11"),
    ("builtin_model", "Llama-70B", "Select a valid choice"),
])
def test_the_api_answers_field_errors(member, field, value, message):
    r = api(member, {**V100_JSON, field: value})
    assert r.status_code == 400 and message in " ".join(r.json()["errors"][field])


def test_the_api_accepts_a_number_for_the_compute_capability_and_defaults_the_rest(member):
    r = api(member, {"gpu_name": "NVIDIA H200", "compute_capability": 9.0, "vram_gib": 141, "users": 1,
                     "prompt_tokens": 512, "output_tokens": 100})
    assert r.status_code == 200
    body = r.json()
    assert body["inputs"]["priority"] == "single_user_speed" and body["inputs"]["gpu_count"] == 1
    assert body["recommendation"]["workload"]["context_tokens"] == 612
    assert next(c for c in body["recommendation"]["ranked"] if c["key"] == "vllm-fp8")["eligible"]


def test_the_api_takes_the_session_csrf_token_like_any_post():
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user())
    assert api(strict, V100_JSON).status_code == 403
    strict.get(reverse("decision-new"))  # sets the csrftoken cookie
    r = api(strict, V100_JSON, HTTP_X_CSRFTOKEN=strict.cookies["csrftoken"].value)
    assert r.status_code == 200 and r.json()["recommendation"]["recommended"] == "llamacpp-q4_k_m"


def test_the_api_saves_when_asked_and_returns_the_permalink(member):
    r = api(member, {**V100_JSON, "save": True})
    assert r.status_code == 201
    decision = Decision.objects.get()
    assert r.json()["permalink"] == "http://testserver" + decision.get_absolute_url()
    assert r.json()["recommendation"]["recommended"] == decision.recommended == "llamacpp-q4_k_m"
    assert member.get(decision.get_absolute_url()).status_code == 200


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
_field_values = {
    "host": st.none() | st.integers(-2, 5) | _json, "model": st.none() | st.integers(-2, 5) | _json,
    "gpu_name": st.text(max_size=120) | _json,
    "compute_capability": st.sampled_from(["7.0", "9.0", "8.9", "15.9", "3.0", "7.5"]) | _json,
    "vram_gib": st.floats(-10, 2000) | _json, "gpu_count": st.integers(-1, 100) | _json,
    "interconnect": st.sampled_from(["pcie", "nvlink", ""]) | _json,
    "users": st.integers(-1, 1100) | _json, "prompt_tokens": st.integers(-1, 200000) | _json,
    "output_tokens": st.integers(-1, 200000) | _json,
    "context_tokens": st.none() | st.integers(-1, 300000) | _json,
    "ttft_p90_ms": st.none() | st.floats() | _json, "tpot_ms": st.none() | st.floats() | _json,
    "min_user_tok_s": st.none() | st.floats() | _json,
    "priority": st.sampled_from(["single_user_speed", "throughput", "memory_headroom"]) | _json,
    "save": st.booleans() | _json,
}


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_api_never_answers_500(member, data):
    host = Host.objects.filter(name="h200-1").first() or h200_setup(900.0, 349.0)[0]
    fields = {**_field_values, "host": st.sampled_from([host.pk, None]) | _field_values["host"]}
    changes = st.fixed_dictionaries({}, optional=fields)
    plausible = st.fixed_dictionaries({}, optional={
        "host": st.sampled_from([host.pk, None]), "compute_capability": _field_values["compute_capability"],
        "vram_gib": st.floats(1, 200), "gpu_count": st.integers(1, 8), "users": st.integers(1, 1024),
        "prompt_tokens": st.integers(1, 20000), "output_tokens": st.integers(1, 4000),
        "context_tokens": st.none() | st.integers(1, 140000), "ttft_p90_ms": st.none() | st.floats(1, 5000),
        "tpot_ms": st.none() | st.floats(1, 500), "min_user_tok_s": st.none() | st.floats(1, 500),
        "priority": _field_values["priority"], "save": st.booleans()})
    body = data.draw(changes | _json | changes.map(lambda c: {**V100_JSON, **c})
                     | plausible.map(lambda c: {**V100_JSON, **c}))
    r = api(member, body)
    event(f"status {r.status_code}")
    assert r.status_code in (200, 201, 400), r.content
    assert r.json()


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_the_api_never_answers_500_to_raw_bytes(member, raw):
    assert api(member, raw).status_code == 400


# --- measured peak memory, and saved results of every version -------------------------------

def test_the_measured_peak_memory_reaches_the_advisor_and_the_page(member):
    """The engine's GPU summary of its samples (peak 5980 MiB on GPU 0), stored by level_store,
    is the peak memory the evidence carries and the decision page shows beside its run."""
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    stored = LevelResult.objects.filter(run=run).first().gpu_summary
    assert stored["version"] == 3 and stored["gpus"][0]["peak_memory_used_mib"] == 5980.0
    measured = [e for e in selectors.evidence_from_db() if e.kind == "measured"]
    assert measured and all(e.peak_memory_gib == 5980.0 / 1024 for e in measured)
    page = member.post(reverse("decision-new"), form(host=host.pk, users=8, priority="throughput"),
                       follow=True).content.decode()
    section = page.split('id="candidate-vllm-fp8"')[1].split("</section>")[0]
    row = section.split('<tr data-metric="peak_memory_gib">')[1].split("</tr>")[0]
    assert ">Peak GPU memory (GiB)</td><td>5.8</td>" in row and "measured" in row
    assert f"{run.get_absolute_url()}#level-" in row


def test_an_endpoint_on_two_sampled_gpus_reads_the_peak_of_its_own():
    host = h200_host()
    Gpu.objects.create(host=host, index=1, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    e = endpoint(name="h200-vllm-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3")
    e.gpus.set(host.gpus.filter(index=1))
    run = measured_run({e: {8: (70.0, 95.0, 8.0, 900.0)}})
    two = gpu_telemetry(gpu_samples(peak_mib=30000.0, index=0) + gpu_samples(peak_mib=9000.0, index=1))
    LevelResult.objects.filter(run=run).update(gpu_summary=two.summary.to_dict())
    [ev] = [ev for ev in selectors.evidence_from_db() if ev.kind == "measured"]
    assert ev.peak_memory_gib == 9000.0 / 1024  # GPU 1, the endpoint's; not GPU 0's 30000 MiB


def test_a_decision_saved_before_figures_took_the_catalogue_s_names_shows_the_same(member):
    host, *_ = h200_setup(900.0, 349.0)
    decision = decide(h200_inputs(host, users=8, ttft_p90_ms=100.0), owner=user())
    def shown():
        return member.get(decision.get_absolute_url()).content.decode().split("<main>")[1]

    new = shown()
    assert "Peak GPU memory (GiB)" in new and "TTFT p90 target 100 ms: met, 95 ms" in new
    old_names = {"ttft_ms_p50": "ttft_p50_ms", "ttft_ms_p90": "ttft_p90_ms", "tpot_ms_p50": "tpot_p50_ms",
                 "decode_tok_s_p50": "decode_tok_s"}
    old = {k: v for k, v in decision.result.items() if k != "version"}
    old["ranked"] = [{**c, "predicted": {old_names.get(m, m): {**p, "metric": old_names.get(m, m)}
                                         for m, p in c["predicted"].items()},
                      "meets_targets": {k: {**t, "metric": old_names.get(t["metric"], t["metric"])}
                                        for k, t in c["meets_targets"].items()}} for c in old["ranked"]]
    assert presenter.result_from_stored(old) == decision.result
    Decision.objects.filter(pk=decision.pk).update(result=old)
    assert shown() == new


# --- what the issue on evidence, versions and the readable page asked -------------------------------

def test_the_form_answers_bad_engine_inputs_on_their_fields(member):
    r = member.post(reverse("decision-new"), form(users="2.5", gpu_memory_utilization="1.5"))
    assert r.status_code == 200 and not Decision.objects.exists()
    assert "Enter a whole number" in " ".join(r.context["form"].errors["users"])
    assert "at most 1" in " ".join(r.context["form"].errors["gpu_memory_utilization"])


def test_a_built_in_14b_is_never_answered_with_the_7bs_published_figures(member):
    r = api(member, {**V100_JSON, "gpu_count": 2, "builtin_model": "DeepSeek-R1-Distill-Qwen-14B"})
    assert r.status_code == 200, r.content
    rec = r.json()["recommendation"]
    assert rec["model"]["name"] == "DeepSeek-R1-Distill-Qwen-14B"
    q4 = next(c for c in rec["ranked"] if c["key"] == "llamacpp-q4_k_m")
    assert q4["evidence"] == [] and q4["predicted"]["decode_tok_s_p50"]["value"] not in (56.0, 29.4)
    assert any("measured on another model" in c for c in rec["caveats"])


def test_the_vllm_version_is_read_from_the_endpoints_registered_on_the_host(member):
    host = Host.objects.create(name="v100-box", interconnect="pcie")
    Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16384, compute_capability="7.0")
    served = endpoint(name="v100-vllm", backend="vllm", host=host.name, quantization="gptq")
    run = Run.objects.create(title="probe", prompt_tokens=512, output_tokens=100, temperature=0.7,
                             concurrency_levels=[1], requests_per_level=1, warmup_requests=0, status=Run.SUCCEEDED,
                             server_config={str(served.id): {"backend": "vllm", "version": "0.21.1", "notes": []}})
    run.endpoints.set([served])
    rec = api(member, {"host": host.pk, "users": 1, "prompt_tokens": 512, "output_tokens": 100}).json()["recommendation"]
    assert rec["builds"]["vllm_version"] == [0, 21] and "its /version in its newest run" in rec["builds"]["source"]
    gptq = next(c for c in rec["ranked"] if c["key"] == "vllm-gptq")
    assert not gptq["eligible"] and "with vLLM v0.21" in gptq["ineligible_reasons"][0]
    # stated, the version wins over the endpoint's
    stated = api(member, {"host": host.pk, "users": 1, "prompt_tokens": 512, "output_tokens": 100,
                          "vllm_version": "0.11"}).json()["recommendation"]
    assert next(c for c in stated["ranked"] if c["key"] == "vllm-gptq")["eligible"]
    # not given and no server to read it from: the answer says which releases it holds for
    served.enabled = False
    served.save()
    loose = api(member, V100_JSON).json()["recommendation"]
    assert any("depends on the vLLM version" in n["text"] for n in loose["hardware_notes"])


def test_the_page_leads_with_the_verdict_its_reasons_and_the_command(member):
    page = member.post(reverse("decision-new"), form(), follow=True).content.decode()
    head = page.split('id="hardware-notes"')[0]
    assert head.index('id="recommendation"') < head.index('id="why"') < head.index('id="launch-command"')
    assert head.count("<li>", head.index('id="why"'), head.index("</ol>")) == 3
    command = page.split('id="launch-command">')[1].split("</pre>")[0]
    assert command.startswith("llama-server -m ") and "-c 65536 --parallel 8 -ngl 99 -fa on" in command
    assert "-DCMAKE_CUDA_ARCHITECTURES=70" in page.split('id="build-command">')[1].split("</pre>")[0]
    # the breakdowns are folded, each caveat said once
    assert '<section class="candidate' in page and "<details open" not in page.split('id="candidates"')[1]
    caveats = page.split('id="caveats">')[1].split("</ul>")[0].split("<li>")[1:]
    assert len(caveats) == len(set(caveats))


def test_measure_this_prefills_a_run_of_the_recommendation(member):
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    page = member.post(reverse("decision-new"), form(host=host.pk, users=8, priority="throughput"), follow=True)
    link = page.context["measure_this"]
    assert link["candidate"] == "vllm-fp8" and link["url"] in page.content.decode().replace("&amp;", "&")
    f = member.get(link["url"]).context["form"]  # the run form's own fields, pre-filled
    assert [str(v) for v in f["endpoints"].value()] == [str(fp8.pk)]
    assert f["concurrency_levels"].value() == "1,2,4,8"
    assert str(f["prompt_tokens"].value()) == "512" and str(f["output_tokens"].value()) == "100"


def recipe_on(host, name, *, backend, variant, executable="/opt/llama.cpp/bin/llama-server"):
    return ServerRecipe.objects.create(name=name, host=host, backend=backend, executable=executable,
                                       model_path="/models/x.gguf", args=["-m", "{model}", "--port", "{port}"],
                                       variant=variant)


def test_measure_this_prefills_a_recipe_that_starts_the_recommendation(member):
    """With no endpoint serving the recommendation but a recipe on the host that starts it, the
    link pre-fills a run with that recipe (its worker starts, measures and stops the server)."""
    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    fp8.enabled = False
    fp8.save()
    other = h200_host("h200-2")
    recipe = recipe_on(host, "h200-fp8-recipe", backend="vllm", variant=fp8.variant, executable="/opt/vllm/bin/vllm")
    recipe_on(other, "elsewhere-fp8", backend="vllm", variant=fp8.variant)  # another host: not offered
    recipe_on(host, "h200-q4-recipe", backend="llamacpp", variant=q4.variant)  # another candidate
    page = member.post(reverse("decision-new"), form(host=host.pk, users=8, priority="throughput"), follow=True)
    link = page.context["measure_this"]
    assert link["candidate"] == "vllm-fp8" and [r.name for r in link["recipes"]] == ["h200-fp8-recipe"]
    assert link["endpoints"] == [] and "started by the worker on h200-1" in page.content.decode()
    f = member.get(link["url"]).context["form"]
    assert [str(v) for v in f["recipes"].value()] == [str(recipe.pk)] and not f["endpoints"].value()
    assert f["concurrency_levels"].value() == "1,2,4,8"


def test_staff_may_add_a_recipe_from_the_launch_command_when_nothing_starts_it(client):
    """Neither an endpoint nor a recipe: staff get the inventory's recipe form pre-filled from the
    launch command, the port, model and host as the worker's placeholders; members do not."""
    staff = user("inventory-staff", staff=True)
    client.force_login(staff)
    page = client.post(reverse("decision-new"), form(), follow=True)
    html = page.content.decode()
    command = html.split('id="launch-command">')[1].split("</pre>")[0]
    link = page.context["measure_this"]
    assert link["url"] is None and link["recipe_add"] and 'id="recipe-add"' in html
    add = client.get(link["recipe_add"])
    assert add.status_code == 200
    initial = add.context["adminform"].form.initial
    words = command.split()
    assert initial["backend"] == "llamacpp" and initial["executable"] == words[0] == "llama-server"
    assert initial["model_path"] == words[words.index("-m") + 1]
    args = initial["args"]  # a list, as the JSON field holds it, not a quoted string
    assert args[args.index("-m") + 1] == "{model}" and args[args.index("--port") + 1] == "{port}"
    assert args[args.index("--host") + 1] == "{host}" and "--parallel" in args
    # the pre-filled form, once given the host's executable path and host, saves a valid recipe
    host = Host.objects.create(name="v100-box")
    data = {k: v for k, v in initial.items()}
    post = {"name": data["name"], "host": host.pk, "backend": data["backend"],
            "executable": "/opt/llama.cpp/bin/llama-server", "model_path": data["model_path"],
            "args": json.dumps(args), "sweep": "{}", "env": "{}", "listen_address": "127.0.0.1",
            "notes": data["notes"], "enabled": "on", "created_0": "2026-12-01", "created_1": "12:00:00"}
    saved = client.post(reverse("admin:benchmarks_serverrecipe_add"), post)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    recipe = ServerRecipe.objects.get(name=data["name"])
    assert recipe.args == args
    member = Client()
    member.force_login(user())
    assert 'id="recipe-add"' not in member.get(page.redirect_chain[-1][0]).content.decode()


def test_a_recipe_pre_filled_from_the_decision_page_is_complete_where_a_worker_allows_it(client):
    """A worker that started with LAB_EXECUTABLES and LAB_MODEL_DIRS said so (services.host_register):
    the pre-filled recipe names that host, the executable it allows under the command's name and
    the model under its model folder, and saves as it is; the host's own allowlist lets it start."""
    from benchmarks import services
    from benchmarks.engine.launcher import Allowlist

    allows = Allowlist(executables=("/srv/llama.cpp/bin/llama-server",), model_dirs=("/srv/models",))
    host = services.host_register(name="v100-box", allows=allows)
    services.host_register(name="other-box")  # its worker told nothing: not picked
    client.force_login(user("inventory-staff", staff=True))
    page = client.post(reverse("decision-new"), form(), follow=True)
    initial = client.get(page.context["measure_this"]["recipe_add"]).context["adminform"].form.initial
    assert (int(initial["host"]), initial["executable"]) == (host.pk, "/srv/llama.cpp/bin/llama-server")
    assert initial["model_path"].startswith("/srv/models/") and "No host's worker" not in initial["notes"]
    post = {"name": initial["name"], "host": host.pk, "backend": initial["backend"],
            "executable": initial["executable"], "model_path": initial["model_path"],
            "args": json.dumps(initial["args"]), "sweep": "{}", "env": "{}", "listen_address": "127.0.0.1",
            "notes": initial["notes"], "enabled": "on", "created_0": "2026-12-01", "created_1": "12:00:00"}
    assert client.post(reverse("admin:benchmarks_serverrecipe_add"), post).status_code == 302
    recipe = ServerRecipe.objects.get(name=initial["name"])
    assert allows.refusal(recipe.spec({})) == ""


@pytest.mark.parametrize("gpu", [{}, {"gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
                                      "vram_gib": "80"}, {"gpu_name": "Tesla P40", "compute_capability": "6.1",
                                                          "vram_gib": "24"}])
def test_no_band_on_the_decision_page_runs_from_a_figure_to_itself(client, gpu):
    """A band whose two ends read the same ("48.3 to 48.3") says nothing: one figure has no spread."""
    import re as regex

    decision = decide({**V100, **gpu})
    page = client.get(decision.get_absolute_url()).content.decode()
    same = regex.findall(r"(?<![\d.])(\d+(?:\.\d+)?) to \1(?![\d.])", page)
    assert same == [], same
