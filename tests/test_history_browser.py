"""A workload's history page in Chromium at 1366 px (its charts at 1920 px too): runs of one
endpoint over two engine releases, the slower release flagged by its run's regression test, each
chart drawn from our static Plotly with its points carrying the engine version and launch flags,
nothing wider than the screen and no chart label over another.

The runs are queued at fixed times, five nights in a row (a nightly schedule's history): where
the charts' points and time ticks fall, and so whether any label meets another, must not depend
on how long this machine took between measuring one run and the next."""
from datetime import datetime, timezone

import pytest

from benchmarks import services
from benchmarks.models import Run
from test_pages_at_a_glance import SCREENS, check
from conftest import log_in, watched
from factories import endpoint, measured_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NIGHTS = [datetime(2025, 11, day, 2, 0, tzinfo=timezone.utc) for day in range(3, 8)]  # Nov 3 to 7, 02:00 UTC


def _released(e, version, decode_ms, flags, queued):
    """A run queued at `queued`, measured on a server at `version` (decoding at `decode_ms`),
    finished through the service: its server identity as a run stores it, and its regression
    test (against the runs queued before it)."""
    run = measured_run([e], levels=(1, 4), requests=6, tokens=16, prompt_tokens=64, decode_ms=decode_ms)
    run.status = Run.RUNNING
    run.created = queued
    run.server_config = {str(e.id): {"backend": "vllm", "version": version,
                                     "declared": {"engine_version": version, "launch_flags": flags}}}
    run.save(update_fields=["status", "created", "server_config"])
    services._finish(run, Run.SUCCEEDED)
    run.refresh_from_db()
    return run


def test_the_history_page_shows_the_trend_and_flags_the_release_that_slowed_it(browser, live_server, settings):
    settings.REGRESSION_MIN_HISTORY = 3
    # Real timings on a shared machine wander by several percent between runs: the release below
    # is 100 % slower, so a 25 % minimum change keeps that noise from being flagged.
    settings.REGRESSION_MIN_CHANGE_PCT = 25
    e = endpoint(name="vllm-staging", url="http://127.0.0.1:8")
    flags = {"max-model-len": 4096, "gpu-memory-utilization": 0.9}
    # The earlier release's runs share one measurement (1 ms a token): a loaded machine's timing
    # noise between them is not what this page test is about (test_regressions.py holds the
    # detector to planted noise); the slower release is measured anew at 20 ms a token.
    before = [_released(e, "0.9.2", None, flags, night) for night in NIGHTS[:4]]
    slow = _released(e, "0.10.0", 20.0, flags, NIGHTS[4])
    assert not any(r.regression_report.regressed for r in before)
    assert slow.regression_report.regressed
    fingerprint = slow.levels.first().fingerprint
    page = watched(browser.new_page(viewport=SCREENS["1366"]))
    # A member (anonymous readers see no launch flags, which may name paths and addresses).
    log_in(page, live_server, f"/accounts/login/?next={slow.get_absolute_url()}")
    page.wait_for_url(f"**{slow.get_absolute_url()}")
    assert "Regressed:" in page.inner_text("#regression-verdict")
    page.click("#schedule summary")  # the run page, its regression table and schedule form open
    check(page, "run-regressed-1366")
    page.click(f"#regression a[href='/history/{fingerprint}/']")
    page.wait_for_url(f"**/history/{fingerprint}/")
    charts = check(page, "history-1366")
    assert len(charts) == 4
    assert all(c["series"] >= 2 for c in charts)  # a line per load level, and the flagged points
    # Runs over four days: dates only, and each night a sixth of the span (16 h) or more after
    # the one before, so each has its tick, from left to right.
    ticks = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(el =>
        [...el.querySelectorAll('.xtick text')].map(t => [t.textContent, t.getBoundingClientRect().left]))""")
    expected = [f"{t:%b} {t.day}" for t in NIGHTS]
    assert [[text for text, _ in chart] for chart in ticks] == [expected] * 4
    assert all([left for _, left in chart] == sorted(left for _, left in chart) for chart in ticks)
    tpot = page.evaluate("""() => {
        const el = document.querySelector('#chart-tpot_ms_p50 .js-plotly-plot');
        return {names: el._fullData.map(t => t.name), versions: el._fullData[0].customdata.map(c => c[1]),
                flags: el._fullData[0].customdata[0][2], changes: el._fullLayout.shapes.length};
    }""")
    assert "flagged as a regression" in tpot["names"]
    assert tpot["versions"] == ["0.9.2"] * 4 + ["0.10.0"]
    assert "max-model-len=4096" in tpot["flags"]
    assert tpot["changes"] >= 1  # the dotted line where the version changed
    rows = page.locator("#history-points tbody tr.regressed")
    assert rows.count() >= 1 and "0.10.0" in rows.first.inner_text()
    # At 1920 px the same charts, held to the same check.
    wide = watched(browser.new_page(viewport=SCREENS["1920"]))
    log_in(wide, live_server, f"/accounts/login/?next=/history/{fingerprint}/")
    wide.wait_for_url(f"**/history/{fingerprint}/")
    assert len(check(wide, "history-1920")) == 4
