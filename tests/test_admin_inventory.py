"""The inventory lives in the admin: staff only, useful lists, and a write-only API key."""
import pytest
from django.urls import reverse

from benchmarks.models import Endpoint, Gpu, Host, Model, Variant
from benchmarks import services
from benchmarks.forms import RunForm
from factories import endpoint, run_form, user
from test_run_submission import take_from_broker

pytestmark = pytest.mark.django_db


def test_only_staff_reach_the_inventory(client):
    client.force_login(user())
    assert client.get(reverse("admin:benchmarks_endpoint_changelist")).status_code == 302


@pytest.mark.parametrize("model, query, found, other", [
    ("host", "lab", "lab-1", "cpu-box"),
    ("model", "Qwen", "DeepSeek-R1-Distill-Qwen-7B", "Llama-3-8B"),
    ("variant", "lab-fp8", "lab-fp8-variant", "other-q4-variant"),
    ("endpoint", "sim", "sim", "other-endpoint"),
    ("run", "lab sweep", "lab sweep", "other title"),
])
def test_every_inventory_list_opens_and_its_search_finds_the_row(client, model, query, found, other):
    e = endpoint()
    Host.objects.create(name="cpu-box")
    llama = Model.objects.create(name="Llama-3-8B", params_b=8.0, layers=32, kv_heads=8, head_dim=128)
    Variant.objects.create(model=e.variant.model, name="lab-fp8-variant", quantization="fp8_e4m3")
    Variant.objects.create(model=llama, name="other-q4-variant", quantization="q4_k_m")
    Endpoint.objects.create(name="other-endpoint", host=e.host, backend="llamacpp", base_url="http://127.0.0.1:8",
                            variant=e.variant)
    for title in ("lab sweep", "other title"):
        form = RunForm(run_form([e], title=title))
        assert form.is_valid(), form.errors
        services.run_create(owner=user(), **form.run_arguments())
    client.force_login(user("root", staff=True))
    url = reverse(f"admin:benchmarks_{model}_changelist")
    assert other in client.get(url).content.decode()  # the whole list holds both
    page = client.get(url, {"q": query})
    assert page.status_code == 200
    html = page.content.decode()
    # the row itself (its link), not a filter's or the search box's text; the other row gone
    assert f">{found}</a>" in html and other not in html and "1 result" in html


def test_gpus_are_found_in_the_host_list_and_edited_on_their_host(client):
    # GPUs have no list of their own: the host list shows and searches them, the host's page
    # edits them inline.
    host = Host.objects.create(name="v100-box")
    Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16384,
                       compute_capability="7.0")
    Host.objects.create(name="cpu-box")
    client.force_login(user("root", staff=True))
    page = client.get(reverse("admin:benchmarks_host_changelist") + "?q=V100-PCIE").content.decode()
    assert "1× Tesla V100-PCIE-16GB" in page and "v100-box" in page and "cpu-box" not in page
    page = client.get(reverse("admin:benchmarks_host_change", args=[host.id])).content.decode()
    assert 'name="gpus-0-name"' in page and 'value="Tesla V100-PCIE-16GB"' in page


def test_a_host_is_registered_with_its_gpus_inline(client):
    client.force_login(user("root", staff=True))
    data = {"name": "v100-box", "hostname": "gpu1.lab", "queue_name": "", "interconnect": "pcie",
            "created_0": "2026-11-29", "created_1": "12:00:00", "price_currency": "USD",  # the form's default
            "gpus-TOTAL_FORMS": "2", "gpus-INITIAL_FORMS": "0", "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000"}
    for i in range(2):
        data.update({f"gpus-{i}-index": i, f"gpus-{i}-name": "Tesla V100-PCIE-16GB",
                     f"gpus-{i}-memory_total_mib": 16384, f"gpus-{i}-compute_capability": "7.0"})
    r = client.post(reverse("admin:benchmarks_host_add"), data)
    assert r.status_code == 302, r.content.decode()[:3000]
    host = Host.objects.get(name="v100-box")
    assert host.queue_name == "host-v100-box" and host.gpus.count() == 2
    page = client.get(reverse("admin:benchmarks_host_changelist")).content.decode()
    assert "2× Tesla V100-PCIE-16GB" in page


def endpoint_post(e, **overrides):
    data = {"name": e.name, "host": e.host_id, "backend": e.backend, "base_url": e.base_url,
            "model_name": "", "variant": e.variant_id or "", "api_key": "", "engine_version": "",
            "launch_command": "", "launch_flags": "{}", "tensor_parallel_size": 1, "enabled": "on",
            "created_0": "2026-11-29", "created_1": "12:00:00"}
    data.update(overrides)
    return data


def test_the_api_key_is_write_only(client):
    e = endpoint(api_key="sk-very-secret-123")
    client.force_login(user("root", staff=True))
    url = reverse("admin:benchmarks_endpoint_change", args=[e.id])
    assert "sk-very-secret-123" not in client.get(url).content.decode()
    # Saving without typing a key keeps it; typing one replaces it; the box clears it.
    assert client.post(url, endpoint_post(e)).status_code == 302
    assert Endpoint.objects.get(id=e.id).api_key == "sk-very-secret-123"
    client.post(url, endpoint_post(e, api_key="sk-new"))
    assert Endpoint.objects.get(id=e.id).api_key == "sk-new"
    client.post(url, endpoint_post(e, clear_api_key="on"))
    assert Endpoint.objects.get(id=e.id).api_key == ""
    assert "sk-new" not in client.get(reverse("admin:benchmarks_endpoint_changelist")).content.decode()


def test_an_endpoints_alerts_webhook_secret_is_write_only_and_its_url_held_to_the_address_policy(client):
    e = endpoint()
    client.force_login(user("root", staff=True))
    url = reverse("admin:benchmarks_endpoint_change", args=[e.id])
    hook = {"alert_emails": "ops@example.org", "webhook_url": "https://hooks.example.org/v100"}
    r = client.post(url, endpoint_post(e, **hook, webhook_secret="whsec-abc-789"))
    assert r.status_code == 302, r.content.decode()[:2000]
    e.refresh_from_db()
    assert (e.alert_emails, e.webhook_url, e.webhook_secret) == (
        "ops@example.org", "https://hooks.example.org/v100", "whsec-abc-789")
    assert "whsec-abc-789" not in client.get(url).content.decode()
    client.post(url, endpoint_post(e, **hook))  # left blank: kept
    assert Endpoint.objects.get(id=e.id).webhook_secret == "whsec-abc-789"
    client.post(url, endpoint_post(e, **hook, clear_webhook_secret="on"))
    assert Endpoint.objects.get(id=e.id).webhook_secret == ""
    r = client.post(url, endpoint_post(e, webhook_url="http://metadata.google.internal/hook"))
    assert r.status_code == 200 and "metadata service" in r.content.decode()
    r = client.post(url, endpoint_post(e, alert_emails="ops@, x"))
    assert r.status_code == 200 and "is not an e-mail address" in r.content.decode()


def test_an_endpoint_url_must_be_a_url(client):
    e = endpoint()
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_endpoint_change", args=[e.id]), endpoint_post(e, base_url="not a url"))
    assert r.status_code == 200 and "Use an http:// or https:// URL" in r.content.decode()


def test_probe_now_sends_each_selected_host_its_probe_on_its_own_queue(client):
    boxes = [Host.objects.create(name=f"probe-box-{i}") for i in range(3)]
    for box in boxes:
        take_from_broker(box.queue_name)
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_host_changelist"),
                    {"action": "probe_now", "_selected_action": [boxes[0].id, boxes[2].id]}, follow=True)
    assert "Asked the workers of 2 host(s) to probe their GPUs" in r.content.decode()
    # On the real broker: each probe on its host's queue, so only that host's worker takes it.
    assert take_from_broker(boxes[0].queue_name) == [("benchmarks.host_probe", [boxes[0].name])]
    assert take_from_broker(boxes[2].queue_name) == [("benchmarks.host_probe", [boxes[2].name])]
    assert take_from_broker(boxes[1].queue_name) == []


def test_the_host_forms_help_says_the_default_queue_in_words(client):
    # Admin help texts are HTML: "host-<name>" read as a tag and showed "Default: host-.".
    client.force_login(user("root", staff=True))
    page = client.get(reverse("admin:benchmarks_host_add")).content.decode()
    assert "Default: host- followed by the host&#x27;s name (host-v100a for v100a)." in page or \
        "Default: host- followed by the host's name (host-v100a for v100a)." in page
    assert "host-<name>" not in page


# config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-14B (Qwen2 architecture), as published
QWEN14B_CONFIG = """{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120,
 "intermediate_size": 13824, "max_position_embeddings": 131072, "num_attention_heads": 40,
 "num_hidden_layers": 48, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "vocab_size": 152064}"""


def model_post(**overrides):
    data = {"name": "my-qwen-14b", "params_b": "", "architecture": "", "context_length": "", "layers": "",
            "kv_heads": "", "head_dim": "", "attention_heads": "", "intermediate_size": "", "embedding_params_b": "",
            "notes": "", "config_json": QWEN14B_CONFIG, "variants-TOTAL_FORMS": "0", "variants-INITIAL_FORMS": "0",
            "variants-MIN_NUM_FORMS": "0", "variants-MAX_NUM_FORMS": "1000"}
    data.update(overrides)
    return data


def test_a_model_is_registered_from_its_config_json_and_the_advisor_checks_tensor_parallel_on_it(client):
    from benchmarks.advisor import GpuSpec, Workload, advise
    from benchmarks.decisions.selectors import model_spec_from_model
    from benchmarks.models import Model
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_model_add"), model_post(layers="50"))
    assert r.status_code == 302, r.content.decode()[:3000]
    m = Model.objects.get(name="my-qwen-14b")
    # the model card says 14.8B parameters; the typed layer count wins over the config's 48
    assert m.layers == 50 and m.kv_heads == 8 and m.head_dim == 128 and m.attention_heads == 40
    assert m.intermediate_size == 13824 and m.context_length == 131072 and m.architecture == "Qwen2ForCausalLM"
    assert m.embedding_params_b == pytest.approx(2 * 152064 * 5120 / 1e9, abs=1e-3)
    m.layers = 48
    m.save()
    spec, _ = model_spec_from_model(Model.objects.get(pk=m.pk))
    assert abs(spec.params_b - 14.77) < 0.05
    # 13,824 / 8 = 1,728 per GPU: not a multiple of AWQ's group size 128, so vLLM refuses TP 8 for it
    rec = advise(GpuSpec("NVIDIA GeForce RTX 3070", (8, 6), 7.79, count=8), spec,
                 Workload(users=16, prompt_tokens=512, output_tokens=100, context_tokens=8192), [])
    assert any("not a multiple of the AWQ group size 128" in s
               for s in rec.candidate("vllm-awq").fit.tensor_parallel_refused)


@pytest.mark.parametrize("text, message", [
    ("{not json", "config.json is not JSON"),
    ('{"hidden_size": 4096}', "config.json lacks num_hidden_layers"),
    ('{"hidden_size": 4096, "num_hidden_layers": -1, "num_attention_heads": 32, "intermediate_size": 1, '
     '"vocab_size": 10}', "num_hidden_layers must be a whole number"),
    ("[1, 2]", "must be a JSON object"),
])
def test_a_config_json_it_cannot_read_is_a_field_error_and_nothing_is_saved(client, text, message):
    from benchmarks.models import Model
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_model_add"), model_post(config_json=text))
    assert r.status_code == 200 and message in r.content.decode()
    assert not Model.objects.filter(name="my-qwen-14b").exists()
