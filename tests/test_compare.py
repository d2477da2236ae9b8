from benchmarks.compare import differences, fingerprint, ratio_sentences
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
