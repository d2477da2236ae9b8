"""A sharded level's client figures, stored by their one writer and read by their one reader:
each shard's own loop lag, send lag and CPU kept and shown on the run page, the flag judged per
shard, and rows stored before shards still read."""
import pytest

from benchmarks import services
from benchmarks.engine.client import LevelOutcome
from benchmarks.engine.client_figures import ClientFigures, ShardFigures
from benchmarks.engine.metrics import RequestResult
from benchmarks.models import LevelResult, Run
from factories import endpoint
from test_fault_tolerance import create_run

pytestmark = pytest.mark.django_db


def request(i):
    return RequestResult(index=i, sent=0.001 * i, prompt_tokens_asked=16, output_tokens_asked=4, first_content=0.01,
                         chunk_times=[0.01, 0.02, 0.03, 0.04], chunk_tokens=[1] * 4, output_tokens=4,
                         client_output_tokens=4, finish_reason="length")


def test_per_shard_figures_are_stored_read_and_shown(client):
    e = endpoint("http://127.0.0.1:9", name="sharded")
    run = create_run([e], prompt_tokens=16, output_tokens=4, concurrency_levels=[4], requests_per_level=4,
                     warmup_requests=0)
    results = [request(i) for i in range(4)]
    shards = [ShardFigures(shard=0, host="gen-a", pid=11, requests=2, cpu_percent=35.0, loop_lag_ms_p99=1.5),
              ShardFigures(shard=1, host="gen-b", pid=12, requests=2, cpu_percent=88.0, loop_lag_ms_p99=23.0,
                           clock_offset_ms=0.42, clock_rtt_ms=0.3)]
    figures = ClientFigures.merged(shards, results, {"host_cpus": 16}, processes=2, machines=2, why="set for the run")
    level = services.level_store(run=run, endpoint=e, outcome=LevelOutcome(4, results, 1.7e9, 0.04,
                                                                            client=figures.to_dict()))
    stored = LevelResult.objects.get(id=level.id)
    assert stored.client["version"] == 2
    read = stored.client_figures
    assert read == figures
    assert [s.loop_lag_ms_p99 for s in read.shards] == [1.5, 23.0] and read.loop_lag_ms_p99 == 23.0
    flag = next(f for f in stored.flags if f["code"] == "client_saturated")
    assert flag["reason"].startswith("Shard 2 of 2 on gen-b: ")
    page = client.get(f"/r/{run.public_id}/").content.decode()
    assert "2 processes on 2 machines" in page
    assert "shard 2 (gen-b): 88 % / 23.00 ms" in page and "clock 0.42 ms ± 0.30" in page


def test_a_row_stored_before_shards_reads_as_one_process(client):
    e = endpoint("http://127.0.0.1:9", name="old")
    run = create_run([e], prompt_tokens=16, output_tokens=4, concurrency_levels=[1], requests_per_level=1,
                     warmup_requests=0)
    level = services.level_store(run=run, endpoint=e, outcome=LevelOutcome(1, [request(0)], 1.7e9, 0.04))
    old = {"cpu_percent": 12.0, "loop_lag_ms_p99": 0.8, "loop_lag_ms_max": 1.1, "host_cpus": 2, "host_load_1m": 0.5}
    LevelResult.objects.filter(id=level.id).update(client=old)
    read = LevelResult.objects.get(id=level.id).client_figures
    assert read.processes == 1 and read.cpu_percent == 12.0 and read.host["host_load_1m"] == 0.5
    page = client.get(f"/r/{run.public_id}/").content.decode()
    assert "0.5 on 2 CPUs" in page and "processes" not in page.split('id="telemetry"')[1].split("</table>")[0]


@pytest.mark.django_db(transaction=True)
def test_a_run_with_two_client_processes_is_measured_by_the_worker_and_stores_both(simulator,
                                                                                   celery_worker_process):
    from test_fault_tolerance import finished

    e = endpoint(simulator(prefill_ms=20, decode_ms=5).url, name="two-processes")
    run = finished(create_run([e], prompt_tokens=16, output_tokens=8, concurrency_levels=[4], requests_per_level=12,
                              warmup_requests=1, load_processes=2))
    assert run.status == Run.SUCCEEDED, run.error
    level = run.levels.get()
    assert sorted(level.requests.values_list("index", flat=True)) == list(range(12))
    assert level.completed == 12 and level.summary["ttft_ms"]["p50"] >= 20 - 1
    figures = level.client_figures
    assert figures.processes == 2 and len({s.pid for s in figures.shards}) == 2
    assert figures.why == "2 set for the run"
    assert run.progress_done == run.progress_total == 12


def test_the_client_processes_setting_is_shown_and_exported(client):
    e = endpoint("http://127.0.0.1:9", name="set")
    run = create_run([e], prompt_tokens=16, output_tokens=4, concurrency_levels=[1], requests_per_level=1,
                     warmup_requests=0, load_processes=3)
    page = client.get(f"/r/{run.public_id}/").content.decode()
    assert "· 3 client processes" in page
    exported = client.get(f"/r/{run.public_id}/export.json")
    assert exported.status_code == 200
    assert exported.json()["workload"]["load_processes"] == 3
