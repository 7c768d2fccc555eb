#!/usr/bin/python3
"""Screenshots of attnlab's reports as a user sees them, hovering where the interaction is, taken in
Debian's headless Chromium (chromium, chromium-driver and python3-selenium, which scripts/setup.sh
installs). docs/images/report_*.png are made with it.

Usage: /usr/bin/python3 scripts/report_screenshots.py [--run RUN] [--seq2seq RUN] [--vit RUN]
                                                      [--comparison FOLDER] [--out docs/images]
RUN is a run folder (an analysed one shows the analysis tables too), FOLDER a comparison's folder; each
report.html is taken as it is (`attnlab report RUN` rewrites a run's).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By


def browser(scratch):
    """Chromium, with $TMPDIR at `scratch`: it leaves a folder of its own there after every run."""
    options = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1100",
              "--hide-scrollbars"]:
        options.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver", env=dict(os.environ, TMPDIR=scratch)), options=options)


def hover_at(driver, element, fx, fy, scroll=True):
    if scroll:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    w, h = driver.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", element)
    ActionChains(driver).move_to_element_with_offset(element, int(w * (fx - 0.5)), int(h * (fy - 0.5))).perform()
    time.sleep(0.1)


def shot(driver, element, path, top=0, hover=None):
    """The viewport with the element `top` px below its top edge, after hovering (element, fx, fy) there:
    the tooltip is fixed to the viewport, so the mouse moves once the page is where it is shot."""
    driver.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - arguments[1])", element, top)
    time.sleep(0.1)
    if hover:
        hover_at(driver, *hover, scroll=False)
    driver.save_screenshot(path)
    print("wrote", path)


def open_report(driver, folder):
    path = os.path.abspath(os.path.join(folder, "report.html"))
    if not os.path.exists(path):
        sys.exit(f"{path} does not exist")
    driver.get("file://" + path)


def run_shots(driver, run, out):
    open_report(driver, run)
    grid = driver.find_elements(By.CSS_SELECTOR, ".attn")[0]
    layers = len(grid.find_elements(By.CSS_SELECTOR, ".tokenview"))
    view = grid.find_elements(By.CSS_SELECTOR, ".tokenview")[layers - 1]
    tokens = view.find_elements(By.CSS_SELECTOR, ".toks .tok")
    hover_at(driver, tokens[len(tokens) * 3 // 4], 0.5, 0.5)  # a token of the second copy: where the last layer looks from it
    shot(driver, grid.find_elements(By.CSS_SELECTOR, ".heads")[layers - 1], os.path.join(out, "report_tokens.png"), 40)
    # The last layer's most peaked head, at a query three quarters in and the key it weighs most.
    pattern = np.load(os.path.join(run, grid.get_attribute("data-file")))[layers - 1]
    head = int(np.argmax(pattern.max(axis=2).mean(axis=1)))
    query = pattern.shape[1] * 3 // 4
    key = int(np.argmax(pattern[head, query]))
    panel = grid.find_elements(By.CSS_SELECTOR, f"svg.heatmap[data-layer='{layers - 1}'] image.cells")[head]
    cell = ((key + 0.5) / pattern.shape[2], (query + 0.5) / pattern.shape[1])
    shot(driver, grid.find_elements(By.CSS_SELECTOR, ".heads")[layers - 1], os.path.join(out, "report_patterns.png"), 40, (panel, *cell))
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", panel)
    canvas = driver.find_element(By.CSS_SELECTOR, "#attnlab-overlay canvas")
    time.sleep(0.1)
    driver.save_screenshot(os.path.join(out, "report_enlarged.png"))
    print("wrote", os.path.join(out, "report_enlarged.png"))
    driver.execute_script("document.getElementById('attnlab-overlay').remove()")
    tables = driver.find_elements(By.CSS_SELECTOR, "figure.analysis svg.table")
    if tables:
        cells = tables[0].find_elements(By.CSS_SELECTOR, "rect")
        shot(driver, tables[0].find_element(By.XPATH, ".."), os.path.join(out, "report_analysis.png"), 60, (cells[len(cells) - 2], 0.5, 0.5))


def seq2seq_shots(driver, run, out):
    open_report(driver, run)
    cross = [g for g in driver.find_elements(By.CSS_SELECTOR, ".attn") if g.get_attribute("data-file").endswith("_cross.npy")][0]
    panel = cross.find_elements(By.CSS_SELECTOR, "svg.heatmap image.cells")[-1]
    shot(driver, cross, os.path.join(out, "report_cross.png"), 60, (panel, 0.3, 0.7))


def vit_shots(driver, run, out):
    open_report(driver, run)
    views = driver.find_elements(By.CSS_SELECTOR, ".imageview")
    pick = views[-1].find_element(By.CSS_SELECTOR, "canvas.pick")
    shot(driver, views[-1], os.path.join(out, "report_vit.png"), 300, (pick, 0.45, 0.35))


def comparison_shots(driver, folder, out):
    open_report(driver, folder)
    driver.find_element(By.CSS_SELECTOR, "form.series input[name='curves'][value='seeds']").click()
    shot(driver, driver.find_element(By.CSS_SELECTOR, "form.series"), os.path.join(out, "report_comparison.png"), 10)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run")
    parser.add_argument("--seq2seq")
    parser.add_argument("--vit")
    parser.add_argument("--comparison")
    parser.add_argument("--out", default="docs/images")
    a = parser.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        driver = browser(scratch)
        try:
            if a.run:
                run_shots(driver, a.run, a.out)
            if a.seq2seq:
                seq2seq_shots(driver, a.seq2seq, a.out)
            if a.vit:
                vit_shots(driver, a.vit, a.out)
            if a.comparison:
                comparison_shots(driver, a.comparison, a.out)
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
