import dataclasses

from benchmarks.compare import differences, distinct_labels, fingerprint, ratio_sentences
from benchmarks.engine.points import Point


def at(concurrency, **figures):
    return Point(label=f"c={concurrency}", concurrency=concurrency, figures=figures)


def series(label, levels, **fp):
    base = dict(prompt_tokens=512, output_tokens=100, temperature=0.7, api="completions",
                load_mode="concurrency", gpu="Tesla V100-PCIE-16GB", gpu_count=1)
    base.update(fp)
    return {"label": label, "kind": "measured", "fingerprint": fingerprint(**base), "levels": levels}


def test_ratios_in_words_at_common_levels():
    llama = series("llama.cpp Q4_K_M", [at(1, decode_tok_s_p50=56.0), at(8, decode_tok_s_p50=29.4, aggregate_tok_s=235.0)])
    vllm = series("vLLM FP8", [at(1, decode_tok_s_p50=32.0), at(8, decode_tok_s_p50=18.7, aggregate_tok_s=150.0)])
    texts = [s["text"] for s in ratio_sentences([vllm, llama])]
    assert "llama.cpp Q4_K_M decodes 1.75× faster than vLLM FP8 at 1 concurrent user (56.0 vs 32.0 tok/s per stream)." in texts
    assert any("llama.cpp Q4_K_M delivers 1.57× the aggregate output throughput of vLLM FP8 at 8 concurrent users" in t for t in texts)


def test_lower_ttft_wins():
    a = series("A", [at(1, ttft_ms_p50=100.0)])
    b = series("B", [at(1, ttft_ms_p50=250.0)])
    assert ratio_sentences([a, b])[0]["text"].startswith("A reaches the first token 2.50× sooner than B")


def test_no_ratio_without_a_common_level():
    a = series("A", [at(1, decode_tok_s_p50=10.0)])
    b = series("B", [at(4, decode_tok_s_p50=10.0)])
    assert ratio_sentences([a, b]) == []


def test_it_warns_when_workloads_or_gpus_differ():
    a = series("A", [], prompt_tokens=512)
    b = series("B", [], prompt_tokens=2048, gpu="NVIDIA H200")
    warnings = differences([a, b])
    assert any("Different prompt tokens" in w for w in warnings)
    assert any("Different GPU model" in w for w in warnings)


def test_comparable_series_have_no_warnings_and_unknowns_are_said():
    assert differences([series("A", []), series("B", [])]) == []
    warnings = differences([series("A", []), series("B", [], temperature=None)])
    assert warnings == ["Temperature unknown for B; the others used 0.7."]


def test_the_numbers_follow_the_phrase_the_winners_first():
    # The base (first series) is slower: the sentence names the other first, and its number first.
    bench = series("vllm bench serve", [at(1, decode_tok_s_p50=26.7, aggregate_tok_s=147.2)])
    fp8 = series("vLLM FP8", [at(1, decode_tok_s_p50=32.0, aggregate_tok_s=150.0)])
    for base, other in ((bench, fp8), (fp8, bench)):
        texts = [s["text"] for s in ratio_sentences([base, other])]
        assert any(t.startswith("vLLM FP8 decodes 1.20× faster than vllm bench serve") and "(32.0 vs 26.7 tok/s" in t
                   for t in texts), texts
        # 1.02× with one run a side is within the ±10 % runs vary: no winner named, both numbers given
        assert any(t.startswith("No clear difference in Aggregate output between") and "1.02×" in t
                   and "within the ±10 % one run of an endpoint varies" in t for t in texts), texts


def test_a_different_model_is_said_first_above_any_other_warning():
    gemma = dict(series("llama-cpu-gemma3", [at(1, decode_tok_s_p50=60.0)], gpu=None, api="completions"),
                 model="gemma-3-270m-it", quantization="gguf_q4_k_m")
    v100 = dict(series("V100 write-up", [at(1, decode_tok_s_p50=24.7)], api=None),
                model="DeepSeek-R1-Distill-Qwen-7B", quantization="gguf_q4_k_m")
    warnings = differences([gemma, v100])
    assert warnings[0].startswith("Different models — gemma-3-270m-it for llama-cpu-gemma3; "
                                  "DeepSeek-R1-Distill-Qwen-7B for V100 write-up.")
    assert not any("variant" in w for w in warnings)  # the same quantization is no difference
    fp8 = dict(v100, label="vLLM FP8", quantization="fp8_e4m3")
    assert any(w.startswith("Different variants (quantization) — gguf_q4_k_m for V100 write-up; fp8_e4m3 for vLLM FP8")
               for w in differences([v100, fp8]))


def test_a_different_value_is_listed_once_with_the_series_that_have_it():
    many = [series(f"s{i}", [], output_tokens=100) for i in range(6)] + [series("bench", [], output_tokens=128)]
    (warning,) = [w for w in differences(many) if "output tokens" in w]
    assert warning == ("Different output tokens — 100 for s0, s1, s2, s3, s4 and s5; 128 for bench. "
                       "These numbers are not directly comparable.")


def test_llama_bench_beside_serving_is_said_once_precisely():
    served = [dict(series(f"server {i}", []), tool="serving") for i in range(3)]
    bench = dict(series("llama-bench — q4", [], output_tokens=128), tool="llama-bench")
    warnings = differences(served + [bench])
    said = [w for w in warnings if "tg128" in w]
    assert len(said) == 1 and said[0].startswith("llama-bench — q4: llama-bench's tg figures")
    assert "no HTTP server" in said[0] and "1 concurrent user" in said[0]
    assert not any("tg128" in w for w in differences(served))


def test_two_runs_of_one_endpoint_are_told_apart_by_what_differs():
    a = dict(series("llama-cpu-gemma3 (GGUF Q4_K_M)", [at(1, decode_tok_s_p50=50.0)]), run=None, date="2026-03-01 10:00")
    b = dict(series("llama-cpu-gemma3 (GGUF Q4_K_M)", [at(1, decode_tok_s_p50=40.0)]), run="after the driver update",
             date="2026-03-02 10:00")
    c = dict(series("other", []), run=None, date="2026-03-01 10:00")
    labelled = distinct_labels([a, b, c])
    assert [s["label"] for s in labelled] == ["llama-cpu-gemma3 (GGUF Q4_K_M) · 2026-03-01 10:00",
                                              "llama-cpu-gemma3 (GGUF Q4_K_M) · after the driver update",
                                              "other"]
    assert ratio_sentences(labelled[:2])[0]["text"].startswith(
        "llama-cpu-gemma3 (GGUF Q4_K_M) · 2026-03-01 10:00 decodes 1.25× faster than llama-cpu-gemma3 (GGUF Q4_K_M) · after")
    same = [dict(series("x", []), run=None, date="2026-03-01 10:00") for _ in range(2)]
    assert [s["label"] for s in distinct_labels(same)] == ["x #1", "x #2"]


def test_a_ratio_that_rounds_to_one_names_no_winner():
    a = series("A", [at(1, decode_tok_s_p50=1000.0)])
    b = series("B", [at(1, decode_tok_s_p50=1003.0)])
    (sentence,) = ratio_sentences([a, b])
    assert "1.00×" not in sentence["text"]
    assert sentence["text"].startswith("Decode per stream p50 is the same for B and A at 1 concurrent user (1003.0 vs 1000.0")


def test_one_run_a_side_names_a_winner_only_beyond_the_noise_runs_carry():
    # ±10 %: a 1.08x difference between single runs is no winner, a 1.25x one is
    a = series("A", [at(1, decode_tok_s_p50=100.0)])
    assert ratio_sentences([a, series("B", [at(1, decode_tok_s_p50=108.0)])])[0]["text"].startswith(
        "No clear difference in Decode per stream p50 between B and A")
    s = ratio_sentences([a, series("B", [at(1, decode_tok_s_p50=125.0)])])[0]
    assert s["text"].startswith("B decodes 1.25× faster than A")


def test_a_contended_level_is_the_basis_of_no_winner():
    a = series("A", [at(1, decode_tok_s_p50=100.0)])
    busy = series("B", [at(1, decode_tok_s_p50=300.0)])
    busy["levels"] = [dataclasses.replace(busy["levels"][0], flags=("host_busy",))]
    (s,) = ratio_sentences([a, busy])
    assert s["significant"] is False and "faster" not in s["text"]
    assert s["text"].startswith("No winner named for Decode per stream p50 between B and A")
    assert "B: measuring host busy" in s["text"] and "not comparable" in s["text"]


def test_figures_of_an_engine_that_cannot_start_on_their_gpu_say_so_beside_them():
    """The decision page refuses vLLM FP8 on a V100; a comparison showing the write-up's FP8
    figures says why they cannot come from upstream vLLM there, with the fact's source."""
    from benchmarks.compare import differences

    def series(label, backend, quantization, gpu):
        return {"label": label, "kind": "published", "backend": backend, "quantization": quantization, "gpu": gpu,
                "model": "m", "tool": "serving", "fingerprint": {}, "levels": []}

    said = differences([series("fp8 on v100", "vllm", "fp8_e4m3", "Tesla V100-PCIE-16GB"),
                        series("q4 on v100", "llamacpp", "gguf_q4_k_m", "Tesla V100-PCIE-16GB"),
                        series("fp8 on h200", "vllm", "fp8_e4m3", "NVIDIA H200")])
    refused = [w for w in said if "cannot start" in w]
    assert len(refused) == 1 and refused[0].startswith("fp8 on v100: vLLM FP8 cannot start on compute capability 7.0")
    assert "fp8.py" in refused[0] and "cannot come from upstream vLLM on a Tesla V100" in refused[0]
