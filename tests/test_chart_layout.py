"""Every chart of the run page in Chromium at 1366 and 1920 px wide, with real data: no text
element of its SVG (title, axis titles, every axis' tick labels, legend entries, annotations) over
another or outside the chart, as test_pages_at_a_glance.CHARTS measures it from the rendered boxes.
The data: a lab sweep of --parallel 1, 4 and 8 over two recipes, started and measured by the lab's
own code (its sweep and server-queue charts), and a run on two GPUs (its GPU charts). A swept server
setting is a category, its values the labels in their natural order. The comparison, import and
history pages' charts are held to the same check in test_pages_at_a_glance.py and
test_history_browser.py; the check itself is proved here on a figure that collides on purpose."""
import sys
from pathlib import Path

import plotly
import pytest
from conftest import ROOT, watched
from factories import (
    endpoint,
    execute_in_process,
    gpu_samples,
    measured_run,
    queue_run,
    user,
)
from test_pages_at_a_glance import CHARTS, SCREENS, check, pages

from benchmarks import views
from benchmarks.models import Host, Run, ServerRecipe

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PLOTLY = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
HOST = "chart-lab"


def stand_in(decode_ms: float) -> list[str]:
    """The simulator as a llama-server that takes the swept --parallel as its number of slots."""
    script = (f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); "
              f"sys.argv = ['sim', '--dialect', 'llamacpp', '--prefill-ms', '5', '--decode-ms', '{decode_ms}', "
              "*['--slots' if a == '--parallel' else a for a in sys.argv[1:]]]; "
              "runpy.run_module('benchmarks.engine.simulator', run_name='__main__')")
    return ["-c", script, "--host", "{host}", "--port", "{port}"]


def lab_sweep(settings, tmp_path) -> Run:
    """Two recipes, each swept over --parallel 1, 4, 8, at concurrency 1 and 4: measured in this
    process by the worker's own code, the servers started and stopped by the lab."""
    settings.WORKER_HOST, settings.LAB_EXECUTABLES = HOST, sys.executable
    settings.LAB_MODEL_DIRS, settings.LAB_STATE_DIR, settings.LAB_PORTS = str(tmp_path), tmp_path, "18480-18499"
    host, _ = Host.objects.get_or_create(name=HOST)
    recipes = []
    for name, decode_ms in (("llama-q4", 3), ("llama-q8", 5)):
        r = ServerRecipe(name=name, host=host, backend="llamacpp", executable=sys.executable,
                         model_path=str(tmp_path), args=stand_in(decode_ms), sweep={"--parallel": [1, 4, 8]})
        r.full_clean()
        r.save()
        recipes.append(r)
    run = execute_in_process(queue_run(
        owner=user(), endpoints=[], recipes=recipes, sweep={}, prompt_tokens=32, output_tokens=16,
        temperature=0.7, concurrency_levels=[1, 4], requests_per_level=8, warmup_requests=0))
    assert run.status == Run.SUCCEEDED, run.error
    return run


def test_every_run_chart_keeps_its_text_apart_at_both_widths(browser, live_server, settings, tmp_path):
    sweep = lab_sweep(settings, tmp_path)
    two_gpus = measured_run([endpoint(name="vllm-fp8-tp2", url="http://127.0.0.1:8", quantization="fp8_e4m3"),
                             endpoint(name="llama-cpu-gemma3-q4km", backend="llamacpp", quantization="gguf_q4_k_m")],
                            levels=(1, 4, 8), requests=20, server=True,
                            gpu=gpu_samples(peak_mib=6000.0, index=0) + gpu_samples(peak_mib=9000.0, index=1))
    drawn = set()
    for size, page in pages(browser):
        page.goto(live_server.url + sweep.get_absolute_url())
        lab = {c["id"]: c for c in check(page, f"lab-sweep-{size}")}
        assert {"chart-sweep", "chart-server"} <= set(lab), sorted(lab)
        # The right axis' ticks and title are held to the check too.
        assert lab["chart-sweep"]["kinds"].get("y2tick") and lab["chart-sweep"]["kinds"].get("y2title")
        axis = page.evaluate("""() => { const ax = document.querySelector('#chart-sweep .js-plotly-plot')._fullLayout.xaxis;
            return {type: ax.type, ticks: [...document.querySelectorAll('#chart-sweep .xtick text')].map(t => t.textContent)}; }""")
        assert axis == {"type": "category", "ticks": ["1", "4", "8"]}, axis
        page.goto(live_server.url + two_gpus.get_absolute_url())
        gpus = check(page, f"run-two-gpus-{size}")
        drawn |= set(lab) | {c["id"] for c in gpus}
    assert drawn == {f"chart-{name}" for name in views.CHARTS}, "a chart of the run page went unchecked"


def test_the_check_finds_text_over_text_of_every_kind(browser):
    """A figure that collides on purpose: a note on a right-axis tick label, another on a legend
    entry. Every kind of text is collected, and both collisions are named."""
    page = watched(browser.new_page(viewport=SCREENS["1366"]))
    page.set_content("<main><section class='chart-box' id='chart-probe'><div id='probe'></div></section></main>")
    page.add_script_tag(path=str(PLOTLY))
    page.evaluate("""() => Plotly.newPlot('probe', [
        {x: [1, 2, 3], y: [1, 2, 3], name: 'left line'},
        {x: [1, 2, 3], y: [10, 20, 30], name: 'right line', yaxis: 'y2'}], {
        width: 900, height: 450, title: {text: 'probe (s)'}, margin: {t: 60, r: 120, b: 160, l: 80},
        xaxis: {title: {text: 'x (s)'}}, yaxis: {title: {text: 'left (s)'}},
        yaxis2: {title: {text: 'right (s)'}, overlaying: 'y', side: 'right', tickvals: [20]},
        legend: {orientation: 'h', x: 0, xanchor: 'left', y: -0.5, yanchor: 'top'},
        annotations: [
          {xref: 'paper', x: 1, xanchor: 'left', yref: 'y2', y: 20, text: 'on the y2 tick', showarrow: false},
          {xref: 'paper', x: 0, xanchor: 'left', yref: 'paper', y: -0.5, yanchor: 'top', text: 'on the legend, long enough',
           showarrow: false}]})""")
    (probe,) = page.evaluate(CHARTS)
    kinds = {"gtitle", "xtitle", "ytitle", "y2title", "xtick", "ytick", "y2tick", "legendtext", "annotation-text"}
    assert kinds <= set(probe["kinds"]), probe["kinds"]
    overlaps = [p for p in probe["problems"] if p.startswith("overlap")]
    assert any('y2tick "20"' in p and "on the y2 tick" in p for p in overlaps), probe["problems"]
    assert any("legendtext" in p and "on the legend" in p for p in overlaps), probe["problems"]
    assert page.js_errors == []
