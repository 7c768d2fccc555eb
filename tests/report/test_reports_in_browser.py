"""Every kind of report, opened in Debian's Chromium (headless, driven by python3-selenium through
chromium-driver) as a user opens it: a run, an encoder-decoder run, a ViT run, an analysed run and a
comparison. Each page must load without a JavaScript error; hovering a heatmap cell must show that cell's
query and key tokens and the weight the run saved (patterns/*.npy); the token view, the enlarged head, the
ViT patch view, the analysis tables' tooltips, the comparison's variant and seed picker and the charts'
ticks are checked the same way, through what the page shows.

Environment: ATTNLAB (the binary), ATTNLAB_SOURCE_DIR (the checkout), ATTNLAB_WORK (a scratch folder).
scripts/report_screenshots.py takes the pictures of docs/images the same way.
"""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

ATTNLAB = os.environ["ATTNLAB"]
SOURCE = os.environ["ATTNLAB_SOURCE_DIR"]
WORK = os.environ["ATTNLAB_WORK"]


def attnlab(*args):
    out = subprocess.run([ATTNLAB, *args], cwd=WORK, capture_output=True, text=True)
    assert out.returncode == 0, f"attnlab {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def config(name):
    return os.path.join(SOURCE, "configs", name)


SMALL = ["train.eval_batches=1", "train.schedule.warmup_steps=5", "log.pattern_interval=10", "log.interval=10", "--threads", "1"]


@pytest.fixture(scope="module")
def runs():
    """Trains one small run of each kind (seconds each) and analyses a copy of the causal one."""
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    attnlab("train", config("default.yaml"), "name=run", "train.steps=30", "train.eval_interval=10", "task.length=8",
            "task.gap=6", "model.d_model=32", *SMALL)
    shutil.copytree(os.path.join(WORK, "runs/run"), os.path.join(WORK, "runs/analysed"))
    attnlab("analyze", "runs/analysed", "--only", "ablation,detectors,attribution", "--examples", "16", "--threads", "1")
    attnlab("train", config("reverse_seq2seq.yaml"), "name=seq2seq", "train.steps=30", "train.eval_interval=10",
            "model.d_model=32", *SMALL)
    attnlab("train", config("fashion_mnist.yaml"), "name=vit", "train.steps=10", "train.eval_interval=10", "train.batch_size=16",
            "model.d_model=16", "model.n_layers=2", "model.pooling=cls", *SMALL)
    shutil.copy(config("default.yaml"), os.path.join(WORK, "base.yaml"))
    with open(os.path.join(WORK, "compare.yaml"), "w") as f:
        f.write("""name: kernels
base: base.yaml
seeds: [0, 1]
metric: token_accuracy
set: {train.steps: 20, train.eval_interval: 10, train.eval_batches: 1, log.interval: 10, log.pattern_interval: 10,
      model.d_model: 16, model.n_layers: 1, model.n_heads: 2, task.length: 8, task.gap: 4, train.schedule.warmup_steps: 5}
variants:
  softmax: {}
  linear: {model.attention.name: linear}
  gated_delta: {model.attention.name: gated_delta}
  quiet: {log.patterns: false}
""")
    attnlab("compare", "compare.yaml", "--jobs", "1", "--threads", "1")
    return os.path.join(WORK, "runs")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"]:
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves a folder of its own in $TMPDIR after every run: it goes to pytest's, which pytest prunes.
    env = dict(os.environ, TMPDIR=str(tmp_path_factory.mktemp("chromium")))
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver", env=env), options=options)
    yield driver
    driver.quit()


def open_report(browser, path):
    """Loads a report; fails on any JavaScript error or failed load the console saw."""
    browser.get("file://" + path)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{path}: {errors}"
    repeated = browser.execute_script("""
      var seen = {}, twice = [];
      document.querySelectorAll('[id]').forEach(function (e) { if (seen[e.id]) twice.push(e.id); seen[e.id] = true; });
      return twice;""")
    assert not repeated, f"{path}: element ids used more than once: {repeated}"


def no_new_errors(browser):
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def tip(browser):
    return browser.find_element(By.ID, "attnlab-tip").text


def hover(browser, element, fx, fy):
    """Moves the mouse to the point at fractions (fx, fy) of the element's box."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    r = browser.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", element)
    ActionChains(browser).move_to_element_with_offset(element, int(r[0] * (fx - 0.5)), int(r[1] * (fy - 0.5))).perform()


def labels(run, name):
    with open(os.path.join(run, "patterns", name)) as f:
        return f.read().split("\n")[:-1]


def weight_in(text):
    return float(re.search(r"weight (\S+)", text).group(1))


def check_cell_tooltip(browser, run, grid, layer, head, i, j, queries, keys):
    """Hovers cell (i, j) of one head's panel in a pattern grid and checks the tooltip against the .npy."""
    pattern = np.load(os.path.join(run, grid.get_attribute("data-file")))
    panel = grid.find_element(By.CSS_SELECTOR, f"svg.heatmap[data-layer='{layer}'][data-head='{head}'] image.cells")
    tq, tk = pattern.shape[2], pattern.shape[3]
    hover(browser, panel, (j + 0.5) / tk, (i + 0.5) / tq)
    text = tip(browser)
    assert f"layer {layer} head {head}" in text, text
    assert f"query {i} {json.dumps(queries[i])} \u2192 key {j} {json.dumps(keys[j])}" in text, text
    assert weight_in(text) == pytest.approx(float(pattern[layer, head, i, j]), abs=2e-4), text


def ticks_inside_charts(browser):
    """Every text of every chart and analysis table (tick labels, headers) lies within its picture."""
    outside = browser.execute_script("""
      var bad = [];
      document.querySelectorAll('svg.chart, svg.table').forEach(function (svg) {
        var w = svg.width.baseVal.value, h = svg.height.baseVal.value;
        svg.querySelectorAll('text').forEach(function (t) {
          if (t.closest('g[style*="none"]')) return;
          var b = t.getBBox(), m = t.getCTM(), r = svg.getCTM().inverse().multiply(m);
          var xs = [b.x, b.x + b.width], ys = [b.y, b.y + b.height];
          xs.forEach(function (x) { ys.forEach(function (y) {
            var p = svg.createSVGPoint(); p.x = x; p.y = y; p = p.matrixTransform(r);
            if (p.x < -0.5 || p.x > w + 0.5 || p.y < -0.5 || p.y > h + 0.5) bad.push(t.textContent);
          }); });
        });
      });
      return Array.from(new Set(bad));""")
    assert not outside, outside


def test_run_report(runs, browser):
    run = os.path.join(runs, "run")
    open_report(browser, os.path.join(run, "report.html"))
    grid = browser.find_element(By.CSS_SELECTOR, ".attn")
    keys = labels(run, "probe_0_labels.txt")
    check_cell_tooltip(browser, run, grid, 1, 2, 7, 3, keys, keys)
    check_cell_tooltip(browser, run, grid, 0, 0, len(keys) - 1, 0, keys, keys)
    # The token view: hovering query 5 colours every key in every head of layer 1 by that query's weights.
    pattern = np.load(os.path.join(run, grid.get_attribute("data-file")))
    view = grid.find_element(By.CSS_SELECTOR, ".tokenview[data-layer='1']")
    token = view.find_elements(By.CSS_SELECTOR, ".toks .tok")[5]
    assert token.text == keys[5]
    hover(browser, token, 0.5, 0.5)
    rows = view.find_elements(By.CSS_SELECTOR, ".tokheads > div")
    assert len(rows) == pattern.shape[1]
    for h, row in enumerate(rows):
        cells = row.find_elements(By.CSS_SELECTOR, ".tok")
        assert [c.text for c in cells] == keys
        for j in (0, 5):
            assert weight_in(cells[j].get_attribute("data-tip")) == pytest.approx(float(pattern[1, h, 5, j]), abs=2e-4)
    # A click enlarges a head; its canvas names cells the same way; Esc closes it.
    panel = grid.find_element(By.CSS_SELECTOR, "svg.heatmap[data-layer='0'][data-head='1']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", panel)
    panel.click()
    canvas = browser.find_element(By.CSS_SELECTOR, "#attnlab-overlay canvas")
    assert "layer 0 head 1" in browser.find_element(By.ID, "attnlab-overlay").text
    ActionChains(browser).move_to_element(canvas).perform()  # the centre: somewhere in the grid or its labels
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    assert not browser.find_elements(By.ID, "attnlab-overlay")
    ticks_inside_charts(browser)
    no_new_errors(browser)


def test_seq2seq_report(runs, browser):
    run = os.path.join(runs, "seq2seq")
    open_report(browser, os.path.join(run, "report.html"))
    cross = [g for g in browser.find_elements(By.CSS_SELECTOR, ".attn") if g.get_attribute("data-file").endswith("_cross.npy")][0]
    source, target = labels(run, "probe_0_labels.txt"), labels(run, "probe_0_target_labels.txt")
    check_cell_tooltip(browser, run, cross, 1, 3, len(target) - 1, 1, target, source)  # target down, source across
    check_cell_tooltip(browser, run, cross, 0, 0, 0, len(source) - 1, target, source)
    no_new_errors(browser)


def test_vit_report(runs, browser):
    run = os.path.join(runs, "vit")
    open_report(browser, os.path.join(run, "report.html"))
    grid = browser.find_element(By.CSS_SELECTOR, ".attn")
    pattern = np.load(os.path.join(run, grid.get_attribute("data-file")))  # [layers, heads, 1 + 16, 1 + 16]: CLS, 4 x 4 patches
    assert pattern.shape[2] == 17
    view = grid.find_element(By.CSS_SELECTOR, ".imageview[data-layer='1']")
    pick = view.find_element(By.CSS_SELECTOR, "canvas.pick")
    hover(browser, pick, (2 + 0.5) / 4, (1 + 0.5) / 4)  # row 1, column 2: patch 6, position 7 after CLS
    assert "patch p6 (row 1, column 2)" in tip(browser)
    heads = view.find_elements(By.CSS_SELECTOR, "figure canvas")
    assert len(heads) == pattern.shape[1]
    assert all(c.find_element(By.XPATH, "..").text.endswith("from p6") for c in heads)
    hover(browser, heads[3], (3 + 0.5) / 4, (0 + 0.5) / 4)  # head 3 over patch 3 (row 0, column 3): key position 4
    text = tip(browser)
    assert 'query 7 "p6"' in text and 'key 4 "p3"' in text, text
    assert weight_in(text) == pytest.approx(float(pattern[1, 3, 7, 4]), abs=2e-4), text
    no_new_errors(browser)


def test_analysed_report(runs, browser):
    run = os.path.join(runs, "analysed")
    open_report(browser, os.path.join(run, "report.html"))
    with open(os.path.join(run, "analysis", "summary.json")) as f:
        summary = json.load(f)
    table = next(t for t in summary["tables"] if t["name"] == "ablation_zero_loss")
    figure = [f for f in browser.find_elements(By.CSS_SELECTOR, "figure.analysis") if "ablation_zero_loss.csv" in f.get_attribute("innerHTML")][0]
    svg = figure.find_element(By.CSS_SELECTOR, "svg.table")
    assert "\u2190 layer" in svg.text and "head \u2192" in svg.text  # the axes say what rows (down) and columns (across) are
    cell = svg.find_elements(By.CSS_SELECTOR, "rect")[1 * len(table["cols"]) + 2]  # layer 1, head 2
    hover(browser, cell, 0.5, 0.5)
    text = tip(browser)
    assert text.startswith(table["title"]) and "layer 1, head 2: " in text, text
    value = float(text.split("head 2: ")[1].split()[0])
    assert value == pytest.approx(table["values"][1 * len(table["cols"]) + 2], rel=5e-4), text
    # Facts: under their parts' headings, in words; the dotted key on hover.
    facts = browser.find_element(By.CSS_SELECTOR, "table.facts")
    assert "ablation.baseline.loss" not in facts.text and "baseline loss" in facts.text
    row = [r for r in facts.find_elements(By.CSS_SELECTOR, "tr") if r.text.startswith("baseline loss")][0]
    hover(browser, row, 0.2, 0.5)
    assert tip(browser) == "ablation.baseline.loss"
    ticks_inside_charts(browser)  # the tables' column labels too (detector names were cut at 16 characters)
    # Numbers for people: steps and counts whole (1000, not 1e+03); only values below 0.001 take an exponent.
    shown = browser.find_element(By.TAG_NAME, "body").text
    assert not re.search(r"\d[eE]\+\d", shown), re.search(r".{30}\d[eE]\+\d.{10}", shown)
    no_new_errors(browser)


def test_comparison_report(runs, browser):
    folder = os.path.join(runs, "kernels")
    open_report(browser, os.path.join(folder, "report.html"))
    # Means solid in their own colours; each seed's curve hidden until asked for.
    means = browser.find_elements(By.CSS_SELECTOR, "svg.chart g[data-curve='mean'] path")
    styles = {(p.get_attribute("stroke"), p.get_attribute("stroke-dasharray")) for p in means}
    assert len(styles) == 4, styles  # four variants, each its own style (the same on both charts)
    seeds = browser.find_elements(By.CSS_SELECTOR, "svg.chart g[data-curve='seeds']")
    assert seeds and not any(s.is_displayed() for s in seeds)
    browser.find_element(By.CSS_SELECTOR, "form.series input[name='curves'][value='seeds']").click()
    assert all(s.is_displayed() for s in seeds)
    browser.find_element(By.CSS_SELECTOR, "form.series input[name='seed'][value='1']").click()
    assert not any(s.is_displayed() for s in seeds if s.get_attribute("data-seed") == "1")
    browser.find_element(By.CSS_SELECTOR, "form.series input[name='variant'][value='2']").click()  # gated_delta off
    for el in browser.find_elements(By.CSS_SELECTOR, "[data-variant='2']"):
        assert not el.is_displayed()
    # Patterns only from the variants that captured them; the quiet one is named once instead of an empty box.
    boxes = browser.find_elements(By.CSS_SELECTOR, ".variants > .variant h3")
    assert [b.get_attribute("textContent") for b in boxes] == ["softmax", "linear", "gated_delta"]
    assert "No patterns from quiet" in browser.find_element(By.TAG_NAME, "body").text
    # gated_delta's signed mixing comes with the diverging colour bar, softmax's weights with viridis.
    gated = browser.find_element(By.CSS_SELECTOR, ".variants > .variant[data-variant='2']")
    softmax = browser.find_element(By.CSS_SELECTOR, ".variants > .variant[data-variant='0']")
    assert gated.find_elements(By.CSS_SELECTOR, "svg.colourbar.diverging")
    assert softmax.find_elements(By.CSS_SELECTOR, "svg.colourbar.viridis")
    # best counts every evaluation, the final one too, so it never reads below final.
    rows = browser.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.CSS_SELECTOR, "tr")[1:]
    for row in rows:
        cells = [c.get_attribute("textContent") for c in row.find_elements(By.TAG_NAME, "td")]
        assert float(cells[3].rstrip("%")) >= float(cells[2].split("%")[0]) - 1e-9, cells
    # The summary's sentence sets code as code, not as Markdown's backticks.
    assert "`" not in browser.find_element(By.TAG_NAME, "body").text
    assert "<code>base.yaml</code>" in browser.page_source
    ticks_inside_charts(browser)
    no_new_errors(browser)
