"""Quality in comparisons: sentences in words from the engine's own results (its quality step
against simulators of known sharpness), compared only on the same text, windows, base model and
reference, and saying plainly why not otherwise; the write-up's published perplexities are
never compared, their text being unknown."""
import csv
import html
import io
import re

import pytest
from django.urls import reverse

import factories
from benchmarks import services
from benchmarks.compare import quality_sentences, quality_table
from benchmarks.engine.catalogue import COMPARISON_QUALITY
from benchmarks.engine.points import QualityPoint
from benchmarks.engine.quality import EvalText
from benchmarks.importers.published import v100_writeup_reports
from benchmarks.models import ImportedReport
from benchmarks.services import published_reports_load
from factories import QUALITY_TEXT, quality_results

MODEL = "DeepSeek-R1-Distill-Qwen-7B"


def entry(label, result, *, reference=None, model=MODEL, is_reference=False):
    return {"label": label, "kind": "measured", "url": "/r/x/", "error": "", "is_reference": is_reference,
            "quality": QualityPoint.measured(result, label=label, model=model, reference=reference)}


def published(quantization):
    report = next(r for r in v100_writeup_reports() if r.raw_meta["quantization"] == quantization)
    return {"label": report.title, "kind": "published", "url": "/i/x/", "error": "", "is_reference": False,
            "quality": report.quality.point(label=report.title, kind="published", model=report.model)}


def numbers(text):
    """The numbers in a sentence's closing parentheses, in order."""
    return [float(x.replace(",", "")) for x in re.findall(r"[\d.,]*\d", text.rsplit("(", 1)[1])]


@pytest.mark.parametrize("order", [("sharp", "flat"), ("flat", "sharp")])
def test_the_higher_perplexity_is_said_above_the_lower_in_percent_with_its_number_first(order):
    results = quality_results({"sharp": 0.1, "flat": 0.05})
    entries = [entry(name, results[name]) for name in order]
    [sentence] = [s for s in quality_sentences(entries) if s["metric"] == "perplexity"]
    ppl = {name: r.perplexity for name, r in results.items()}
    worse, better = sorted(ppl, key=ppl.get, reverse=True)
    percent = 100 * (ppl[worse] - ppl[better]) / ppl[better]
    assert sentence["text"] == (f"{worse}'s perplexity is {percent:,.1f} % above {better}'s on the same text and "
                                f"windows ({ppl[worse]:,.3f} vs {ppl[better]:,.3f}).")
    # The phrase follows the numbers: the first named is the first value, and it is the higher.
    assert numbers(sentence["text"]) == [round(ppl[worse], 3), round(ppl[better], 3)]
    assert ppl[worse] > ppl[better]
    assert sentence["labels"] == [worse, better] and sentence["compared"]


def test_kl_divergences_against_the_same_reference_are_compared_with_the_reference_named():
    results = quality_results({"fp16": 0.05, "near": 0.055, "far": 0.1}, reference="fp16")
    entries = [entry("fp16", results["fp16"], is_reference=True),
               entry("near", results["near"], reference="fp16"), entry("far", results["far"], reference="fp16")]
    sentences = {s["metric"]: s for s in quality_sentences(entries)}
    kl_near, kl_far = results["near"].reference["kl_mean"], results["far"].reference["kl_mean"]
    assert 0 < kl_near < kl_far
    percent = 100 * (kl_far - kl_near) / kl_near
    assert sentences["kl_mean"]["text"] == (
        f"far's KL divergence from the reference is {percent:,.1f} % above near's on the same text and windows, "
        f"against fp16 ({kl_far:.4f} vs {kl_near:.4f} nats).")
    # A sharper or flatter copy of the same model keeps its order: the same top token everywhere.
    assert results["far"].reference["same_top_share"] == results["near"].reference["same_top_share"] == 1.0
    assert sentences["same_top_share"]["text"] == ("Same top token is the same for far and near on the same text "
                                                   "and windows, against fp16 (100.0 %).")
    rows = {r["label"]: r for r in quality_table(entries)}
    assert rows["fp16"]["reference"] == "this is the reference" and rows["near"]["reference"] == "fp16"
    kl = {c["name"]: c["text"] for c in rows["far"]["cells"]}
    assert kl["kl_mean"] == f"{kl_far:.4f}" and kl["same_top_share"] == "100.0"
    assert {c["name"]: c["text"] for c in rows["fp16"]["cells"]}["kl_mean"] == "—"


def test_figures_on_different_texts_are_not_compared_and_it_says_why():
    other = EvalText("other", QUALITY_TEXT.text + " omega omega")
    a = quality_results({"a": 0.05})["a"]
    b = quality_results({"b": 0.1}, text=other)["b"]
    [sentence] = quality_sentences([entry("a", a), entry("b", b)])
    assert sentence == {"text": f"Perplexity of b and a is not compared: they were measured on different texts "
                                f"(other (sha256 {other.sha256[:12]}, {b.text['tokens']:,} tokens) vs greek (sha256 "
                                f"{QUALITY_TEXT.sha256[:12]}, {a.text['tokens']:,} tokens)).",
                        "compared": False, "metric": None, "values": [], "labels": ["b", "a"]}
    assert "%" not in sentence["text"] and "×" not in sentence["text"]


def test_figures_in_different_windows_are_not_compared():
    a = quality_results({"a": 0.05}, n_ctx=32)["a"]
    b = quality_results({"b": 0.1}, n_ctx=64)["b"]
    [sentence] = quality_sentences([entry("a", a), entry("b", b)])
    assert sentence["text"] == ("Perplexity of b and a is not compared: they were scored in different windows "
                                "(-c 64 --chunks 2 vs -c 32 --chunks 2).")


def test_kl_against_different_references_is_not_compared_but_perplexity_is():
    first = quality_results({"ref-a": 0.05, "x": 0.06}, reference="ref-a")["x"]
    second = quality_results({"ref-b": 0.07, "y": 0.08}, reference="ref-b")["y"]
    sentences = quality_sentences([entry("x", first, reference="ref-a"), entry("y", second, reference="ref-b")])
    compared = [s["metric"] for s in sentences if s["compared"]]
    assert compared == ["perplexity"]
    [refused] = [s["text"] for s in sentences if not s["compared"]]
    assert refused == ("KL divergence, Same top token and Greedy agreement of y and x are not compared: they are "
                       "against different references (ref-b vs ref-a).")


def test_different_base_models_are_not_compared():
    results = quality_results({"a": 0.05, "b": 0.1})
    [sentence] = quality_sentences([entry("a", results["a"]), entry("b", results["b"], model="Llama-3-8B")])
    assert sentence["text"].startswith("Perplexity of b and a is not compared: they are different base models "
                                       f"(Llama-3-8B vs {MODEL})")


def test_a_published_perplexity_is_shown_labelled_but_never_compared_its_text_being_unknown():
    measured = entry("llama (GGUF Q4_K_M)", quality_results({"q4": 0.05})["q4"])
    fp8, q4 = published("FP8 (E4M3)"), published("GGUF Q4_K_M")
    sentences = quality_sentences([measured, fp8, q4])
    assert [s["compared"] for s in sentences] == [False, False]
    assert sentences[0]["text"] == (f"Perplexity of {fp8['label']} and llama (GGUF Q4_K_M) is not compared: the "
                                    f"evaluation text of {fp8['label']} is not stated.")
    assert sentences[1]["text"].endswith(f"the evaluation text of {q4['label']} is not stated.")
    rows = {r["label"]: r for r in quality_table([measured, fp8, q4])}
    assert rows[fp8["label"]]["source"] == "published, not measured here"
    assert rows[fp8["label"]]["text"] == rows[fp8["label"]]["windows"] == "not stated"
    assert {c["name"]: c["text"] for c in rows[fp8["label"]]["cells"]}["perplexity"] == "6.150"
    assert {c["name"]: c["text"] for c in rows[q4["label"]]["cells"]}["perplexity"] == "6.280"
    assert "published, not measured here; evaluation text not stated" in rows[q4["label"]]["note"]
    # Two published figures are not compared with each other either: nothing says their text was the same.
    [between] = quality_sentences([fp8, q4])
    assert between["text"] == (f"Perplexity of {q4['label']} and {fp8['label']} is not compared: the evaluation "
                               f"text of {q4['label']} and of {fp8['label']} is not stated.")


def test_a_measured_perplexity_shows_its_standard_error_text_and_windows():
    result = quality_results({"a": 0.05})["a"]
    [row] = quality_table([entry("a", result)])
    cells = {c["name"]: c["text"] for c in row["cells"]}
    assert cells["perplexity"] == f"{result.perplexity:,.3f} ± {result.perplexity_stderr:,.3f}"
    assert row["text"] == f"greek (sha256 {QUALITY_TEXT.sha256[:12]}, {result.text['tokens']:,} tokens)"
    assert row["windows"] == "-c 32 --chunks 2" and row["reference"] == "none"
    assert row["source"] == "measured here"


# --- the comparison page, its CSV and the report page ------------------------------------------

@pytest.mark.django_db
def test_a_comparison_shows_quality_beside_the_published_perplexity_and_exports_it(client):
    published_reports_load()
    run, results = factories.quality_run()
    fp8_published = ImportedReport.objects.get(kind="published", quantization="fp8_e4m3")
    comparison = services.comparison_create(owner=None, runs=[run], reports=[fp8_published], title="quality")
    page = client.get(comparison.get_absolute_url()).content.decode()
    table = page.split('id="quality"')[1].split("</table>")[0]
    rows = re.findall(r'<tr class="kind-(\w+)"><td><a href="[^"]+">([^<]+)</a>', table)
    assert rows == [("measured", "fp16 (FP16)"), ("measured", "fp8 (FP8 E4M3)"), ("measured", "q4 (GGUF Q4_K_M)"),
                    ("published", fp8_published.title)]
    assert table.count("this is the reference") == 1 and table.count(">fp16 (FP16)</td>") == 2
    kl_q4 = results["q4"].reference["kl_mean"]
    assert f'data-metric="kl_mean">{kl_q4:.4f}</td>' in table and 'data-metric="perplexity">6.150</td>' in table
    words = html.unescape(page.split('id="quality-ratios"')[1].split("</ul>")[0])
    ppl = {n: r.perplexity for n, r in results.items()}
    assert (f"q4 (GGUF Q4_K_M)'s perplexity is {100 * (ppl['q4'] - ppl['fp16']) / ppl['fp16']:,.1f} % above "
            f"fp16 (FP16)'s on the same text and windows") in words
    assert (f"Perplexity of {fp8_published.title} and fp16 (FP16) is not compared: the evaluation text of "
            f"{fp8_published.title} is not stated.") in words
    assert "q4 (GGUF Q4_K_M)'s KL divergence from the reference is" in words and "against fp16 (FP16)" in words

    csv_url = reverse("comparison-quality-csv", args=[comparison.public_id])
    assert csv_url in page
    lines = list(csv.reader(io.StringIO(client.get(csv_url).content.decode())))
    assert lines[0][:7] == ["series", "source", "text", "text sha256", "windows", "reference", "perplexity stderr"]
    assert lines[0][7:12] == [f.title for f in COMPARISON_QUALITY]
    q4 = next(line for line in lines if line[0] == "q4 (GGUF Q4_K_M)")
    assert float(q4[7]) == pytest.approx(ppl["q4"], rel=1e-6) and q4[3] == QUALITY_TEXT.sha256
    assert q4[4] == "'-c 32 --chunks 2" and q4[5] == "fp16 (FP16)"  # a leading - is written as text (csv_cells)
    assert float(q4[10]) == pytest.approx(100 * results["q4"].reference["same_top_share"])
    published_line = next(line for line in lines if line[0] == fp8_published.title)
    assert published_line[1:3] == ["published, not measured here", ""] and published_line[7] == "6.15"


@pytest.mark.django_db
def test_a_failed_quality_step_says_why_with_addresses_hidden_from_anonymous_readers(client):
    run, _ = factories.quality_run((("fp16", 0.05), ("q4", 0.1)),
                                   errors={"q4": "POST http://127.0.0.1:9/tokenize: HTTP 500"})
    comparison = services.comparison_create(owner=None, runs=[run], reports=[])
    page = html.unescape(client.get(comparison.get_absolute_url()).content.decode())
    assert "Not measured: POST [address hidden]/tokenize: HTTP 500" in page and "127.0.0.1:9" not in page
    client.force_login(factories.user())
    assert "Not measured: POST http://127.0.0.1:9/tokenize: HTTP 500" in html.unescape(
        client.get(comparison.get_absolute_url()).content.decode())


@pytest.mark.django_db
def test_a_comparison_without_quality_has_no_quality_table_and_no_csv(client):
    run = factories.measured_run([factories.endpoint()], levels=(1,), requests=3)
    comparison = services.comparison_create(owner=None, runs=[run], reports=[])
    assert 'id="quality"' not in client.get(comparison.get_absolute_url()).content.decode()
    r = client.get(reverse("comparison-quality-csv", args=[comparison.public_id]))
    assert r.status_code == 404 and "Nothing in this comparison measured or states quality." in r.content.decode()


@pytest.mark.django_db
def test_two_runs_of_one_endpoint_are_told_apart_in_the_quality_table_too(client):
    from benchmarks import selectors

    first, results = factories.quality_run((("fp16", 0.05), ("q4", 0.1)), prefix="again-")
    endpoints = {e.name.removeprefix("again-"): e for e in first.endpoints.all()}
    second = factories.measured_run(list(endpoints.values()), levels=(1,), requests=3, quality=True,
                                    quality_reference=endpoints["fp16"], title="after the upgrade")
    factories.quality_measured(second, results, endpoints)
    comparison = services.comparison_create(owner=None, runs=[first, second], reports=[], title="twice")
    labels = [e["label"] for e in selectors.comparison_quality(comparison)]
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    assert sum("after the upgrade" in label for label in labels) == 2
    page = html.unescape(client.get(comparison.get_absolute_url()).content.decode())
    assert all(label in page for label in labels)
