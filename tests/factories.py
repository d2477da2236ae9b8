"""Tiny factories: inventory rows made inline, named for what they are; measured runs, GPU
samples and decisions made the way the product makes them (the engine, the services, the form)."""
import asyncio
import atexit
from concurrent.futures import ThreadPoolExecutor

import httpx
from django.contrib.auth import get_user_model

from benchmarks import services
from benchmarks.decisions import services as decision_services
from benchmarks.decisions.forms import DecisionForm
from benchmarks.engine import gpu as engine_gpu
from benchmarks.engine import quality as quality_engine
from benchmarks.engine.client import Load, Session, Target, Timeouts, Workload
from benchmarks.engine.gpu import GpuSample
from benchmarks.engine.observe import GpuTelemetry, measure_observed
from benchmarks.engine.plan import RunPlan
from benchmarks.engine.quality import EvalText, QualityResult
from benchmarks.engine.simulator import SimConfig, SimulatorProcess
from benchmarks.models import Endpoint, Host, Model, Run, Variant
from benchmarks.services import level_store, quality_store


def user(username="alice", staff=False):
    User = get_user_model()
    existing = User.objects.filter(username=username).first()
    return existing or User.objects.create_user(username, password="pw-for-tests-1", is_staff=staff,
                                                is_superuser=staff)


def queue_run(**arguments) -> Run:
    """services.run_create from the run form's flat names: the plan's, and the rows it runs on."""
    plan, rows = RunPlan.split(arguments)
    return services.run_create(plan=plan, **rows)


def endpoint(url="http://127.0.0.1:9", name="sim", backend="vllm", host="lab-1", model_name="",
             quantization="fp8_e4m3", api_key="", model="DeepSeek-R1-Distill-Qwen-7B"):
    h, _ = Host.objects.get_or_create(name=host)
    m, _ = Model.objects.get_or_create(name=model,
                                       defaults=dict(params_b=7.6, layers=28, kv_heads=4, head_dim=128))
    v, _ = Variant.objects.get_or_create(model=m, name=quantization, defaults={"quantization": quantization})
    return Endpoint.objects.create(name=name, host=h, backend=backend, base_url=url, model_name=model_name,
                                   variant=v, api_key=api_key)


def run_form(endpoint_rows, **overrides):
    data = {"title": "", "endpoints": [e.id for e in endpoint_rows], "prompt_tokens": 64, "output_tokens": 8,
            "temperature": 0.7, "api": "completions", "load_mode": "concurrency", "concurrency_levels": "1,2",
            "request_rates": "", "arrivals": "poisson", "max_concurrency": "", "requests_per_level": 3,
            "duration_s": "", "warmup_requests": 1, "seed": "", "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": ""}
    data.update(overrides)
    return data


# Real engine output for measured_run: one simulator per backend dialect for the whole test
# session, and each level the engine measured on it kept, keyed by what was measured.
_SIMULATORS: dict[str, object] = {}
_MEASURED: dict[tuple, tuple] = {}


def _simulator(dialect: str, decode_ms: float = 1.0):
    if (dialect, decode_ms) not in _SIMULATORS:
        sim = SimulatorProcess(SimConfig(dialect=dialect, prefill_ms=20.0, decode_ms=decode_ms)).__enter__()
        atexit.register(sim.__exit__, None, None, None)
        _SIMULATORS[dialect, decode_ms] = sim
    return _SIMULATORS[dialect, decode_ms]


def _measure(dialect: str, levels: tuple, requests: int, prompt_tokens: int, tokens: int, server: bool,
             decode_ms: float | None = None):
    """(outcome, server telemetry) per level, as the engine's Session measured them on the
    simulator speaking `dialect` (its /metrics scraped too with `server`). With `decode_ms`, on a
    simulator decoding that fast, measured anew each time (a run's own timing noise)."""
    key = (dialect, levels, requests, prompt_tokens, tokens, server)
    if key not in _MEASURED or decode_ms is not None:
        async def run():
            loads = [Load(concurrency=c, requests=requests) for c in levels]
            sim = _simulator(dialect) if decode_ms is None else _simulator(dialect, decode_ms)
            session = Session(Target(sim.url, dialect), Workload(
                prompt_tokens=prompt_tokens, output_tokens=tokens, temperature=0.7, warmup_requests=1),
                Timeouts(connect=5, first_byte=30, total=60), loads=loads)
            try:
                preflight = await session.preflight()
                assert preflight.ok, preflight.cause
                await session.prepare(preflight.model)
                out = []
                for load in loads:
                    if server:
                        outcome, _, telemetry = await measure_observed(session, load)
                    else:
                        outcome, telemetry = await session.measure(load), None
                    out.append((outcome, telemetry))
                return out
            finally:
                await session.close()
        # In a thread of its own: a test driving a browser already runs an event loop in this one.
        with ThreadPoolExecutor(1) as pool:
            measured = pool.submit(asyncio.run, run()).result()
        if decode_ms is not None:
            return measured
        _MEASURED[key] = measured
    return _MEASURED[key]


def gpu_samples(peak_mib=6000.0, start_mib=5000.0, process_mib=None, temperatures=(50, 60), index=0, ticks=2):
    """GPU samples as the engine's sampler takes them (engine.gpu.GpuSample), 0.2 s apart, memory
    rising from `start_mib` to `peak_mib`; `process_mib`: {pid: MiB} of the last sample."""
    samples = []
    for k in range(ticks):
        last = k == ticks - 1
        samples.append(GpuSample(
            t=0.2 * k, index=index, memory_used_mib=peak_mib if last else start_mib,
            process_memory_mib=dict(process_mib or {}) if last else {}, utilization_gpu=99 if last else 80,
            utilization_memory=40, temperature_c=temperatures[-1] if last else temperatures[0],
            power_w=300.0 if last else 200.0, sm_clock_mhz=1380, ecc_corrected=0, ecc_uncorrected=0))
    return samples


def gpu_telemetry(samples):
    """What a level stores of these samples: the engine's own summary and series of them."""
    return GpuTelemetry(engine_gpu.summary(samples), engine_gpu.series(samples))


def measured_run(endpoints, levels=(1, 8), requests=20, owner=None, tokens=20, prompt_tokens=512, gpu=None,
                 server=False, decode_ms=None, **fields):
    """A finished run of real engine output, stored through the real service (level_store): every
    level measured by the engine's Session on the simulator speaking each endpoint's dialect.
    `gpu`: GpuSamples each level stores the engine's summary and series of; `server`: the levels'
    server telemetry is the simulator's /metrics, scraped while measuring; `decode_ms`: measured
    anew on a simulator decoding at that speed (else the session's one measurement, reused)."""
    run = Run.objects.create(owner=owner, prompt_tokens=prompt_tokens, output_tokens=tokens, temperature=0.7,
                             concurrency_levels=list(levels), requests_per_level=requests, warmup_requests=1,
                             status=Run.SUCCEEDED, progress_total=len(endpoints) * len(levels) * requests, **fields)
    run.endpoints.set(endpoints)
    for e in endpoints:
        measured = _measure(e.backend, tuple(levels), requests, prompt_tokens, tokens, bool(server), decode_ms)
        for index, (outcome, telemetry) in enumerate(measured):
            level_store(run=run, endpoint=e, outcome=outcome, level_index=index,
                        gpu=gpu_telemetry(gpu) if gpu else None, server=telemetry)
    return run


def execute_in_process(run):
    """Measure `run` in this process (its settings) by the worker's own code, never queued: in a
    thread of its own, since a test driving a browser already runs an event loop in this one."""
    from django.db import connection

    def execute():
        try:
            services.run_execute(run_id=run.id, worker="in-process")
        finally:
            connection.close()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(execute).result()
    run.refresh_from_db()
    return run


def decision_form(inputs: dict):
    """A valid decision form for these inputs (the one validation every decision goes through)."""
    form = DecisionForm(inputs)
    assert form.is_valid(), form.errors
    return form


def decide(inputs: dict, owner=None):
    """A saved decision, made as the page makes one: the form, then the service."""
    form = decision_form(inputs)
    return decision_services.decision_create(owner=owner, inputs=form.inputs, specs=form.specs)


def advice(inputs: dict) -> dict:
    """The advisor's answer for these inputs, as /api/decide computes it; nothing saved."""
    return decision_services.decision_compute(specs=decision_form(inputs).specs)


# Real quality results for comparisons and decisions: the engine's quality step (measure_reference,
# then measure) against simulators whose known model is as sharp as asked (a sharper or flatter
# model stands for a variant further from the reference), one simulator per sharpness.
QUALITY_WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
                 "sigma tau upsilon phi chi psi omega").split()
QUALITY_TEXT = EvalText("greek", " ".join(QUALITY_WORDS[(i * 7) % len(QUALITY_WORDS)] for i in range(300)))
_QUALITY_SIMULATORS: dict[float, object] = {}


def _quality_simulator(sharpness: float):
    if sharpness not in _QUALITY_SIMULATORS:
        sim = SimulatorProcess(SimConfig(dialect="vllm", sharpness=sharpness)).__enter__()
        atexit.register(sim.__exit__, None, None, None)
        _QUALITY_SIMULATORS[sharpness] = sim
    return _QUALITY_SIMULATORS[sharpness]


def quality_results(sharpness: dict[str, float], *, reference: str | None = None, text: EvalText = QUALITY_TEXT,
                    n_ctx: int = 32, chunks: int = 2) -> dict[str, QualityResult]:
    """{name: QualityResult} as the engine measures each name's simulator on `text`; against
    `reference` (one of the names, scored once) for the others when given."""
    async def measure_all():
        async with httpx.AsyncClient(timeout=30) as client:
            scores = None
            if reference is not None:
                scores = await quality_engine.measure_reference(
                    client, _quality_simulator(sharpness[reference]).url, "vllm", text, name=reference,
                    n_ctx=n_ctx, chunks=chunks)
            out = {}
            for name, sharp in sharpness.items():
                if name == reference:
                    out[name] = scores.result
                else:
                    out[name] = await quality_engine.measure(client, _quality_simulator(sharp).url, "vllm", text,
                                                             n_ctx=n_ctx, chunks=chunks, reference=scores)
            return out
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, measure_all()).result()


def quality_measured(run, results: dict, endpoints: dict):
    """Store each QualityResult of `results` as the quality step of `endpoints[name]` in `run`,
    through the one writer (services.quality_store)."""
    for name, result in results.items():
        quality_store(run=run, endpoint=endpoints[name], result=result)


# name -> (backend, quantization) of the endpoints quality_run makes.
QUALITY_VARIANTS = {"fp16": ("vllm", "fp16"), "fp8": ("vllm", "fp8_e4m3"), "q4": ("llamacpp", "gguf_q4_k_m"),
                    "awq": ("vllm", "awq")}


def quality_run(sharpness=(("fp16", 0.05), ("fp8", 0.055), ("q4", 0.1)), *, errors=None, model=None, prefix="",
                owner=None):
    """A finished run of real engine output: speed levels on the simulator, and a quality step of
    each endpoint (the first the reference) stored as the run stores it. `sharpness`: (name, the
    known model's sharpness) per endpoint, named as QUALITY_VARIANTS; `errors`: name -> why that
    endpoint's quality step failed."""
    sharpness, errors = dict(sharpness), errors or {}
    endpoints = {}
    for name in sharpness:
        backend, quantization = QUALITY_VARIANTS[name]
        endpoints[name] = endpoint(name=prefix + name, backend=backend, quantization=quantization,
                                   **({"model": model} if model else {}))
    reference = next(iter(sharpness))
    run = measured_run(list(endpoints.values()), levels=(1,), requests=3, owner=owner, quality=True,
                       quality_reference=endpoints[reference])
    results = quality_results(sharpness, reference=reference)
    quality_measured(run, {n: r for n, r in results.items() if n not in errors}, endpoints)
    for name, error in errors.items():
        quality_store(run=run, endpoint=endpoints[name], error=error)
    return run, results


# Months of runs, made in a few queries (bulk_create): what a team's lab holds after a season.
WORKLOADS = ((128, 64), (512, 128), (2048, 256), (512, 512))
LEVEL_SETS = ((1, 8), (1, 8, 16, 32), (1, 4, 16, 64), (1,))
STATUS_MIX = (Run.SUCCEEDED,) * 14 + (Run.PARTIAL, Run.FAILED, Run.CANCELLED, Run.QUEUED)
TITLES = ("nightly {e}", "release check {e}", "", "", "upgrade to {e} build {i}", "")


def bulk_runs(n, endpoints, owners, *, start=None, minutes_apart=20, template=None, seed=1, **fields):
    """`n` runs, newest last, `minutes_apart` apart from `start`: each of one or two of
    `endpoints` (the i-th run's first endpoint is endpoints[i % len]), queued by owners[i % len],
    with the workloads, load levels, statuses and titles of a real lab (a few flagged runs, a few
    archived). `template`: a measured run whose levels (real engine output) every finished run
    stores a copy of, per endpoint and level, as a lab's database holds them. `fields` set on all."""
    import random
    from datetime import timedelta

    from django.utils import timezone

    from benchmarks.models import LevelResult

    rng = random.Random(seed)
    start = start or timezone.now() - timedelta(minutes=minutes_apart * n)
    rows, chosen = [], []
    for i in range(n):
        prompt, output = WORKLOADS[i % len(WORKLOADS)]
        status = fields.get("status") or STATUS_MIX[rng.randrange(len(STATUS_MIX))]
        created = start + timedelta(minutes=minutes_apart * i)
        picked = [endpoints[i % len(endpoints)]] + ([endpoints[(i + 1) % len(endpoints)]]
                                                    if len(endpoints) > 1 and i % 3 == 0 else [])
        flags = [{"code": "few_samples", "reason": "Only 12 completed requests: p99 needs at least 100 to mean much."}] \
            if i % 7 == 0 and status != Run.QUEUED else []
        finished = status in Run.FINISHED
        rows.append(Run(**{
            "owner": owners[i % len(owners)], "title": TITLES[i % len(TITLES)].format(e=picked[0].name, i=i),
            "prompt_tokens": prompt, "output_tokens": output, "temperature": 0.7,
            "concurrency_levels": list(LEVEL_SETS[i % len(LEVEL_SETS)]), "requests_per_level": 100,
            "warmup_requests": 1, "created": created, "started": created if finished else None,
            "finished": created + timedelta(minutes=minutes_apart // 2) if finished else None,
            "progress_total": 100, "progress_done": 100 if finished else 0, "flags": flags,
            "archived": created + timedelta(days=1) if i % 50 == 49 else None, **fields, "status": status}))
        chosen.append(picked)
    runs = Run.objects.bulk_create(rows, batch_size=2000)
    through = Run.endpoints.through
    through.objects.bulk_create([through(run_id=r.id, endpoint_id=e.id) for r, es in zip(runs, chosen) for e in es],
                                batch_size=5000)
    if template is not None:
        levels = list(template.levels.order_by("endpoint_id", "level_index"))
        levels = [lv for lv in levels if lv.endpoint_id == levels[0].endpoint_id]  # one endpoint's levels
        copies = [LevelResult(run=r, endpoint=e, level_index=lv.level_index, concurrency=lv.concurrency,
                              started_at=r.created, wall_s=lv.wall_s, completed=lv.completed, failed=lv.failed,
                              summary=lv.summary, client=lv.client, flags=lv.flags)
                  for r, es in zip(runs, chosen) if r.status in Run.FINISHED for e in es
                  for lv in levels]
        LevelResult.objects.bulk_create(copies, batch_size=5000)
    return runs
