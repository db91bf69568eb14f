"""report.html opened in a real browser: headless Chromium (scripts/install_browser.sh) loads the
page, every image in it decodes to its natural size, and a screenshot of the page is taken.

Skipped where Chromium or its driver is missing, unless MPIOPT_REQUIRE_BROWSER=1 (CI sets it)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mpiopt.report import write_report

FIXTURE = Path(__file__).parent / "fixtures" / "report_run"


def browser():
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        if os.environ.get("MPIOPT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{' and '.join(missing)} not installed: run scripts/install_browser.sh")
        pytest.skip(f"{' and '.join(missing)} not installed (scripts/install_browser.sh)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,900"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def test_report_opens_in_chromium_with_every_image_loaded(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    page = write_report(run)
    driver = browser()
    try:
        driver.get(page.as_uri())
        assert driver.title == "mpiopt report: report-run"
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
        assert [alt for alt, *_ in images] == ["Optimization history", "Parameter importance",
                                               "Parallel coordinates", "Slices", "Learning curves", "Group timeline"]
        for alt, complete, width, height in images:
            assert complete and width >= 400 and height >= 100, (alt, width, height)
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        rows = driver.execute_script("return document.querySelectorAll('table.top tbody tr').length")
        assert rows == 10
        # on a phone's width the trials' table scrolls in its box; the page itself does not
        driver.set_window_size(500, 900)
        wide, shown = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert wide <= shown, (wide, shown)
        table, box = driver.execute_script("const t = document.querySelector('table.top'); "
                                           "return [t.scrollWidth, t.parentElement.clientWidth]")
        assert table > box, (table, box)  # the fixture's table is wider than a phone: it is the box that scrolls
    finally:
        driver.quit()
