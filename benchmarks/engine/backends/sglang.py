"""SGLang (`python -m sglang.launch_server`, `sglang serve`): vLLM-like request extras and
`/tokenize` (newer releases; older ones have none, and prompts are then text), identity from
`/get_model_info` and `/get_server_info` (newer releases also answer `/model_info` and
`/server_info`), `sglang:*` metrics (only with `--enable-metrics`)."""
from __future__ import annotations

from .base import Backend, register

# Settings from /get_server_info (its server arguments merged with the scheduler's figures)
# that bear on a measurement; the whole answer is hundreds of keys.
SERVER_INFO_KEYS = ("version", "served_model_name", "model_path", "tp_size", "dp_size", "dtype", "quantization",
                    "kv_cache_dtype", "context_length", "max_running_requests", "max_total_num_tokens",
                    "chunked_prefill_size", "mem_fraction_static", "attention_backend", "disable_radix_cache")


@register
class SGLang(Backend):
    name = "sglang"
    label = "SGLang"

    # Its command line (server_args.py).
    model_flags = ("--model-path", "--model", "--tokenizer-path", "--speculative-draft-model-path")
    served_model_flags = ("--model-path", "--model")
    name_flags = ("--api-key", "--served-model-name")
    config_flags = ("--config",)  # a YAML file of flags
    default_host = "127.0.0.1"

    def request_extras(self, max_tokens: int) -> dict:
        # Both are SGLang extras of its OpenAI API (min_tokens becomes min_new_tokens). Its radix
        # prefix cache cannot be turned off per request; fresh random prompts keep it cold.
        return {"ignore_eos": True, "min_tokens": max_tokens}

    def tokenize_requests(self, model: str, text: str, special: bool = False) -> list[tuple[str, dict]]:
        return [("/tokenize", {"model": model, "prompt": text, "add_special_tokens": special})]

    metrics = {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),  # share of the KV token pool in use
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "cached_prompt_tokens_total": ("sglang:cached_tokens_total",),
        "ttft_seconds": ("sglang:time_to_first_token_seconds",),
        "itl_seconds": ("sglang:inter_token_latency_seconds",),
        "e2e_seconds": ("sglang:e2e_request_latency_seconds",),
    }

    async def identity(self, get) -> dict:
        out: dict = {}
        model = await get("/get_model_info", "/model_info")
        if isinstance(model, dict):
            out.update({k: model[k] for k in ("model_path", "tokenizer_path", "is_generation", "weight_version")
                        if k in model})
        server = await get("/get_server_info", "/server_info")
        if isinstance(server, dict):
            out["version"] = server.get("version")
            out["server_info"] = {k: server[k] for k in SERVER_INFO_KEYS if k in server and k != "version"}
        return out

    version_source = "its /get_server_info"

    context_hint = " (raise --context-length)"

    def context_per_request(self, identity: dict) -> int | None:
        n = (identity.get("server_info") or {}).get("context_length")
        return n if isinstance(n, int) and n > 0 else None

    # ------------------------------------------------------------------ simulator dialect
    sim_metrics = ("running", "waiting", "kv_cache_usage", "generation_tokens_total", "prompt_tokens_total",
                   "cached_prompt_tokens_total")
    sim_metric_labels = '{{model_name="{model}"}}'
    sim_tokenize_paths = ("/tokenize", "/v1/tokenize")

    def sim_routes(self, config) -> dict[str, object]:
        model_info = {"model_path": f"/models/{config.model}", "tokenizer_path": f"/models/{config.model}",
                      "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"}
        server_info = {"version": "0.0.0-simulator", "served_model_name": config.model,
                       "model_path": f"/models/{config.model}", "tp_size": 1, "dp_size": 1, "dtype": "auto",
                       "quantization": None, "kv_cache_dtype": "auto", "context_length": config.context,
                       "max_running_requests": config.slots, "max_total_num_tokens": config.context * config.slots,
                       "disable_radix_cache": False, "log_level": "info", "random_seed": 0}
        return {"/get_model_info": model_info, "/model_info": model_info,
                "/get_server_info": server_info, "/server_info": server_info}

    def sim_tokenize(self, request: dict, tokenize) -> dict:
        ids = tokenize(request["prompt"])
        return {"tokens": ids, "count": len(ids), "max_model_len": 4096}
