"""llama.cpp's `llama-server`: `/tokenize` with `content`, `/props` and `/slots`, `llamacpp:*`
metrics (only with `--metrics`), its own `timings` in the last chunk and a BOS token added to
every prompt."""
from __future__ import annotations

from benchmarks.engine import multi_gpu

from .base import SAFE_ENV, Backend, register, trim
from .llamacpp_flags import LLAMA_SERVER_FLAGS


@register
class LlamaCpp(Backend):
    name = "llamacpp"
    label = "llama.cpp"
    choice_label = "llama.cpp (llama-server)"
    serves_any_model = True  # it answers any model name with its one model; it still lists an id

    prompt_cache_fields = {"cache_prompt": True}

    # Its command line (common/arg.cpp): every flag that loads a model, adapter or control vector,
    # from a file or downloaded (a download is refused: its value is no path under the model folders).
    model_flags = ("-m", "--model", "-md", "--model-draft", "--mmproj", "-mu", "--model-url", "--mmproj-url",
                   "-hf", "-hfr", "--hf-repo", "-hfd", "-hfrd", "--hf-repo-draft", "-hfv", "-hfrv", "--hf-repo-v",
                   "-dr", "--docker-repo", "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled")
    served_model_flags = ("-m", "--model")
    name_flags = ("--api-key", "-a", "--alias")
    default_host = "127.0.0.1"
    safe_env = SAFE_ENV | {"GGML_CUDA_ENABLE_UNIFIED_MEMORY"}
    # It reads any flag from LLAMA_ARG_<FLAG> (LLAMA_ARG_HOST, LLAMA_ARG_PORT, LLAMA_ARG_MODEL) and its
    # log flags from LLAMA_LOG_*: flags by another door, which the allowlist would not see.
    flag_env = ("LLAMA_ARG_", "LLAMA_LOG_")
    offline_env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LLAMA_ARG_OFFLINE": "1"}  # its --offline

    flag_table = LLAMA_SERVER_FLAGS  # every flag of the pinned llama-server, by what it does
    positional_words = False

    spread_flags = multi_gpu.SPLIT_MODE + multi_gpu.TENSOR_SPLIT

    def spread(self, setting, args, visible):
        return multi_gpu.layer_or_row_split(setting, args, visible)

    def request_extras(self, max_tokens: int) -> dict:
        # cache_prompt off: every request's prefill is measured, none reused from a slot.
        return {"ignore_eos": True, "cache_prompt": False, "n_predict": max_tokens}

    def tokenize_requests(self, model: str, text: str, special: bool = False) -> list[tuple[str, dict]]:
        return [("/tokenize", {"content": text, "add_special": special})]

    # No prompt log-probabilities (ggml-org/llama.cpp #8942): one forced token per position.
    quality_method = "teacher_forcing"

    def greedy_request(self, model: str, prompt: list[int], n: int) -> tuple[str, dict]:
        # The native route: it can return the generated token ids.
        return "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0.0, "ignore_eos": True,
                               "cache_prompt": False, "return_tokens": True}

    def read_generated_ids(self, answer) -> list[int] | None:
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return self.read_tokens({"tokens": tokens})

    metrics = {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        # Gone from newer builds.
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
        "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
        "prompt_seconds_total": ("llamacpp:prompt_seconds_total",),
        "generation_seconds_total": ("llamacpp:tokens_predicted_seconds_total",),
    }

    async def identity(self, get) -> dict:
        """Context size, slots, build and model path from /props; each slot's context from /slots."""
        out: dict = {}
        props = await get("/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings") or {}
            out.update(n_ctx=settings.get("n_ctx") if isinstance(settings, dict) else None,
                       total_slots=props.get("total_slots"), build_info=props.get("build_info"),
                       model_path=props.get("model_path"), props=trim(props))
        slots = await get("/slots")
        if isinstance(slots, list):
            n_ctx = sorted({s.get("n_ctx") for s in slots if isinstance(s, dict) and s.get("n_ctx")})
            out["slots"] = {"count": len(slots), "n_ctx": n_ctx[0] if len(n_ctx) == 1 else n_ctx}
        return out

    version_keys = ("build_info",)
    version_source = "its /props"

    def reported_flags(self, identity: dict) -> dict:
        return {k: identity[k] for k in ("n_ctx", "total_slots") if identity.get(k) is not None}

    context_hint = " (llama-server shares -c across its --parallel slots: give -c at least slots × tokens per request)"

    def context_per_request(self, identity: dict) -> int | None:
        """A slot's context: `-c` is shared by the `--parallel` slots (n_ctx / slots each)."""
        per_slot = (identity.get("slots") or {}).get("n_ctx")
        per_slot = per_slot if isinstance(per_slot, int) else identity.get("n_ctx")
        return per_slot if isinstance(per_slot, int) and per_slot > 0 else None

    # ------------------------------------------------------------------ simulator dialect
    sim_bos_tokens = 1
    sim_finish_in_last_token = False
    sim_metrics = ("running", "waiting", "generation_tokens_total", "prompt_tokens_total")
    sim_tokenize_paths = ("/tokenize",)

    def sim_health(self):
        return {"status": "ok"}

    def sim_routes(self, config) -> dict[str, object]:
        return {
            "/props": {"total_slots": config.slots, "model_path": f"/models/{config.model}.gguf",
                       "default_generation_settings": {"n_ctx": config.context}, "build_info": "simulator"},
            "/slots": [{"id": i, "n_ctx": config.context, "is_processing": False} for i in range(config.slots)],
        }

    def sim_tokenize(self, request: dict, tokenize) -> dict:
        # Token id 1 stands for the BOS that add_special puts first.
        return {"tokens": ([1] if request.get("add_special") else []) + tokenize(request["content"])}

    def sim_final_chunks(self, base: dict, chat: bool, finish: str, usage: dict, timings: dict) -> list[dict]:
        # One closing chunk with the finish reason, the usage and llama.cpp's own timings.
        return [{**base, "choices": [{"index": 0, "finish_reason": finish, **({"delta": {}} if chat else {"text": ""})}],
                 "usage": usage, "timings": timings}]
