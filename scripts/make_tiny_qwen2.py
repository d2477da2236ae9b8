"""Write a tiny random-weight Qwen2 model in Hugging Face format, with the real Qwen2 tokenizer.

The tokenizer comes from llama.cpp's vocab-only GGUF (models/ggml-vocab-qwen2.gguf inside the
llama-cpp-python sdist on PyPI; `scripts/llm-servers.sh vocab` prints its path); transformers
converts it (needs the `gguf` package). The weights are random (fixed seed): the model talks
nonsense, but a real server (vLLM) serves it with real tokenization, streaming, batching and
/metrics -- enough to prove the measuring engine against the real protocol. Nothing is
downloaded; about 80 MB written (41 M parameters in bfloat16).

The directory is written next to OUT_DIR first and renamed at the end, so an interrupted run
never leaves a half-written model behind.

usage: make_tiny_qwen2.py VOCAB_GGUF OUT_DIR [--layers 2] [--hidden 256]
"""
from __future__ import annotations

import argparse
import os
import shutil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vocab_gguf")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args()

    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    d, f = os.path.split(os.path.abspath(a.vocab_gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=a.hidden * 4,
                      num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)

    out = os.path.abspath(a.out)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print("wrote", out, "vocab", len(tok), "params", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
