"""vLLM (`vllm serve`): `/tokenize`, `/version`, `vllm:*` metrics (with the names its V1 engine
renamed)."""
from __future__ import annotations

import re

from benchmarks.engine import multi_gpu

from .base import SAFE_ENV, Backend, register
from .vllm_flags import VLLM_SERVER_FLAGS


@register
class VLLM(Backend):
    name = "vllm"
    label = "vLLM"

    # Its command line: `vllm serve MODEL` or `python -m vllm.entrypoints.openai.api_server --model
    # MODEL`. Without --host it listens on every interface.
    model_flags = ("--model", "--tokenizer")
    name_flags = ("--api-key", "--served-model-name")
    config_flags = ("--config",)  # a YAML file of flags
    default_host = "0.0.0.0"
    # Documented in vLLM's environment variables; VLLM_CACHE_ROOT is a path, held to the model folders.
    safe_env = SAFE_ENV | {"VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_NO_USAGE_STATS",
                           "VLLM_DO_NOT_TRACK", "VLLM_CACHE_ROOT", "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1",
                           "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_LOGGING_LEVEL", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}

    flag_table = VLLM_SERVER_FLAGS  # every flag of the pinned vLLM, by what it does
    positional_words = False
    entry_prefixes = (("-m", "vllm.entrypoints.openai.api_server"), ("-m", "vllm.entrypoints.cli.main", "serve"),
                      ("serve",))
    positional_model = True
    needs_model = True  # without one it serves facebook/opt-125m from the hub

    path_env = frozenset({"VLLM_CACHE_ROOT"})
    spread_flags = multi_gpu.TENSOR_PARALLEL + multi_gpu.PIPELINE_PARALLEL
    spread_needs_its_gpus = True  # tensor x pipeline workers, one GPU each, or it does not start

    def spread(self, setting, args, visible):
        return multi_gpu.tensor_times_pipeline(setting, args)

    def positional_models(self, args: list[str]) -> tuple[str, ...]:
        return tuple(args[i + 1] for i, a in enumerate(args[:-1]) if a == "serve" and not args[i + 1].startswith("-"))

    def with_model_placeholder(self, args: list[str]) -> tuple[str, list[str]]:
        if args[:1] == ["serve"] and len(args) > 1 and not args[1].startswith("-"):  # `vllm serve MODEL`
            return args[1], ["serve", "{model}", *args[2:]]
        return super().with_model_placeholder(args)

    def request_extras(self, max_tokens: int) -> dict:
        return {"ignore_eos": True, "min_tokens": max_tokens}

    def tokenize_requests(self, model: str, text: str, special: bool = False) -> list[tuple[str, dict]]:
        return [("/tokenize", {"model": model, "prompt": text, "add_special_tokens": special})]

    quality_method = "prompt_logprobs"

    def top_k_probe(self, model: str, k: int) -> tuple[str, dict] | None:
        return "/v1/completions", {"model": model, "prompt": [0, 0], "max_tokens": 1, "prompt_logprobs": k}

    def read_top_k_cap(self, refusal: str) -> int | None:
        # Its --max-logprobs (20 by default): "Requested prompt logprobs of 100, which is greater
        # than max allowed: 20"; before its V1 engine, "Cannot request more than 20 logprobs."
        found = re.search(r"(?:greater than max allowed:|request more than)\s*(\d+)", refusal)
        return int(found.group(1)) if found else None

    def greedy_request(self, model: str, prompt: list[int], n: int) -> tuple[str, dict]:
        path, body = super().greedy_request(model, prompt, n)
        return path, {**body, "logprobs": 1, "return_tokens_as_token_ids": True}

    def read_generated_ids(self, answer) -> list[int] | None:
        try:
            tokens = answer["choices"][0]["logprobs"]["tokens"]  # "token_id:123"
            return [int(t.rpartition(":")[2]) for t in tokens]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None

    metrics = {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        # gpu_cache_usage_perc was renamed kv_cache_usage_perc (both exported for a while).
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        # V1 counts prefix-cache lookups and hits in tokens.
        "cached_prompt_tokens_total": ("vllm:prefix_cache_hits_total",),
        "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total",),
        "ttft_seconds": ("vllm:time_to_first_token_seconds",),
        # Per-token gaps; time_per_output_token_seconds was its name before the V1 rename.
        "itl_seconds": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        # Per-request mean TPOT (newer vLLM only).
        "request_tpot_seconds": ("vllm:request_time_per_output_token_seconds",),
        "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
    }

    async def identity(self, get) -> dict:
        out = {}
        version = await get("/version")
        if isinstance(version, dict):
            out["version"] = version.get("version")
        models = await get("/v1/models")  # each served model's max_model_len (--max-model-len)
        data = models.get("data") if isinstance(models, dict) else None
        lengths = sorted({m.get("max_model_len") for m in data or () if isinstance(m, dict)
                          and isinstance(m.get("max_model_len"), int)})
        if lengths:
            out["max_model_len"] = lengths[0]
        return out

    context_hint = " (raise --max-model-len)"

    def context_per_request(self, identity: dict) -> int | None:
        n = identity.get("max_model_len")
        return n if isinstance(n, int) and n > 0 else None

    # ------------------------------------------------------------------ simulator dialect
    sim_checks_model = True
    sim_metrics = ("running", "waiting", "kv_cache_usage", "generation_tokens_total", "prompt_tokens_total",
                   "cached_prompt_tokens_total", "prefix_cache_queries_total")
    sim_metric_labels = '{{model_name="{model}"}}'
    sim_tokenize_paths = ("/tokenize",)

    def sim_model_card(self, config) -> dict:
        return {"max_model_len": config.context}

    def sim_routes(self, config) -> dict[str, object]:
        return {"/version": {"version": "0.0.0-simulator"}}

    def sim_tokenize(self, request: dict, tokenize) -> dict:
        ids = tokenize(request["prompt"])
        return {"tokens": ids, "count": len(ids), "max_model_len": 4096}
