"""A model's shape from its config.json, against the parameter counts its publishers state."""
import pytest

from benchmarks.importers.model_config import shape_from_config

# config.json of meta-llama/Llama-3.1-8B (as deepseek-ai/DeepSeek-R1-Distill-Llama-8B ships it); the
# model card states 8.03B parameters
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256}
# config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-7B (Qwen2, q/k/v with biases); its card states 7.62B
QWEN_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
           "intermediate_size": 18944, "max_position_embeddings": 131072, "num_attention_heads": 28,
           "num_hidden_layers": 28, "num_key_value_heads": 4, "tie_word_embeddings": False, "vocab_size": 152064}
# Qwen/Qwen3-4B: tied embeddings, head_dim 128 stated apart from hidden / heads (2560 / 32 = 80); 4.02B
QWEN3_4B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2560, "head_dim": 128,
            "intermediate_size": 9728, "max_position_embeddings": 40960, "num_attention_heads": 32,
            "num_hidden_layers": 36, "num_key_value_heads": 8, "tie_word_embeddings": True, "vocab_size": 151936}


@pytest.mark.parametrize("config, params_b, embedding_b, head_dim", [
    (LLAMA_8B, 8.03, 2 * 128256 * 4096 / 1e9, 128),
    (QWEN_7B, 7.62, 2 * 152064 * 3584 / 1e9, 128),
    (QWEN3_4B, 4.02, 151936 * 2560 / 1e9, 128),
])
def test_the_parameters_counted_from_the_shape_are_the_published_ones(config, params_b, embedding_b, head_dim):
    shape = shape_from_config(config)
    assert abs(shape.params_b - params_b) < 0.01, shape.params_b
    assert shape.embedding_params_b == pytest.approx(embedding_b)
    assert shape.head_dim == head_dim and shape.kv_heads == config["num_key_value_heads"]
    assert shape.context_length == config["max_position_embeddings"]


def test_a_multimodal_config_is_read_through_its_text_config():
    shape = shape_from_config({"architectures": ["SomeVLM"], "text_config": LLAMA_8B, "vision_config": {}})
    assert shape.layers == 32 and abs(shape.params_b - 8.03) < 0.01
