"""Repeated trials and the SLO search, from the run form and the API through a real worker (real
PostgreSQL and Celery) to the run page, the comparison's wording, the decision page and the
presets; the page in Chromium at 1366 px."""
import pytest
from django.urls import reverse

from benchmarks.compare import CONTENDED, sentence
from benchmarks.engine.catalogue import Figure
from benchmarks.engine.points import Point
from benchmarks.forms import PRESETS, RunForm
from benchmarks.models import Endpoint, Gpu, LevelResult, Run
from benchmarks.selectors import comparison_series
from benchmarks.services import comparison_create
from conftest import log_in
from factories import decide, endpoint, execute_in_process, run_form, user
from test_api import minimal_run, submit, token_for
from test_decisions import V100
from test_worker import wait_finished

DECODE = Figure("decode_tok_s", "p50")


def form_with(**overrides):
    return RunForm(run_form([Endpoint.objects.first() or endpoint()], **overrides))


# --- the form and the API -------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("overrides, field, message", [
    (dict(trials=0), "trials", "greater than or equal to 1"),
    (dict(trials=11), "trials", "less than or equal to 10"),
    (dict(trials="three"), "trials", "Enter a whole number"),
    (dict(load_mode="slo", search_max_concurrency=16), "slo_ttft_ms", "needs a target to meet"),
    (dict(load_mode="slo", slo_ttft_ms=500), "search_max_concurrency", "highest concurrency to try"),
    (dict(load_mode="slo", slo_ttft_ms=500, search_max_concurrency=100000), "search_max_concurrency",
     "above the limit of 512"),
    (dict(load_mode="slo", slo_ttft_ms=500, search_max_concurrency=8, slo_percentile=95), "slo_percentile",
     "Select a valid choice"),
])
def test_bad_trials_and_slo_search_settings_are_field_errors(overrides, field, message):
    form = form_with(**overrides)
    assert not form.is_valid()
    assert message in " ".join(form.errors[field]), form.errors


@pytest.mark.django_db
def test_trials_count_in_the_run_s_request_limit(settings):
    settings.MAX_REQUESTS_PER_RUN = 20
    # 2 levels x 3 requests x 3 trials = 18; x 4 trials = 24.
    assert form_with(trials=3).is_valid()
    form = form_with(trials=4)
    assert not form.is_valid() and "would send 24 requests" in form.non_field_errors()[0]
    # A search from 1 to 16 measures at most 2 + log2(15) rounded up = 6 levels: 6 x 3 requests.
    assert form_with(load_mode="slo", slo_ttft_ms=100, search_max_concurrency=16).is_valid()
    form = form_with(load_mode="slo", slo_ttft_ms=100, search_max_concurrency=16, trials=2)
    assert not form.is_valid() and "would send 36 requests" in form.non_field_errors()[0]


@pytest.mark.django_db
def test_the_api_takes_trials_and_an_slo_search_with_the_form_s_messages():
    e = endpoint()
    api, _ = token_for()
    r = submit(api, minimal_run(e, trials=0))
    assert r.status_code == 400 and "greater than or equal to 1" in r.json()["errors"]["trials"][0]
    r = submit(api, minimal_run(e, load_mode="slo", search_max_concurrency=32))
    assert r.status_code == 400 and "needs a target to meet" in r.json()["errors"]["slo_ttft_ms"][0]
    r = submit(api, minimal_run(e, trials=3))
    assert r.status_code == 201 and r.json()["trials"] == 3
    run = Run.objects.get(public_id=r.json()["public_id"])
    assert run.trials == 3 and run.progress_total == 2 * 2 * 3  # levels x requests x trials
    r = submit(api, minimal_run(e, load_mode="slo", search_max_concurrency=32, slo_ttft_ms=800, slo_percentile=90,
                                trials=2))
    assert r.status_code == 201 and r.json()["load_mode"] == "slo", r.json()
    run = Run.objects.get(public_id=r.json()["public_id"])
    assert (run.max_concurrency, run.slo_percentile, run.slo, run.concurrency_levels) == (32, 90, {"ttft_ms": 800}, [])
    assert run.progress_total == 7 * 2 * 2  # at most 2 + log2(31) rounded up = 7 levels, each twice


@pytest.mark.django_db
def test_presets_fill_the_form(client):
    client.force_login(user())
    page = client.get(reverse("run-new")).content.decode()
    for key, preset in PRESETS.items():
        assert f'href="?preset={key}"' in page and preset["label"] in page
    page = client.get(reverse("run-new") + "?preset=rag").content.decode()
    assert 'name="prefix_tokens" value="2048"' in page and 'name="prefix_share" value="100"' in page
    assert 'id="preset-note"' in page
    page = client.get(reverse("run-new") + "?preset=summarisation").content.decode()
    assert 'name="prompt_tokens" value="3000"' in page
    assert "<script>" not in page  # the links are server-rendered: nothing inline for the CSP to refuse


# --- the wording of comparisons ---------------------------------------------------------------

def point(values) -> Point:
    mean = sum(values) / len(values)
    return Point(label="8 concurrent", concurrency=8, figures={DECODE.name: mean},
                 samples={DECODE.name: tuple(values)} if len(values) > 1 else {})


def series(label):
    return {"label": label}


def test_faster_only_when_the_trials_say_so():
    # 50, 52, 54 against 40, 41, 42 tok/s: t = 11 / sqrt(4/3 + 1/3) = 8.52 on 2.9 df: significant.
    s = sentence(DECODE, series("A"), point([50, 52, 54]), series("B"), point([40, 41, 42]), "at 8 concurrent users")
    assert s["significant"] is True and "A decodes 1.27× faster than B" in s["text"]
    assert "significant, Welch's t-test at 5 %, n=3 and n=3 trials" in s["text"]
    # 50, 60, 70 against 45, 55, 65: t = 5 / sqrt(200/3) = 0.61: no winner named.
    s = sentence(DECODE, series("A"), point([50, 60, 70]), series("B"), point([45, 55, 65]), "at 8 concurrent users")
    assert s["significant"] is False and "faster" not in s["text"]
    assert s["text"].startswith("No significant difference in Decode per stream p50 between A and B")
    assert "n=3 and n=3 trials" in s["text"]


def test_single_trials_keep_the_plain_wording_and_claim_nothing():
    s = sentence(DECODE, series("A"), point([52]), series("B"), point([41]), "at 8 concurrent users")
    assert s["significant"] is None and s["text"] == (
        "A decodes 1.27× faster than B at 8 concurrent users (52.0 vs 41.0 tok/s per stream).")
    s = sentence(DECODE, series("A"), point([50, 52, 54]), series("B"), point([41]), "at 8 concurrent users")
    assert s["significant"] is None and "not tested for significance: n=3 and n=1 trials" in s["text"]


# --- through the worker -----------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_run_of_three_trials_shows_intervals_and_compares_by_significance(client, simulator,
                                                                             celery_worker_process):
    fast = endpoint(simulator(decode_ms=2).url, name="fast")
    slow = endpoint(simulator(decode_ms=10).url, name="slow")
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([fast, slow], concurrency_levels="1,2", requests_per_level=4,
                                                 output_tokens=12, trials=3))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, run.error
    assert run.progress_done == run.progress_total == 2 * 2 * 4 * 3
    stored = sorted(LevelResult.objects.filter(run=run, endpoint=fast).values_list("level_index", "trial", "concurrency"))
    assert stored == [(0, 0, 1), (0, 1, 1), (0, 2, 1), (1, 0, 2), (1, 1, 2), (1, 2, 2)]
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="trials-note"' in page and "n = 3" in page and 'data-trials="3"' in page
    assert page.count('class="ci">± ') >= 2 * 2 * 3  # every row's TTFT figures at least
    assert "Mean and 95 % interval across trials" in page  # the method, in the definitions
    # The comparison: 500 against 100 tok/s per stream is far beyond the trials' noise.
    comparison = comparison_create(owner=None, runs=[run], reports=[])
    page = client.get(comparison.get_absolute_url()).content.decode()
    points = {s["label"].split(" ")[0]: s["levels"] for s in comparison_series(comparison)}
    # A level a contention flag marks (a loaded machine: the host, the client or a server busy) names no
    # winner; every other level names the faster one, tested
    contended = [bool(set(a.flags + b.flags) & set(CONTENDED)) for a, b in zip(points["fast"], points["slow"])]
    if not all(contended):
        assert "decodes" in page and "significant, Welch&#x27;s t-test at 5 %, n=3 and n=3 trials" in page
    if any(contended):
        assert "No winner named for" in page and "not comparable" in page
    assert points["fast"][0].trials == 3 and len(points["fast"][0].samples[DECODE.name]) == 3
    results = client.get(f"/api/v1/runs/{run.public_id}/results/").json()
    across = [a for a in results["across_trials"] if a["endpoint"] == "fast"]
    assert len(across) == 2 and across[0]["figures"]["ttft_ms_p50"]["n"] == 3
    assert {h["trial"] for h in results["headlines"]} == {0, 1, 2}


@pytest.mark.django_db(transaction=True)
def test_the_slo_search_finds_the_simulators_slots_and_the_decision_page_says_so(client, simulator,
                                                                                  celery_worker_process):
    """3 slots, 5 ms prefill, 20 tokens of 10 ms: up to 3 users TTFT is the prefill; a fourth
    waits a whole request (about 205 ms), past the 100 ms target at p99. So 3 users."""
    sim = simulator(slots=3, prefill_ms=5, decode_ms=10)
    e = endpoint(sim.url, name="sim-3-slots", quantization="fp8_e4m3")
    Gpu.objects.create(host=e.host, index=0, name=V100["gpu_name"], compute_capability="7.0", memory_total_mib=16384)
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], load_mode="slo", search_max_concurrency=8, slo_ttft_ms=100,
                                                 slo_percentile=99, requests_per_level=12, output_tokens=20, trials=2,
                                                 concurrency_levels=""))
    assert r.status_code == 302, r.content.decode()[:2000]
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, run.error
    search = run.searches()[str(e.id)]
    assert (search.status, search.best) == ("found", 3), search.to_dict()
    # Bisection: 1 met, 8 missed, 4 missed, 2 met, 3 met: five levels of two trials each.
    assert [p.concurrency for p in search.probes] == [1, 8, 4, 2, 3]
    assert run.levels.count() == 5 * 2 and run.progress_done == run.progress_total == 5 * 2 * 12
    page = client.get(run.get_absolute_url()).content.decode()
    assert "serves 3 concurrent users within TTFT p99 ≤ 100 ms (4 concurrent users miss)" in page
    decision = decide({**V100, "users": "4", "ttft_p90_ms": "200"})
    page = client.get(decision.get_absolute_url()).content.decode()
    assert ("sim-3-slots serves 3 concurrent users within your targets (TTFT p99 ≤ 100 ms): fewer than the 4 you "
            "asked for.") in page
    # A decision asking for a tighter TTFT than the search met learns nothing from it.
    assert 'id="slo-capacity"' not in client.get(
        decide({**V100, "users": "4", "ttft_p90_ms": "50"}).get_absolute_url()).content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_run_page_of_trials_and_a_search_fits_1366_px(page, live_server, simulator, celery_worker_process):
    from test_datasets_browser import WIDER_THAN_SCREEN

    e = endpoint(simulator(slots=2, prefill_ms=5, decode_ms=10).url, name="two-slots")
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, live_server, "/runs/new/?preset=chat")
    from benchmarks.forms import PRESETS
    assert page.locator("#presets a.preset").count() == len(PRESETS) >= 5
    assert page.evaluate(WIDER_THAN_SCREEN) == []
    from django.test import Client
    c = Client()
    c.force_login(user())
    r = c.post(reverse("run-new"), run_form([e], load_mode="slo", search_max_concurrency=4, slo_ttft_ms=100,
                                            requests_per_level=6, output_tokens=20, trials=2, concurrency_levels=""))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get())
    page.goto(live_server.url + run.get_absolute_url())
    answer = page.locator("#slo-answers").inner_text()
    assert "serves 2 concurrent users" in answer
    # The answer's level across the two trials: its TTFT p99 with a 95 % interval.
    assert "At 2 concurrent users, across 2 trials (mean ± 95 % CI): TTFT p99 " in answer and " ± " in answer
    assert page.locator("#results td .ci").count() > 0
    assert page.evaluate(WIDER_THAN_SCREEN) == []
    assert page.js_errors == []


@pytest.mark.django_db(transaction=True)
def test_a_resumed_search_replays_the_stored_probes_and_measures_only_the_rest(simulator):
    """A worker that died after the first two probes: the next one replays them from the stored
    levels (not measured again) and goes on to the same answer, the simulator's 2 slots."""
    e = endpoint(simulator(slots=2, prefill_ms=5, decode_ms=10).url, name="two-slots")
    run = Run.objects.create(owner=user(), prompt_tokens=16, output_tokens=20, temperature=0, requests_per_level=8,
                             warmup_requests=0, load_mode="slo", max_concurrency=8, slo_ttft_ms=100, trials=1,
                             progress_total=5 * 8)
    run.endpoints.set([e])
    run = execute_in_process(run)
    assert (run.status, run.searches()[str(e.id)].best) == (Run.SUCCEEDED, 2), (run.error, run.slo_search)
    probes = [p.concurrency for p in run.searches()[str(e.id)].probes]
    assert probes == [1, 8, 4, 2, 3]
    kept = dict(run.levels.filter(level_index__lt=2).values_list("level_index", "pk"))
    run.levels.filter(level_index__gte=2).delete()  # what the dead worker had not stored yet
    Run.objects.filter(id=run.id).update(status=Run.QUEUED, slo_search={}, progress_done=2 * 8)
    run = execute_in_process(run)
    assert run.status == Run.SUCCEEDED and run.attempts == 2, run.error
    search = run.searches()[str(e.id)]
    assert ([p.concurrency for p in search.probes], search.best) == (probes, 2)
    assert dict(run.levels.filter(level_index__lt=2).values_list("level_index", "pk")) == kept
    assert run.levels.count() == 5
