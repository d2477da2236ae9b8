"""One card or two? The advisor reads runs measured on one GPU and on two (split modes) for the same
model, and the path between the host's GPUs; without such runs it says it has only the write-up's
anecdote. Then the decision page answers it from a lab run: the simulator standing in for a server
on one GPU and for one split over two (its known decode latencies make the faster one)."""
import sys

import pytest

from benchmarks.advisor import DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B
from benchmarks.advisor import Evidence, GpuSpec, Workload, advise, published_v100_evidence
from benchmarks.engine import gpu
from benchmarks.models import Model, Variant
from conftest import ROOT
from factories import decide, execute_in_process, user, queue_run
from test_multi_gpu import host_with, recipe, two_gpus

V100 = "Tesla V100-PCIE-16GB"
PAIR = GpuSpec(V100, (7, 0), 15.77, count=2, interconnect="pcie", host_id="7", topology="system")
Q4 = "llamacpp-q4_k_m"


def level(n, gpus, split, concurrency, decode, aggregate, host="7", model=R1_7B.name):
    return Evidence(id=f"level-{n}", candidate=Q4, kind="measured", label=f"run {n}", gpu_name=V100,
                    compute_capability=(7, 0), concurrency=concurrency, prompt_tokens=512, output_tokens=100,
                    url=f"/r/x/#level-{n}", host_id=host, decode_tok_s_p50=decode, aggregate_tok_s=aggregate,
                    tpot_ms_p50=1000 / decode, model=model, gpu_count=gpus, split=split)


# Per-stream decode falls with the split (its transfers cross the sockets at every token), while
# eight users share the two cards' bandwidth: measured figures a two-socket V100 pair might give.
MEASURED = [level(1, 1, "one GPU", 1, 32.0, 32.0), level(2, 2, "layer split", 1, 28.0, 28.0),
            level(3, 2, "row split", 1, 24.0, 24.0), level(4, 1, "one GPU", 8, 20.0, 160.0),
            level(5, 2, "layer split", 8, 18.0, 144.0), level(6, 2, "row split", 8, 26.0, 208.0)]


def work(users, priority="single_user_speed"):
    return Workload(users=users, prompt_tokens=512, output_tokens=100, priority=priority)


def test_one_card_when_one_gpu_decodes_faster_than_either_split():
    cards = advise(PAIR, R1_7B, work(1), MEASURED).cards
    assert (cards.answer, cards.basis) == ("one card", "measured")
    assert [(r.gpus, r.split, r.decode_tok_s_p50) for r in cards.rows] == [
        (1, "one GPU", 32.0), (2, "layer split", 28.0), (2, "row split", 24.0)]
    assert "32 tok/s on one GPU" in cards.summary and "28 tok/s on 2 GPUs, layer split" in cards.summary
    assert f"{28 / 32 * 100:.1f} %" in cards.summary  # the best split against one GPU
    assert "across CPU sockets" in " ".join(cards.reasons) and "anecdote" not in cards.summary


def test_two_cards_when_a_split_gives_more_at_this_load():
    cards = advise(PAIR, R1_7B, work(8, "throughput"), MEASURED).cards
    assert cards.answer == "two cards" and all(r.concurrency == 8 for r in cards.rows)
    assert f"{208 / 160:.1f}x" in cards.summary and "row split" in cards.summary
    # The level nearest the workload's users is read, and said to be the nearest.
    cards = advise(PAIR, R1_7B, work(2), MEASURED).cards
    assert all(r.concurrency == 1 for r in cards.rows) and "the measured level nearest 2 users" in cards.summary


def test_runs_of_another_host_or_model_do_not_answer_for_this_one():
    elsewhere = [level(n, g, s, c, d, a, host="8") for n, g, s, c, d, a in
                 [(1, 1, "one GPU", 1, 32.0, 32.0), (2, 2, "layer split", 1, 40.0, 40.0)]]
    other_model = [level(3, 1, "one GPU", 1, 32.0, 32.0, model="Qwen2.5-14B"),
                   level(4, 2, "layer split", 1, 40.0, 40.0, model="Qwen2.5-14B")]
    cards = advise(PAIR, R1_7B, work(1), elsewhere + other_model).cards
    assert cards.basis == "anecdote" and cards.rows == []


def test_without_measured_runs_it_says_it_has_only_the_anecdote():
    rec = advise(PAIR, R1_7B, work(8), published_v100_evidence())
    cards = rec.cards
    assert (cards.answer, cards.basis) == ("one card", "anecdote")
    assert "Not measured here: only the write-up's anecdote" in cards.summary
    assert "~24 tok/s" in cards.summary and "32 tok/s" in cards.summary
    assert "across CPU sockets" in cards.reasons[0] and '"gpus": ["0", "0,1"]' in cards.reasons[1]
    note = next(n for n in rec.hardware_notes if n.fact_id == "tp-over-pcie")
    assert note.source == cards.source and "published, not measured here" in note.source
    # Over NVLink the PCIe anecdote does not carry: left open, no PCIe note.
    linked = advise(GpuSpec("NVIDIA H200", (9, 0), 139.8, count=2, interconnect="nvlink", topology="nvlink"),
                    R1_7B, work(8), []).cards
    assert (linked.answer, linked.basis) == ("open", "anecdote") and "does not carry over" in linked.reasons[0]
    assert advise(GpuSpec(V100, (7, 0), 15.77), R1_7B, work(8), []).cards is None  # one GPU: no question


# ------------------------------------------------------------------------------ the decision page
def sim_args(decode_ms, split):
    """The simulator as a llama-server stand-in: it ignores the arguments after its script, which
    carry the split mode the product reads."""
    return ["-c", f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['sim', '--host', '{{host}}', "
                  f"'--port', '{{port}}', '--dialect', 'llamacpp', '--decode-ms', '{decode_ms}', '--prefill-ms', '5']; "
                  "runpy.run_module('benchmarks.engine.simulator', run_name='__main__')", "--split-mode", split]


def decided_after_a_lab_run(settings, tmp_path, monkeypatch):
    """A decision for a host of two (fake) GPUs after a lab run measured its Q4_K_M on one GPU and
    split over both; returns (run, decision)."""
    monkeypatch.setattr(gpu, "pynvml", two_gpus())
    host = host_with(2, "v100-pair", nvml=two_gpus())
    model = Model.objects.create(name=R1_7B.name, params_b=7.6, layers=28, kv_heads=4, head_dim=128)
    q4 = Variant.objects.create(model=model, name="Q4_K_M", quantization="gguf_q4_k_m")
    settings.WORKER_HOST, settings.LAB_EXECUTABLES = host.name, sys.executable
    settings.LAB_MODEL_DIRS, settings.LAB_STATE_DIR, settings.LAB_PORTS = str(tmp_path), tmp_path, "18400-18409"
    # One GPU decodes a token in 4 ms; split over two, in 7 ms: one card is faster for one user.
    one = recipe(host, name="q4-one", executable=sys.executable, model_path=str(tmp_path), gpus="0",
                 args=sim_args(4, "none"), variant=q4)
    two = recipe(host, name="q4-layer", executable=sys.executable, model_path=str(tmp_path), gpus="0,1",
                 args=sim_args(7, "layer"), variant=q4)
    for r in (one, two):
        r.full_clean()
        r.save()
    run = execute_in_process(queue_run(
        owner=user(), endpoints=[], recipes=[one, two], sweep={}, prompt_tokens=32, output_tokens=32,
        temperature=0.7, concurrency_levels=[1], requests_per_level=4, warmup_requests=0))
    assert run.status == "succeeded", run.error
    decision = decide({"host": host.pk, "gpu_name": "", "compute_capability": "", "vram_gib": None, "gpu_count": 2,
                       "interconnect": "pcie", "model": None, "users": 1, "prompt_tokens": 512,
                       "output_tokens": 100, "context_tokens": 4096, "ttft_p90_ms": None, "tpot_ms": None,
                       "min_user_tok_s": None, "priority": "single_user_speed"})
    return run, decision


@pytest.mark.django_db(transaction=True)
def test_the_decision_page_answers_one_card_or_two_from_a_lab_run(client, settings, tmp_path, monkeypatch):
    run, decision = decided_after_a_lab_run(settings, tmp_path, monkeypatch)
    cards = decision.result["cards"]
    assert (cards["answer"], cards["basis"]) == ("one card", "measured")
    assert [(r["gpus"], r["split"]) for r in cards["rows"]] == [(1, "one GPU"), (2, "layer split")]
    one_row, two_row = cards["rows"]
    assert one_row["decode_tok_s_p50"] == pytest.approx(1000 / 4, rel=0.15)
    assert two_row["decode_tok_s_p50"] == pytest.approx(1000 / 7, rel=0.15)
    assert "PCIe, under one switch (PIX)" in " ".join(cards["reasons"])  # the host's probed topology
    page = client.get(decision.get_absolute_url()).content.decode()
    assert 'id="cards" data-answer="one card" data-basis="measured"' in page
    assert page.count('class="evidence" href="' + run.get_absolute_url()) >= 2


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_answer_fits_the_decision_page_at_1366_px(settings, tmp_path, monkeypatch, live_server, page):
    from test_pages_at_a_glance import OVERFLOW

    _, decision = decided_after_a_lab_run(settings, tmp_path, monkeypatch)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(live_server.url + decision.get_absolute_url())
    assert page.locator("#cards-table tbody tr").count() == 2
    assert page.locator("#cards-question").inner_text() == "One card or two?"
    assert page.evaluate(OVERFLOW) == []
    assert page.js_errors == []
