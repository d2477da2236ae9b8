"""The backend registry: each backend's request dialect, tokenize call, identity and /metrics
names, against the simulator speaking its dialect; runs through the worker against SGLang and a
plain OpenAI-compatible server; and a backend that exists only in this file, registered at run
time, measured end to end and offered in the forms, with no other module touched."""
import asyncio
import contextlib
import re
import threading

import httpx
import pytest
from django.urls import reverse

from benchmarks.advisor.facts import Candidate, requirements
from benchmarks.engine import backends
from benchmarks.engine.backends.openai import OPENAI_FIELDS
from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.observe import measure_observed
from benchmarks.engine.server_metrics import MetricsSample, scrape, server_identity, summary
from benchmarks.engine.simulator import SimConfig, Simulator, count_tokens
from benchmarks.forms import ImportForm
from benchmarks.models import Endpoint, RequestRecord, Run
from factories import endpoint, user
from test_admin_inventory import endpoint_post
from test_worker import submit, wait_finished

DIALECTS = ["vllm", "llamacpp", "sglang", "openai"]


def measure(url, backend, n=4, **workload):
    """Preflight, prompts, warmup, then one level of `n` requests on 2 streams with the server's
    /metrics sampled: (preflight, session's prompt pool, outcome, server telemetry)."""
    async def go():
        load = Load(concurrency=2, requests=n)
        session = Session(Target(url, backend), Workload(**workload), loads=[load])
        try:
            pf = await session.preflight()
            if not pf.ok:
                return pf, None, None, None
            await session.prepare(pf.model)
            outcome, _, server = await measure_observed(session, load, metrics_interval_s=0.02)
            return pf, session.prompts.pool, outcome, server
        finally:
            await session.close()
    return asyncio.run(go())


def identity(url, backend):
    async def go():
        async with httpx.AsyncClient(timeout=10) as client:
            return await server_identity(client, url, backend)
    return asyncio.run(go())


# ------------------------------------------------------------------------------ request dialect
@pytest.mark.parametrize("backend, extras", [
    ("vllm", {"ignore_eos": True, "min_tokens": 7}),
    ("llamacpp", {"ignore_eos": True, "cache_prompt": False, "n_predict": 7}),
    ("sglang", {"ignore_eos": True, "min_tokens": 7}),
    ("openai", {}),
])
def test_each_backend_asks_for_exactly_the_tokens_in_its_own_words(backend, extras):
    session = Session(Target("http://127.0.0.1:9", backend, model="m"), Workload(temperature=0.5))
    body = session.body([1, 2, 3], 7)
    asyncio.run(session.close())
    plain = {"model": "m", "max_tokens": 7, "temperature": 0.5, "stream": True,
             "stream_options": {"include_usage": True}, "prompt": [1, 2, 3]}
    assert body == {**plain, **extras}
    if backend == "openai":
        assert set(body) <= OPENAI_FIELDS


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("prompt_tokens,warmups", [(40, 0), (300, 1), (300, 2)])
def test_chat_prompts_have_the_asked_length_beside_the_templates_own_tokens(simulator, dialect, prompt_tokens,
                                                                            warmups):
    """Chat prompts are text; the server counts its chat template's tokens too (the simulator 8,
    plus a BOS for llama.cpp). Calibrated at two lengths, the words and the template are told
    apart and every prompt has the asked length, however few warmups (before, the template's
    tokens were spread over the words, and with 0 or 1 warmup the prompts came out short:
    prompt_drift on every request)."""
    sim = simulator(dialect=dialect, decode_ms=2)
    pf, pool, outcome, _ = measure(sim.url, dialect, prompt_tokens=prompt_tokens, output_tokens=4, api="chat",
                                   warmup_requests=warmups)
    assert pf.ok, pf.cause
    assert pool is None  # chat prompts are text
    assert [r.prompt_tokens for r in outcome.results] == [prompt_tokens] * 4
    assert not any(r.prompt_drift for r in outcome.results)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_measured_with_exact_prompts_and_outputs(simulator, dialect):
    # The server stops after 3 tokens unless told to go on (as ignore_eos does): the named
    # engines are told, a plain OpenAI server cannot be, and refuses any field it does not know.
    sim = simulator(dialect=dialect, decode_ms=5, eos_after=3)
    pf, pool, outcome, server = measure(sim.url, dialect, prompt_tokens=40, output_tokens=12)
    assert pf.ok, pf.cause
    results = outcome.results
    assert [r.ok for r in results] == [True] * 4
    assert [r.prompt_tokens for r in results] == [40] * 4  # calibrated, BOS included
    if dialect == "openai":
        assert pool is None and all(r.prompt_tokens_sent is None for r in results)  # text prompts
        assert [(r.output_tokens, r.finish_reason) for r in results] == [(3, "stop")] * 4
        assert server.summary.status.startswith("not available: HTTP 404")
    else:
        assert pool, "prompts are token ids from the server's own tokenizer"
        assert [(r.output_tokens, r.finish_reason) for r in results] == [(12, "length")] * 4
        s = server.summary
        assert s.status == "ok" and s.dialect == dialect and s.idle_at_start is True
        assert s.deltas["generation_tokens"] == 4 * 12 and s.max_running >= 1


# ------------------------------------------------------------------------------ tokenize
@pytest.mark.parametrize("dialect", DIALECTS)
def test_tokenize_reads_the_servers_own_token_ids(simulator, dialect):
    sim = simulator(dialect=dialect)

    async def go():
        session = Session(Target(sim.url, dialect, model="sim-model"), Workload())
        try:
            return await session.tokenize("plain words to count")
        finally:
            await session.close()
    tokens = asyncio.run(go())
    assert tokens == (None if dialect == "openai" else count_tokens("plain words to count"))


@pytest.mark.parametrize("payload", [{"tokens": []}, {"tokens": [1, "2"]}, {"tokens": [True, 2]},
                                     {"tokens": [{"id": 1, "piece": "a"}]}, {"count": 3}, [1, 2], None])
def test_a_tokenize_answer_without_token_ids_is_none(payload):
    assert backends.Backend().read_tokens(payload) is None
    assert backends.Backend().read_tokens({"tokens": [5, 6]}) == [5, 6]


# ------------------------------------------------------------------------------ identity
def test_each_backend_reads_its_identity_from_the_simulator(simulator):
    found = {d: identity(simulator(dialect=d, slots=3).url, d) for d in DIALECTS}
    assert all(found[d]["notes"] == [] and found[d]["backend"] == d for d in DIALECTS), found
    assert found["vllm"]["version"] == "0.0.0-simulator"
    assert found["llamacpp"]["total_slots"] == 3 and found["llamacpp"]["slots"] == {"count": 3, "n_ctx": 4096}
    sglang = found["sglang"]
    assert sglang["model_path"] == "/models/sim-model" and sglang["is_generation"] is True
    assert sglang["version"] == "0.0.0-simulator"
    # Only the settings that bear on a measurement, not the hundreds /get_server_info lists.
    assert sglang["server_info"]["max_running_requests"] == 3 and "log_level" not in sglang["server_info"]
    assert found["openai"]["models"] == [{"id": "sim-model", "object": "model", "owned_by": "simulator"}]


def test_each_backend_says_how_much_context_one_request_gets(simulator):
    """The context one request may hold, read from what each server says of itself (vLLM's
    max_model_len, a llama.cpp slot's n_ctx, SGLang's context_length); a plain OpenAI server
    says nothing."""
    context = {d: backends.get(d).context_per_request(identity(simulator(dialect=d, context=777).url, d))
               for d in DIALECTS}
    assert context == {d: (None if d == "openai" else 777) for d in DIALECTS}
    # llama.cpp without /slots: /props' n_ctx, which is already per slot
    assert backends.get("llamacpp").context_per_request({"n_ctx": 512, "total_slots": 16}) == 512


def test_sglang_identity_falls_back_to_the_newer_endpoint_names():
    def handler(request):
        answers = {"/model_info": {"model_path": "Qwen/Qwen2.5-7B-Instruct", "weight_version": "v2"},
                   "/server_info": {"version": "0.5.9", "tp_size": 2, "context_length": 32768}}
        path = request.url.path
        return httpx.Response(200, json=answers[path]) if path in answers else httpx.Response(404, text="Not Found")

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await server_identity(client, "http://gpu1:30000", "sglang")
    ident = asyncio.run(go())
    assert ident["notes"] == []  # the older names' 404s are not problems
    assert ident["model_path"] == "Qwen/Qwen2.5-7B-Instruct" and ident["version"] == "0.5.9"
    assert ident["server_info"] == {"tp_size": 2, "context_length": 32768}


# ------------------------------------------------------------------------------ /metrics names
# SGLang with --enable-metrics, as prometheus_client writes its collectors (scheduler gauges,
# tokenizer counters and histograms), plus lines we do not chart.
SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 6.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 2.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.27
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 812.4
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.01
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 20480.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 4000.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 64.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="Qwen/Qwen2.5-7B-Instruct"} 6.0
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen2.5-7B-Instruct"} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 40.0
sglang:time_to_first_token_seconds_count{model_name="Qwen/Qwen2.5-7B-Instruct"} 40.0
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_sum{model_name="Qwen/Qwen2.5-7B-Instruct"} 79.6
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 3960.0
sglang:inter_token_latency_seconds_count{model_name="Qwen/Qwen2.5-7B-Instruct"} 3960.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{model_name="Qwen/Qwen2.5-7B-Instruct"} 86.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 40.0
sglang:e2e_request_latency_seconds_count{model_name="Qwen/Qwen2.5-7B-Instruct"} 40.0
"""


def test_an_sglang_page_maps_onto_the_products_figures():
    m = scrape(SGLANG)
    assert m["dialect"] == "sglang"
    assert (m["running"], m["waiting"], m["kv_cache_usage"]) == (6, 2, 0.27)
    assert m["prompt_tokens_total"] == 20480 and m["generation_tokens_total"] == 4000
    assert m["cached_prompt_tokens_total"] == 64
    assert (m["ttft_seconds_sum"], m["ttft_seconds_count"]) == (6.0, 40)
    assert m["itl_seconds_count"] == 3960 and m["e2e_seconds_sum"] == 86.0
    later = scrape(SGLANG.replace("} 4000.0", "} 4400.0").replace("} 64.0", "} 80.0")
                   .replace("_sum{model_name=\"Qwen/Qwen2.5-7B-Instruct\"} 6.0", "_sum{model_name=\"Qwen/Qwen2.5-7B-Instruct\"} 7.0")
                   .replace("_count{model_name=\"Qwen/Qwen2.5-7B-Instruct\"} 40.0\n# HELP sglang:inter",
                            "_count{model_name=\"Qwen/Qwen2.5-7B-Instruct\"} 50.0\n# HELP sglang:inter"))
    s = summary([MetricsSample(1.0, 0.001, m), MetricsSample(2.0, 0.001, later)], "ok")
    assert s.deltas["generation_tokens"] == 400 and s.deltas["cached_prompt_tokens"] == 16
    assert s.means["ttft"] == pytest.approx(0.1)  # (7 - 6) s over 10 more requests
    assert s.dialect == "sglang" and s.max_running == 6


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp", "sglang"])
def test_the_simulators_metrics_page_is_read_back_under_every_figure_it_exports(simulator, dialect):
    sim = simulator(dialect=dialect)
    m = scrape(httpx.get(sim.url + "/metrics").text)
    exported = set(backends.get(dialect).sim_metrics)
    assert m["dialect"] == dialect and set(m) - {"dialect"} == exported
    assert {"running", "waiting", "prompt_tokens_total", "generation_tokens_total"} <= exported


# ------------------------------------------------------------------------------ the registry
def test_an_unknown_backend_is_a_clear_error_and_fails_the_preflight_without_a_request(simulator):
    with pytest.raises(backends.UnknownBackend, match=r"unknown backend 'tgi' \(known: llamacpp, openai, sglang, vllm\)"):
        backends.get("tgi")
    sim = simulator()

    async def go():
        session = Session(Target(sim.url, "tgi"), Workload())
        try:
            return await session.preflight()
        finally:
            await session.close()
    pf = asyncio.run(go())
    assert not pf.ok and pf.cause == "backend: unknown backend 'tgi' (known: llamacpp, openai, sglang, vllm)"
    assert sim.stats()["requests"] == 0


def test_a_backend_that_breaks_what_the_code_relies_on_is_refused_at_registration():
    class NoLabel(backends.Backend):
        name = "nolabel"

    class Misnamed(backends.Backend):
        name, label = "misnamed", "Misnamed"
        metrics = {"queue_depth": ("misnamed_queue",)}

    class Duplicate(backends.Backend):
        name, label = "vllm", "Another vLLM"

    class Unsimulated(backends.Backend):
        name, label = "unsimulated", "Unsimulated"
        sim_metrics = ("running",)

    for cls, problem in [(NoLabel, "label is empty"), (Misnamed, "unknown metric keys ['queue_depth']"),
                         (Duplicate, "'vllm' is already registered"), (Unsimulated, "sim_metrics must be")]:
        with pytest.raises(ValueError, match=re.escape(problem)):
            backends.register(cls)
    assert backends.names() == ["llamacpp", "openai", "sglang", "vllm"]


@pytest.mark.django_db
def test_the_choices_come_from_the_registry():
    assert Endpoint._meta.get_field("backend").choices == [
        ("llamacpp", "llama.cpp (llama-server)"), ("sglang", "SGLang"), ("vllm", "vLLM"),
        ("openai", "other OpenAI-compatible")]
    assert ImportForm().fields["backend"].choices == [
        ("", "unknown / as the file says"), ("llamacpp", "llama.cpp"), ("sglang", "SGLang"), ("vllm", "vLLM"),
        ("openai", "OpenAI-compatible")]


# ------------------------------------------------------------------------------ through the worker
@pytest.mark.django_db(transaction=True)
def test_runs_against_sglang_and_a_plain_openai_server_land_through_the_worker(client, simulator,
                                                                              celery_worker_process):
    # Both servers stop after 5 tokens unless told to go on; only SGLang can be told.
    sglang = endpoint(simulator(dialect="sglang", decode_ms=2, eos_after=5).url, name="sglang-sim", backend="sglang")
    plain = endpoint(simulator(dialect="openai", decode_ms=2, eos_after=5).url, name="plain-openai", backend="openai")
    run = wait_finished(submit(client, [sglang, plain], output_tokens=8))
    assert run.status == Run.SUCCEEDED, run.error
    assert run.server_config[str(sglang.id)]["model_path"] == "/models/sim-model"
    assert run.server_config[str(plain.id)]["models"][0]["id"] == "sim-model"
    levels = list(run.levels.all())
    assert len(levels) == 4 and all(lv.completed == 3 and lv.failed == 0 for lv in levels)
    for lv in levels:
        if lv.endpoint_id == sglang.id:
            assert lv.server_summary["dialect"] == "sglang" and lv.server_summary["status"] == "ok"
            assert "stopped_short" not in {f["code"] for f in lv.flags}
        else:
            assert lv.server_summary["status"].startswith("not available: HTTP 404")
            assert "stopped_short" in {f["code"] for f in lv.flags}

    def tokens(e):
        return set(RequestRecord.objects.filter(level__endpoint=e).values_list("prompt_tokens", "output_tokens"))
    # Exact prompts both ways (token ids from SGLang's /tokenize, calibrated text for the other).
    assert tokens(sglang) == {(64, 8)} and tokens(plain) == {(64, 5)}
    assert "SGLang" in client.get(run.get_absolute_url()).content.decode()


# ------------------------------------------------------------------------------ adding a backend
class Toy(backends.Backend):
    """A made-up engine, written here and nowhere else: its own request field, tokenize route
    and answer, identity endpoint, metric names, and a server that adds two tokens to a prompt."""

    name = "toy"
    label = "Toy engine"

    def request_extras(self, max_tokens):
        return {"toy_exact_length": True}

    def tokenize_requests(self, model, text):
        return [("/toy/tokenize", {"text": text})]

    def read_tokens(self, payload):
        ids = payload.get("ids") if isinstance(payload, dict) else None
        return ids if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids) else None

    metrics = {"running": ("toy_active",), "waiting": ("toy_queued",),
               "generation_tokens_total": ("toy_tokens_out_total",)}

    async def identity(self, get):
        about = await get("/toy/about")
        return {"toy_version": about.get("version")} if isinstance(about, dict) else {}

    sim_bos_tokens = 2
    sim_metrics = ("running", "waiting", "generation_tokens_total")
    sim_tokenize_paths = ("/toy/tokenize",)

    def sim_routes(self, config):
        return {"/toy/about": {"version": "toy-1"}}

    def sim_tokenize(self, request, tokenize):
        return {"ids": tokenize(request["text"])}

    def sim_exact_length(self, request):
        return request.get("toy_exact_length") is True

    def sim_refuses(self, request):
        return "ignore_eos is not a toy field" if "ignore_eos" in request else None


@pytest.fixture
def toy():
    backends.register(Toy)
    yield backends.get("toy")
    backends.unregister("toy")


@contextlib.contextmanager
def simulator_here(**settings):
    """The simulator in a thread of this process, so that it can speak a backend registered
    here at run time (a simulator process knows the package's backends only)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        sim = Simulator(SimConfig(**settings))
        return sim, await sim.start()
    sim, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(sim.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_backend_in_one_new_class_is_measured_end_to_end(toy):
    with simulator_here(dialect="toy", decode_ms=10, eos_after=3) as url:
        pf, pool, outcome, server = measure(url, "toy", prompt_tokens=30, output_tokens=9)
        ident = identity(url, "toy")
    assert pf.ok, pf.cause
    assert pool, "prompts are built with the toy server's own tokenizer"
    assert [(r.ok, r.prompt_tokens, r.output_tokens) for r in outcome.results] == [(True, 30, 9)] * 4
    assert ident == {"backend": "toy", "toy_version": "toy-1", "notes": []}
    s = server.summary
    assert s.status == "ok" and s.dialect == "toy" and s.deltas["generation_tokens"] == 4 * 9
    assert s.idle_at_start is True and s.max_running >= 1


@pytest.mark.django_db
def test_a_backend_registered_at_run_time_is_offered_and_saved(client, toy):
    assert ("toy", "Toy engine") in Endpoint._meta.get_field("backend").choices
    assert ("toy", "Toy engine") in ImportForm().fields["backend"].choices
    assert backends.label("toy") == "Toy engine"
    toy_serving = Candidate("toy-fp16", "Toy FP16", "toy", "fp16", ("vllm-min-cc",), "fp8-size", embedding_bits=16)
    assert requirements(toy_serving)["backend"] == "Toy engine"  # the advisor's words for it
    e = endpoint(name="toy-endpoint")
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_endpoint_change", args=[e.id]), endpoint_post(e, backend="toy"))
    assert r.status_code == 302
    assert Endpoint.objects.get(id=e.id).backend == "toy"
    backends.unregister("toy")
    r = client.post(reverse("admin:benchmarks_endpoint_change", args=[e.id]), endpoint_post(e, backend="toy"))
    assert r.status_code == 200 and "Select a valid choice" in r.content.decode()


@pytest.mark.parametrize("backend, args, model, placed", [
    ("llamacpp", ["-m", "/m/q4.gguf", "-c", "4096"], "/m/q4.gguf", ["-m", "{model}", "-c", "4096"]),
    ("llamacpp", ["--model=/m/q4.gguf"], "/m/q4.gguf", ["--model={model}"]),
    ("vllm", ["serve", "/m/fp8", "--port", "1"], "/m/fp8", ["serve", "{model}", "--port", "1"]),
    # vLLM's module form: its -m names the module, not a model
    ("vllm", ["-m", "vllm.entrypoints.openai.api_server", "--model", "/m/awq"], "/m/awq",
     ["-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]),
    ("sglang", ["-m", "sglang.launch_server", "--model-path", "/m/x"], "/m/x",
     ["-m", "sglang.launch_server", "--model-path", "{model}"]),
    ("openai", ["--port", "8000"], "", ["--port", "8000"]),
])
def test_a_launch_command_becomes_a_recipe_with_the_model_where_its_backend_reads_it(backend, args, model, placed):
    assert backends.get(backend).with_model_placeholder(args) == (model, placed)


def test_a_stored_server_identity_is_read_by_its_backend():
    """Run.server_config per endpoint: the version where the server's backend keeps it, else the
    declared one; llama.cpp's context and slots beside the declared flags, which win."""
    from benchmarks.engine.server_metrics import StoredIdentity

    llama = StoredIdentity.from_dict({"backend": "llamacpp", "build_info": "b7000-abc", "version": "not this",
                                      "n_ctx": 4096, "total_slots": 4,
                                      "declared": {"engine_version": "b6000", "launch_flags": {"-c": 8192}}})
    assert llama.version == "b7000-abc" and llama.backend.version_source == "its /props"
    assert llama.flags == {"-c": 8192, "n_ctx": 4096, "total_slots": 4}
    vllm = StoredIdentity.from_dict({"backend": "vllm", "version": "0.11.0", "build_info": "not this"})
    assert vllm.version == "0.11.0" and vllm.flags == {}
    assert StoredIdentity.from_dict({"backend": "sglang", "version": "0.5.2"}).version == "0.5.2"
    silent = StoredIdentity.from_dict({"backend": "gone-engine", "version": ["odd"], "declared": {"engine_version": "1.2"}})
    assert (silent.version, silent.declared_version) == ("", "1.2")
    assert StoredIdentity.from_dict(None) == StoredIdentity() and StoredIdentity.from_dict("junk").version == ""
