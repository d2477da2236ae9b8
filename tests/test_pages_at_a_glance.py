"""Every kind of result page in Chromium at 1366×768 and 1920×1080, with real data (a measured
run, a comparison of seven series, an import, a decision): nothing wider than its container, no
chart label over another, every series of its own colour, every quantity axis with a unit.
Screenshots are kept under test-results/screens/ (git-ignored)."""
from pathlib import Path

import pytest

from benchmarks.services import comparison_create, published_reports_load, report_import
from conftest import ROOT, log_in, watched
from factories import decide, endpoint, gpu_samples, measured_run, user
from test_decisions import V100

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = {"1366": {"width": 1366, "height": 768}, "1920": {"width": 1920, "height": 1080}}
ARTEFACTS = ROOT / "test-results" / "screens"
DATA = Path(__file__).parent / "data" / "imports"

# Elements that stick out of their container (the nearest ancestor that clips or scrolls, else
# <main>), and scroll boxes whose content is cut (wider than the box).
OVERFLOW = """() => {
  const main = document.querySelector('main'), bad = [];
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth + 1) bad.push('page scrolls sideways: ' + page.scrollWidth + ' > ' + page.clientWidth);
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '');
  for (const el of main.querySelectorAll('*')) {
    if (el.closest('svg') || el.closest('.js-plotly-plot') || el.closest('details:not([open])')) continue;
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    const style = getComputedStyle(el);
    if (['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
      bad.push(name(el) + ' cuts its content: ' + el.scrollWidth + ' > ' + el.clientWidth);
    let box = el.parentElement;
    while (box !== main && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    const b = box.getBoundingClientRect();
    if (r.right > b.right + 1 || r.left < b.left - 1) bad.push(name(el) + ' sticks out of ' + name(box) + ': ' + Math.round(r.left) + '-' + Math.round(r.right) + ' vs ' + Math.round(b.left) + '-' + Math.round(b.right));
  }
  return bad;
}"""

# Per drawn chart: every text element of its SVG that is shown (the title, axis titles, the tick
# labels of every axis — x2, y2, y3… too —, legend entries, annotations; hover labels aside), each
# named by its kind: any two whose boxes overlap by more than a pixel, any outside the chart, and
# `kinds`, how many of each kind were held to this. Then quantity axes without a unit, legend
# entries sharing a colour, and the smallest plot panel's height.
CHARTS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => {
  const fl = el._fullLayout, chart = el.getBoundingClientRect(), out = {id: el.closest('.chart-box').id, problems: [], kinds: {}};
  const visible = t => {
    for (let e = t; e && e !== el; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') return false;
    }
    const r = t.getBoundingClientRect();
    return t.textContent.trim() && r.width > 0 && r.height > 0;
  };
  const kind = t => t.getAttribute('class') || t.parentElement.getAttribute('class') || 'text';
  // A text's box as drawn: its own box's four corners on the screen, turned with it when slanted
  // (the upright box around a slanted label would meet its neighbours' where the text does not).
  const corners = t => {
    const b = t.getBBox(), m = t.getScreenCTM();
    return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
      .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  };
  // Two boxes overlap unless some edge's normal separates them, or they share under a pixel on it.
  const overlap = (p, q) => [p, q].every(poly => poly.every((c, i) => {
    const d = poly[(i + 1) % 4], len = Math.hypot(d[0] - c[0], d[1] - c[1]) || 1;
    const n = [(c[1] - d[1]) / len, (d[0] - c[0]) / len];
    const span = s => s.map(([x, y]) => x * n[0] + y * n[1]);
    const a = span(p), b = span(q);
    return Math.min(Math.max(...a), Math.max(...b)) - Math.max(Math.min(...a), Math.min(...b)) > 1;
  }));
  const boxes = [...el.querySelectorAll('svg text')].filter(t => !t.closest('.hoverlayer') && visible(t))
    .map(t => ({t: kind(t) + ' "' + t.textContent.trim() + '"', k: kind(t), c: corners(t)}));
  for (const b of boxes) {
    out.kinds[b.k] = (out.kinds[b.k] || 0) + 1;
    const xs = b.c.map(c => c[0]), ys = b.c.map(c => c[1]);
    if (Math.min(...xs) < chart.left - 1 || Math.max(...xs) > chart.right + 1 || Math.min(...ys) < chart.top - 1 || Math.max(...ys) > chart.bottom + 1)
      out.problems.push('outside the chart: ' + b.t);
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++)
    if (overlap(boxes[i].c, boxes[j].c)) out.problems.push('overlap: ' + boxes[i].t + ' and ' + boxes[j].t);
  for (const key of Object.keys(fl).filter(k => /^[xy]axis\\d*$/.test(k))) {
    const ax = fl[key];
    if (!ax.visible || !['linear', 'log'].includes(ax.type) || !ax._id) continue;
    if (!el._fullData.some(t => t.visible !== false && (t.xaxis === ax._id || t.yaxis === ax._id))) continue;
    if (key.startsWith('y') && ax.showticklabels === false) continue;
    const title = (ax.title && ax.title.text) || '';
    if (!/\\(.+\\)|^seconds|^requests/.test(title)) out.problems.push(key + ' has no unit: "' + title + '"');
  }
  const shown = el._fullData.filter(t => t.showlegend !== false && t.visible !== false && !['box'].includes(t.type));
  const colours = shown.map(t => (t.line && t.line.color) || (t.marker && t.marker.color));
  if (new Set(colours).size < colours.length) out.problems.push('legend colours repeat: ' + colours.join(' '));
  const panels = Object.keys(fl).filter(k => /^yaxis\\d*$/.test(k) && fl[k]._length).map(k => fl[k]._length);
  out.smallest_panel = Math.min(...panels);
  out.series = shown.length;
  return out;
})"""


# Each visible box or radio and its label's text: the horizontal gap between them and how far
# their middles are apart vertically.
BESIDE = """() => [...document.querySelectorAll('input[type=checkbox], input[type=radio]')].filter(i => i.offsetParent).map(i => {
  const label = i.closest('label') || document.querySelector('label[for="' + i.id + '"]'), r = i.getBoundingClientRect();
  const range = document.createRange(); range.selectNodeContents(label);
  const text = [...range.getClientRects()].filter(t => t.width > 0 && t.left > r.right - 1)[0];
  return {name: i.name + '=' + i.value, gap: text ? text.left - r.right : 999,
          dy: text ? Math.abs((text.top + text.bottom) / 2 - (r.top + r.bottom) / 2) : 999};
})"""


def screenshot(page, name):
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / f"{name}.png"), full_page=True)


def check(page, name):
    """Wait for every chart, then hold the page to the layout rules; keep its screenshot."""
    page.wait_for_function("() => [...document.querySelectorAll('.chart')].every(c => c.dataset.drawn === 'true')",
                           timeout=60000)
    screenshot(page, name)
    assert page.evaluate(OVERFLOW) == [], name
    charts = page.evaluate(CHARTS)
    for chart in charts:
        page.locator(f"#{chart['id']}").screenshot(path=str(ARTEFACTS / f"{name}-{chart['id']}.png"))
        assert chart["problems"] == [], (name, chart["id"], chart["problems"])
        assert chart["smallest_panel"] >= 150, (name, chart)
    assert page.js_errors == [], page.js_errors
    return charts


def pages(browser):
    for size, viewport in SCREENS.items():
        yield size, watched(browser.new_page(viewport=viewport))


def seven_series():
    """Two measured runs (one endpoint in both), the published V100 reports and a llama-bench import."""
    published_reports_load()
    q4 = endpoint(name="llama-cpu-gemma3", backend="llamacpp", quantization="gguf_q4_k_m")
    first = measured_run([q4, endpoint(name="vllm-sim-fp8", url="http://127.0.0.1:8", quantization="fp8_e4m3"),
                          endpoint(name="llama-sim-q8", url="http://127.0.0.1:7", backend="llamacpp",
                                   quantization="gguf_q8_0")], levels=(1, 4, 8), requests=10, tokens=30)
    second = measured_run([q4], levels=(1, 4, 8), requests=10, tokens=30, title="after the driver update")
    bench = report_import(owner=None, data=(DATA / "llama_bench_pp512_tg128.json").read_bytes(),
                          filename="llama_bench_pp512_tg128.json")
    from benchmarks.models import ImportedReport
    reports = list(ImportedReport.objects.filter(kind="published")) + [bench]
    return comparison_create(owner=None, runs=[first, second], reports=reports, title="Seven series at a glance"), bench


def test_a_measured_run_reads_well_at_both_sizes(browser, live_server):
    run = measured_run([endpoint(name="llama-cpu-gemma3-q4km", backend="llamacpp", quantization="gguf_q4_k_m"),
                        endpoint(name="vllm-fp8-tp1", url="http://127.0.0.1:8", quantization="fp8_e4m3")],
                       levels=(1, 4, 8), requests=20, gpu=gpu_samples(peak_mib=6000.0), server=True)
    for size, page in pages(browser):
        page.goto(live_server.url + run.get_absolute_url())
        check(page, f"run-{size}")
        # The endpoint cell: its name and backend, two lines at most.
        lines = page.evaluate("""() => [...document.querySelectorAll('#results tbody td:first-child')].map(td =>
            Math.round(td.getBoundingClientRect().height / parseFloat(getComputedStyle(td).lineHeight)))""")
        assert max(lines) <= 3, lines  # two lines of text and the cell's padding


def test_a_comparison_of_seven_series_reads_well_at_both_sizes(browser, live_server):
    comparison, _ = seven_series()
    for size, page in pages(browser):
        page.goto(live_server.url + comparison.get_absolute_url())
        (throughput,) = check(page, f"comparison-{size}")
        assert throughput["series"] >= 7
        warnings = page.locator(".comparability").all_inner_texts()
        assert warnings[0].startswith("Different models"), warnings
        assert sum("tg128" in w for w in warnings) == 1
        labels = page.locator("#series tbody td:first-child").all_inner_texts()
        assert any("after the driver update" in label for label in labels)


def test_an_import_and_a_decision_read_well_at_both_sizes(browser, live_server):
    _, bench = seven_series()
    decision = decide(V100, owner=user("bob"))
    for size, page in pages(browser):
        page.goto(live_server.url + bench.get_absolute_url())
        (chart,) = check(page, f"import-{size}")
        page.goto(live_server.url + decision.get_absolute_url())
        page.wait_for_load_state("networkidle")
        screenshot(page, f"decision-{size}")
        assert page.evaluate(OVERFLOW) == [], size


def test_the_forms_put_boxes_beside_their_labels_and_show_one_load_mode(browser, live_server):
    seven_series()
    page = watched(browser.new_page(viewport=SCREENS["1366"]))
    log_in(page, live_server)
    gaps = page.evaluate(BESIDE)
    assert gaps and all(g["gap"] < 16 and g["dy"] < 8 for g in gaps), gaps
    assert page.locator("#field-concurrency_levels").is_visible()
    assert not page.locator("#field-request_rates").is_visible()
    page.check("input[name=load_mode][value=rate]")
    assert page.locator("#field-request_rates").is_visible() and page.locator("#field-max_concurrency").is_visible()
    assert not page.locator("#field-concurrency_levels").is_visible()
    screenshot(page, "run-form-1366")
    page.goto(live_server.url + "/compare/")
    gaps = page.evaluate(BESIDE)
    assert len(gaps) >= 3 and all(g["gap"] < 16 and g["dy"] < 8 for g in gaps), gaps
    screenshot(page, "compare-form-1366")
    assert page.evaluate(OVERFLOW) == []
    assert page.js_errors == []


def test_a_decision_on_cost_against_a_rented_gpu_reads_well_at_both_sizes(browser, live_server):
    decision = decide({**V100, "priority": "lowest_cost", "price_ownership": "owned", "price_per_hour": "0.20",
                       "price_per_kwh": "0.30", "price_currency": "USD", "rent_gpu": "H100 (SXM)",
                       "rent_per_hour": "2.50", "rent_gpu_count": "1"}, owner=user("carol"))
    for size, page in pages(browser):
        page.goto(live_server.url + decision.get_absolute_url())
        page.wait_for_load_state("networkidle")
        screenshot(page, f"decision-cost-{size}")
        assert page.evaluate(OVERFLOW) == [], size
        answer = page.locator("#price-answer")
        assert "USD per million output tokens" in answer.inner_text()
        assert page.locator("#price-comparison table").bounding_box()["width"] <= SCREENS[size]["width"]
