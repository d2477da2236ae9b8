"""Upgrading a site with runs measured before fingerprints: the migration gives each old level
the fingerprint its run and endpoint have, so the history page and the regression test see them."""
import importlib

import pytest
from django.apps import apps

from benchmarks import history
from benchmarks.models import LevelResult
from factories import endpoint, measured_run

pytestmark = pytest.mark.django_db
backfill = importlib.import_module("benchmarks.migrations.0016_backfill_level_fingerprints").backfill


def test_levels_measured_before_fingerprints_get_theirs_and_join_the_history():
    a = endpoint(name="old-a", quantization="fp8_e4m3")
    b = endpoint(name="old-b", quantization="gguf_q4_k_m", backend="llamacpp")
    older, newer = measured_run([a, b], levels=(1, 2), requests=3), measured_run([a], levels=(1, 2), requests=3)
    LevelResult.objects.update(fingerprint="")  # as they were stored before
    backfill(apps, None)
    for level in LevelResult.objects.select_related("run", "endpoint"):
        assert level.fingerprint == history.workload_fingerprint(level.run, level.endpoint)
    fp_a = history.workload_fingerprint(older, a)
    assert fp_a != history.workload_fingerprint(older, b)  # another variant: another history
    assert {lv.run_id for lv in history.history_levels(fp_a)} == {older.id, newer.id}
    assert history.history_points(fp_a)  # the page has its points
    # a level that already has one keeps it
    LevelResult.objects.filter(run=newer).update(fingerprint="kept")
    backfill(apps, None)
    assert set(LevelResult.objects.filter(run=newer).values_list("fingerprint", flat=True)) == {"kept"}
