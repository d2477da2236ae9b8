"""Upgrading a site with runs measured before fingerprints: the migration gives each old level
the fingerprint its run and endpoint have, so the history page and the regression test see them.

What is expected follows from how the runs are made here, not from the function the migration
calls: levels of the same model, variant, host (no GPUs known) and workload share a history,
whichever endpoint measured them; another variant, another host or another workload is another
history (history.py's docstring); and a level gets the fingerprint the site stored for it when
it was measured."""
import importlib
import re
from collections import defaultdict
from datetime import datetime, timezone

import pytest
from django.apps import apps

from benchmarks import history
from benchmarks.models import LevelResult, Run
from factories import endpoint, measured_run

pytestmark = pytest.mark.django_db
backfill = importlib.import_module("benchmarks.migrations.0016_backfill_level_fingerprints").backfill
key_fingerprints = importlib.import_module("benchmarks.migrations.0025_key_level_fingerprints").key_fingerprints


def _at(day: int) -> datetime:
    return datetime(2026, 1, day, 10, 0, tzinfo=timezone.utc)


def _levels() -> dict:
    """(run, endpoint name, level index) -> fingerprint, for every stored level."""
    return {(lv.run_id, lv.endpoint.name, lv.level_index): lv.fingerprint
            for lv in LevelResult.objects.select_related("endpoint")}


def test_levels_measured_before_fingerprints_get_theirs_and_join_the_history():
    a = endpoint(name="old-a", quantization="fp8_e4m3")
    upgraded = endpoint(name="old-a-upgraded", quantization="fp8_e4m3")  # a's model, variant and host
    b = endpoint(name="old-b", quantization="gguf_q4_k_m", backend="llamacpp")  # another variant
    elsewhere = endpoint(name="old-c", quantization="fp8_e4m3", host="lab-2")  # a's variant, another host
    older = measured_run([a, b, elsewhere], levels=(1, 2), requests=3)
    newer = measured_run([upgraded], levels=(1, 2), requests=3)
    other = measured_run([a], levels=(1, 2), requests=3, prompt_tokens=256)  # another workload
    for day, run in enumerate([older, newer, other], start=1):
        Run.objects.filter(id=run.id).update(created=_at(day))
    measured = _levels()  # as the site stores them today
    LevelResult.objects.update(fingerprint="")  # as they were stored before fingerprints
    backfill(apps, None)
    unkeyed = _levels()
    key_fingerprints(apps, None)  # then 0025, as an upgrade runs them
    backfilled = _levels()

    assert backfilled == measured  # each level has the fingerprint a run measured now gets
    assert all(unkeyed[k] != backfilled[k] for k in measured)  # keyed: not the digest anyone could compute
    groups = defaultdict(set)
    for key, fingerprint in backfilled.items():
        assert re.fullmatch(r"[0-9a-f]{16}", fingerprint), key  # the history page's address
        groups[fingerprint].add(key)
    assert sorted(groups.values(), key=sorted) == sorted([
        {(older.id, "old-a", 0), (older.id, "old-a", 1), (newer.id, "old-a-upgraded", 0),
         (newer.id, "old-a-upgraded", 1)},
        {(older.id, "old-b", 0), (older.id, "old-b", 1)},
        {(older.id, "old-c", 0), (older.id, "old-c", 1)},
        {(other.id, "old-a", 0), (other.id, "old-a", 1)},
    ], key=sorted)

    # The history page of a's workload: both runs' levels, oldest first.
    fp_a = backfilled[older.id, "old-a", 0]
    points = history.history_points(fp_a)
    assert [(p["run"].id, p["endpoint"], p["level_index"]) for p in points] == [
        (older.id, "old-a", 0), (older.id, "old-a", 1), (newer.id, "old-a-upgraded", 0),
        (newer.id, "old-a-upgraded", 1)]
    assert [p["created"] for p in points] == [_at(1), _at(1), _at(2), _at(2)]

    # A level that already has one keeps it; only the blank ones are filled.
    LevelResult.objects.filter(run=newer).update(fingerprint="kept")
    LevelResult.objects.filter(run=other).update(fingerprint="")
    backfill(apps, None)  # 0016 alone fills the blanks with the digests of its day (0025 keys them after)
    refilled = {k: unkeyed[k] for k in backfilled if k[0] == other.id}
    assert _levels() == {**backfilled, **refilled, (newer.id, "old-a-upgraded", 0): "kept",
                         (newer.id, "old-a-upgraded", 1): "kept"}


def test_a_history_address_cannot_be_computed_from_what_an_outsider_knows(client, settings):
    e = endpoint(name="guessable", quantization="fp8_e4m3")
    run = measured_run([e], levels=(1,), requests=3)
    level = run.levels.get()
    digest = history.workload_digest(run, e)  # the model, GPU and workload, hashed as anyone could
    assert level.fingerprint == history.keyed(digest) != digest
    assert client.get(f"/history/{digest}/").status_code == 404
    assert client.get(f"/history/{level.fingerprint}/").status_code == 200
    settings.SECRET_KEY = "another-site-" + "k" * 60  # another site's key: another address
    assert history.keyed(digest) != level.fingerprint
