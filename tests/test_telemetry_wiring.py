"""GPU and server telemetry reach the stored levels and the run page; the host probe fills the
inventory."""
import pytest
from django.urls import reverse

from benchmarks.engine.gpu import GpuProbe, HostProbe, probe
from benchmarks.models import Host, Run
from benchmarks.services import host_probe_store
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint
from test_worker import submit, wait_finished


@pytest.mark.django_db
def test_a_probe_fills_the_host_and_its_gpus(client):
    host = Host.objects.create(name="v100-box")
    probe = HostProbe(status="ok", driver_version="535.183.01", cuda_driver_version="12.2", gpus=[
        GpuProbe(index=i, name="Tesla V100-PCIE-16GB", uuid=f"GPU-{i}", memory_total_mib=16384,
                 compute_capability="7.0", pcie_generation=3, pcie_width=16, ecc_mode="enabled",
                 ecc_corrected={"volatile": 0, "aggregate": 12}, ecc_uncorrected={"volatile": 0, "aggregate": 0})
        for i in range(2)])
    host_probe_store(host=host, probe=probe)
    host.refresh_from_db()
    assert host.driver_version == "535.183.01" and host.cuda_version == "12.2" and host.interconnect == "pcie"
    assert host.probe_status == "ok" and host.probed_at is not None
    gpus = list(host.gpus.all())
    assert [(g.index, g.compute_capability, g.memory_total_mib, g.ecc_corrected) for g in gpus] == [
        (0, "7.0", 16384, 12), (1, "7.0", 16384, 12)]
    assert gpus[0].nvlink == "not supported"
    host_probe_store(host=host, probe=probe)  # probing again updates, never duplicates
    assert host.gpus.count() == 2


@pytest.mark.django_db
def test_no_driver_is_a_clear_status_not_a_crash():
    host = Host.objects.create(name="cpu-box")
    host_probe_store(host=host, probe=HostProbe(status="no NVIDIA driver: NVML Shared Library Not Found"))
    host.refresh_from_db()
    assert host.probe_status.startswith("no NVIDIA driver") and host.gpus.count() == 0


@pytest.mark.django_db(transaction=True)
def test_server_metrics_and_identity_are_stored_with_each_level(client, simulator, celery_worker_process):
    sim = simulator(dialect="llamacpp", decode_ms=20, slots=4)
    e = endpoint(sim.url, backend="llamacpp", quantization="gguf_q4_k_m")
    run = wait_finished(submit(client, [e], concurrency_levels="4", requests_per_level=8, output_tokens=20))
    assert run.status == Run.SUCCEEDED
    level = run.levels.get()
    assert level.server_summary["samples"] >= 2 and level.server_summary["idle_at_start"] is True
    assert max(level.server_series["running"]) == 4  # the server's own view of the load
    assert level.gpu_summary["status"].startswith("not sampled")
    config = run.server_config[str(e.id)]
    assert config["total_slots"] == 4
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="server-config"' in page and "total_slots" in page and "GPU not sampled" in page
    fig = client.get(reverse("run-chart", args=[run.public_id, "server", "json"])).json()
    assert any(t["name"] == "Running requests" for t in fig["data"])


@pytest.mark.django_db(transaction=True)
def test_a_worker_on_the_endpoint_s_host_probes_it_and_says_why_no_gpu_was_sampled(client, simulator, settings,
                                                                                   django_db_blocker):
    settings.CELERY_TASK_DEFAULT_QUEUE = "host-worker"
    e = endpoint(simulator(decode_ms=2).url, host="this-box")
    w = spawn_worker(worker_env(WORKER_HOST="this-box", CELERY_DEFAULT_QUEUE="host-worker"), "this-box")
    try:
        from test_fault_tolerance import wait_for
        wait_for(lambda: Host.objects.get(name="this-box").probed_at is not None, 15, "the probe at start")
        host = Host.objects.get(name="this-box")
        # What NVML says on this machine ("no NVIDIA driver: …" without a GPU, "ok" with one),
        # asked here too: the worker runs on the same machine.
        here = probe().status
        assert host.probe_status == here
        run = wait_finished(submit(client, [e], concurrency_levels="1", requests_per_level=2))
        # The worker on the endpoint's host sampled its GPUs (not "not sampled: …") and says
        # what NVML told it.
        assert run.levels.get().gpu_summary["status"] == here
    finally:
        stop_worker(w)


@pytest.mark.django_db(transaction=True)
def test_with_host_queues_a_run_goes_to_the_worker_on_its_endpoints_host(client, simulator, settings,
                                                                         django_db_blocker):
    settings.HOST_QUEUES = True
    settings.CELERY_TASK_DEFAULT_QUEUE = "nobody-consumes-this"
    e = endpoint(simulator(decode_ms=2).url, host="gpu-box-7")
    # The worker is told only its host; it adds that host's queue by itself.
    w = spawn_worker(worker_env(WORKER_HOST="gpu-box-7", CELERY_DEFAULT_QUEUE="nobody-consumes-this"), "gpu-box-7")
    try:
        run = wait_finished(submit(client, [e], concurrency_levels="1", requests_per_level=2))
        assert run.queue_name == "host-gpu-box-7" and run.status == Run.SUCCEEDED
        assert run.worker.startswith("gpu-box-7@")
    finally:
        stop_worker(w)
