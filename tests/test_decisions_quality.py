"""Quality on the decision page: a quality row per candidate (measured for the same model and
variant, else the write-up's published figure labelled, else "not measured"), and the priority
"least quality loss", which ranks on measured KL divergence from one reference or on perplexity
on one text, and says which. Figures come from the engine's quality step against simulators of
known sharpness (a flatter or sharper model stands for a variant further from the reference)."""
import html
import re

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B, DEFAULT_CANDIDATES, GpuSpec, QualityEvidence, Workload, advise,
                                published_v100_evidence, published_v100_quality)
from benchmarks.decisions import presenter, selectors
from benchmarks.engine.points import QualityPoint
from benchmarks.engine.quality import EvalText
from benchmarks.models import Decision, Gpu, Host, QualityMeasurement, Run
from factories import QUALITY_TEXT, advice, decide, endpoint, quality_results, quality_run, user

H200 = GpuSpec("NVIDIA H200", (9, 0), 139.8)
V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 16.0)
MODEL = DEEPSEEK_R1_DISTILL_QWEN_7B.name
CANDIDATE = {"fp8": "vllm-fp8", "q4": "llamacpp-q4_k_m", "awq": "vllm-awq"}
QUALITY = "least_quality_loss"


def evidence(results, reference=None, model=MODEL, prefix=""):
    """Quality evidence as the decision's selector makes it: each result read as a QualityPoint."""
    return [QualityEvidence(id=f"{prefix}{name}", candidate=CANDIDATE[name], model=model, label=f"run · {name}",
                            point=QualityPoint.measured(result, label=f"run · {name}", model=model, reference=reference))
            for name, result in results.items() if name in CANDIDATE]


def decide_on(gpu, quality, priority=QUALITY, users=1):
    """Among the write-up's three candidates (the ones these quality figures are for)."""
    return advise(gpu, DEEPSEEK_R1_DISTILL_QWEN_7B, Workload(users=users, prompt_tokens=512, output_tokens=100,
                                                             priority=priority),
                  published_v100_evidence(), DEFAULT_CANDIDATES[:3], quality=quality)


def test_least_quality_loss_ranks_by_kl_from_the_reference_and_says_what_it_used():
    results = quality_results({"fp16": 0.05, "fp8": 0.051, "awq": 0.06, "q4": 0.1}, reference="fp16")
    kl = {name: results[name].reference["kl_mean"] for name in CANDIDATE}
    rec = decide_on(H200, evidence(results, reference="fp16 (FP16)"))
    order = sorted(CANDIDATE, key=kl.get)
    assert [r.key for r in rec.ranked] == [CANDIDATE[n] for n in order] and rec.recommended == CANDIDATE[order[0]]
    where = (f"from fp16 (FP16), on greek (sha256 {QUALITY_TEXT.sha256[:12]}, "
             f"{results['fp8'].text['tokens']:,} tokens) in windows -c 32 --chunks 2")
    assert rec.quality_basis.figure == "kl_mean" and rec.quality_basis.words == f"KL divergence {where}"
    for name in CANDIDATE:
        r = rec.candidate(CANDIDATE[name])
        assert f"Ranked by quality loss: KL divergence {kl[name]:,.4f} nats ({where})." in r.reasons
        assert r.quality.how == "measured" and r.quality.figures["kl_mean"] == kl[name]
        assert r.priority_value == -kl[name]
    top = rec.candidate(CANDIDATE[order[0]])
    assert rec.summary.startswith(f"{top.label} for 1 user on NVIDIA H200: least quality loss, KL divergence "
                                  f"{kl[order[0]]:,.4f} nats")
    assert rec.confidence == "high"


def test_it_ranks_by_perplexity_on_the_same_text_when_that_compares_more_candidates():
    # FP8 is the reference itself here: only Q4_K_M has a KL divergence, both a perplexity.
    results = quality_results({"fp8": 0.05, "q4": 0.1}, reference="fp8")
    rec = decide_on(H200, evidence(results, reference="fp8 (FP8 E4M3)"))
    assert rec.quality_basis.figure == "perplexity" and set(rec.quality_basis.candidates) == {"vllm-fp8",
                                                                                                "llamacpp-q4_k_m"}
    ppl = {n: results[n].perplexity for n in ("fp8", "q4")}
    best = min(ppl, key=ppl.get)
    assert rec.ranked[0].key == CANDIDATE[best]
    assert rec.quality_basis.words.startswith("perplexity, on greek (sha256")
    assert any(r.startswith(f"Ranked by quality loss: perplexity {ppl['q4']:,.3f} (on greek (sha256")
               for r in rec.candidate("llamacpp-q4_k_m").reasons)
    awq = rec.candidate("vllm-awq")
    assert awq.priority_value is None and awq.quality.how == "not measured"
    assert "Its quality was not measured for this model." in awq.reasons
    assert rec.confidence == "medium" and "no comparable quality figures for vLLM AWQ" in rec.confidence_why
    [suggested] = [s for s in rec.measure_next if s.candidate == "vllm-awq"]
    assert suggested.quality and "quality not measured comparably" in suggested.why


def test_figures_on_another_text_do_not_rank_against_each_other_and_it_says_why():
    other = EvalText("other", QUALITY_TEXT.text + " omega omega")
    first = quality_results({"fp16": 0.05, "fp8": 0.051}, reference="fp16")
    second = quality_results({"fp16": 0.05, "q4": 0.1}, reference="fp16", text=other)
    rec = decide_on(H200, evidence(first, "fp16 (FP16)") + evidence(second, "fp16 (FP16)", prefix="2-"))
    assert rec.quality_basis.candidates == ("vllm-fp8",)
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert q4.priority_value is None and q4.quality.how == "measured"  # shown, but not ranked
    assert any(r.startswith("Its measured KL divergence does not rank against the others': they were measured on "
                            "different texts (other (sha256") for r in q4.reasons)


def test_published_perplexities_are_shown_labelled_and_never_ranked():
    rec = decide_on(H200, published_v100_quality())
    fp8, q4, awq = (rec.candidate(k) for k in ("vllm-fp8", "llamacpp-q4_k_m", "vllm-awq"))
    assert fp8.quality.how == q4.quality.how == "published" and awq.quality.how == "not measured"
    assert fp8.quality.figures == {"perplexity": 6.15} and q4.quality.figures == {"perplexity": 6.28}
    assert ("Quality of llama.cpp Q4_K_M: perplexity 6.280 (V100 write-up (published, not measured here); "
            "evaluation text not stated).") in q4.reasons
    assert all(r.priority_value is None for r in rec.ranked) and rec.quality_basis.figure is None
    assert "Its published quality figures compare with nothing: their evaluation text is not stated." in q4.reasons
    assert rec.recommended is None


def test_quality_is_never_carried_to_another_model():
    results = quality_results({"fp16": 0.05, "fp8": 0.051, "q4": 0.1}, reference="fp16")
    rec = decide_on(H200, evidence(results, "fp16 (FP16)", model="Llama-3-8B") + published_v100_quality())
    assert rec.candidate("vllm-fp8").quality.how == "published"  # the DeepSeek write-up's, not Llama's
    assert rec.candidate("llamacpp-q4_k_m").quality.figures == {"perplexity": 6.28}
    assert rec.quality_basis.figure is None


def test_a_speed_priority_still_shows_each_candidate_s_quality():
    results = quality_results({"fp16": 0.05, "q4": 0.1}, reference="fp16")
    rec = decide_on(V100, evidence(results, "fp16 (FP16)") + published_v100_quality(), priority="single_user_speed")
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert rec.recommended == "llamacpp-q4_k_m" and q4.quality.how == "measured"
    assert rec.candidate("vllm-fp8").quality.how == "published"
    assert not any(r.startswith("Ranked by quality loss") for r in q4.reasons)


# --- the page, the API and the evidence read from the database ---------------------------------


def stated_gpu(gpu_name="NVIDIA H200", cc="9.0", vram="141", priority=QUALITY, users=1):
    return {"host": "", "gpu_name": gpu_name, "compute_capability": cc, "vram_gib": vram, "gpu_count": "1",
            "interconnect": "pcie", "model": "", "users": str(users), "prompt_tokens": "512", "output_tokens": "100",
            "context_tokens": "8192", "ttft_p90_ms": "", "tpot_ms": "", "min_user_tok_s": "", "priority": priority}


@pytest.mark.django_db
def test_the_page_shows_a_quality_row_per_candidate_and_links_the_measurement(client):
    run, results = quality_run((("fp16", 0.05), ("fp8", 0.051), ("q4", 0.1)))
    decision = decide(stated_gpu(), owner=user())
    page = html.unescape(client.get(decision.get_absolute_url()).content.decode())
    kl = {n: results[n].reference["kl_mean"] for n in ("fp8", "q4")}
    assert page.split('id="recommendation">')[1].startswith("Run vLLM FP8")
    fp8 = page.split('id="candidate-vllm-fp8"')[1].split("</section>")[0]
    assert f'<tr data-metric="kl_mean"><th title=' in fp8 and f"<td>{kl['fp8']:,.4f}</td>" in fp8
    assert f'href="{run.get_absolute_url()}#quality-fp8"' in fp8 and "fp16 (FP16)" in fp8
    awq = page.split('id="candidate-vllm-awq"')[1].split("</section>")[0]
    assert "Not measured for DeepSeek-R1-Distill-Qwen-7B" in awq
    table = page.split('id="candidates"')[1].split("</table>")[0]
    shown = len(decision.result["ranked"])  # fp8 and q4 measured, every other candidate not
    assert table.count('data-quality="measured"') == 2 and table.count('data-quality="not measured"') == shown - 2
    assert "ranked on KL divergence from fp16 (FP16)" in page.split('id="asked"')[1].split("</dl>")[0]


@pytest.mark.django_db
def test_on_a_v100_the_published_perplexities_show_labelled(client):
    decision = decide(stated_gpu("Tesla V100-PCIE-16GB", "7.0", "16", priority="single_user_speed"))
    page = html.unescape(client.get(decision.get_absolute_url()).content.decode())
    q4 = page.split('id="candidate-llamacpp-q4_k_m"')[1].split("</section>")[0]
    assert '<tr data-metric="perplexity"><th title=' in q4 and "<td>6.280</td>" in q4
    assert "published, not measured here; evaluation text not stated" in q4
    assert "evaluation text and windows not stated" in q4
    fp8 = page.split('id="candidate-vllm-fp8"')[1].split("</section>")[0]
    assert "<td>6.150</td>" in fp8


@pytest.mark.django_db
def test_the_evidence_reads_finished_quality_steps_of_the_candidates_only():
    run, results = quality_run((("fp16", 0.05), ("fp8", 0.051), ("q4", 0.1)),
                               errors={"q4": "POST /tokenize: HTTP 500"})
    running, _ = quality_run((("fp16", 0.05), ("awq", 0.06)), prefix="b-")
    Run.objects.filter(pk=running.pk).update(status=Run.RUNNING)
    measured = [ev for ev in selectors.quality_evidence_from_db() if ev.kind == "measured"]
    row = QualityMeasurement.objects.get(run=run, endpoint__name="fp8")
    assert [(ev.id, ev.candidate, ev.model) for ev in measured] == [(f"quality-{row.public_id}", "vllm-fp8", MODEL)]
    [ev] = measured
    assert ev.point.get("kl_mean") == results["fp8"].reference["kl_mean"] and ev.point.reference == "fp16 (FP16)"
    assert ev.url == f"{run.get_absolute_url()}#quality-fp8"


@pytest.mark.django_db
def test_the_evidence_is_read_in_a_bounded_number_of_queries(django_assert_max_num_queries):
    for i in range(3):
        quality_run((("fp16", 0.05), ("fp8", 0.051), ("q4", 0.1)), prefix=f"{i}-")
    with django_assert_max_num_queries(1):
        assert len([ev for ev in selectors.quality_evidence_from_db() if ev.kind == "measured"]) == 6


@pytest.mark.django_db
def test_the_api_answers_each_candidate_s_quality():
    quality_run((("fp16", 0.05), ("q4", 0.1)))
    result = advice(stated_gpu())
    by_key = {c["key"]: c for c in result["ranked"]}
    assert by_key["llamacpp-q4_k_m"]["quality"]["how"] == "measured"
    assert by_key["vllm-fp8"]["quality"]["how"] == "published"
    assert by_key["vllm-fp8"]["quality"]["figures"] == {"perplexity": 6.15}
    assert result["quality_basis"]["figure"] == "kl_mean" and result["version"] >= 3


@pytest.mark.django_db
def test_measure_next_for_quality_asks_for_a_quality_step(client):
    quality_run((("fp16", 0.05), ("q4", 0.1)))
    host = Host.objects.create(name="h200-1")
    Gpu.objects.create(host=host, index=0, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    endpoint(name="h200-fp8", host=host.name, quantization="fp8_e4m3")
    decision = decide(stated_gpu())
    links = {m["candidate"]: m for m in presenter.measure_next_links(decision.result)}
    assert "quality not measured comparably" in links["vllm-fp8"]["why"]
    assert links["vllm-fp8"]["quality"] is True and not links["llamacpp-q4_k_m"]["quality"]
    client.force_login(user())
    page = client.get(links["vllm-fp8"]["url"])
    assert page.context["form"]["quality"].value() == "on"
    assert re.search(r'<input type="checkbox" name="quality"[^>]* checked', page.content.decode())


@pytest.mark.django_db
def test_a_decision_saved_before_quality_figures_says_they_were_not_read(client):
    decision = decide(stated_gpu("Tesla V100-PCIE-16GB", "7.0", "16", priority="single_user_speed"))
    v2 = {**decision.result, "version": 2}
    del v2["quality_basis"]
    v2["ranked"] = [{k: v for k, v in c.items() if k != "quality"} for c in v2["ranked"]]
    Decision.objects.filter(pk=decision.pk).update(result=v2)
    page = html.unescape(client.get(decision.get_absolute_url()).content.decode())
    shown = len(v2["ranked"])
    assert page.count("Not read: this decision was saved before quality figures were.") == shown
    assert page.count("not read (decided before quality figures)") == shown


def test_the_form_offers_least_quality_loss():
    from benchmarks.decisions.forms import DecisionForm

    choices = dict(DecisionForm().fields["priority"].choices)
    assert choices[QUALITY] == "least quality loss (KL divergence from a reference, or perplexity on the same text)"
