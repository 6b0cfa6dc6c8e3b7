"""The report in a real browser: Debian's headless Chromium, driven by Playwright.

The page must load offline with no console error, request nothing but itself
and data: URIs, show every section, decode every thumbnail, filter, sort and
page its table, and show hostile file names as text without running anything.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from support.browser import chromium, unavailable
from support.reporttree import HOSTILE_JPG, HOSTILE_PNG, facts_results
from support.resultsgen import synthetic_results

from dsclean.report.build import ReportOptions, write_report
from dsclean.report.render import SECTIONS

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


@pytest.fixture(scope="module")
def browser():
    with chromium() as context:
        yield context


@pytest.fixture(scope="module")
def report(scanned, tmp_path_factory):
    """The richest report: real scan with hostile names, facts columns, a dups groups file."""
    base = tmp_path_factory.mktemp("browser")
    results = facts_results(scanned, base / "results")
    groups = base / "groups.jsonl"
    member = {"root": str(scanned.root), "path": "cats/copy_a.jpg"}
    groups.write_text(
        json.dumps(
            {
                "group": 0,
                "kind": "exact",
                "splits": ["train", "val"],
                "members": [member, {**member, "path": "dogs/copy_b.jpg"}],
            }
        )
        + "\n"
    )
    out = base / "report.html"
    write_report(str(results), str(out), ReportOptions(dups=str(groups), jobs=2))
    return out


class Visit:
    """One page load, with everything the page said and asked for."""

    def __init__(self, context, path):
        self.url = path.as_uri()
        self.page = context.new_page()
        self.console, self.errors, self.requests, self.dialogs = [], [], [], []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(self.url, wait_until="load")

    def rows(self) -> list[list[str]]:
        return self.page.eval_on_selector_all(
            "#problems-body tr", "trs => trs.map(tr => Array.from(tr.children).map(td => td.textContent))"
        )

    def rows_when(self, done, timeout: float = 10.0) -> list[list[str]]:
        """The table's rows once ``done(rows)`` holds (the filter is debounced). Polled from Python:
        the page's Content Security Policy forbids the string evaluation wait_for_function uses."""
        import time

        end = time.monotonic() + timeout
        while not done(rows := self.rows()) and time.monotonic() < end:
            self.page.wait_for_timeout(50)
        return rows

    def close(self):
        self.page.close()


@pytest.fixture
def visit(browser, report):
    v = Visit(browser, report)
    yield v
    v.close()


def test_loads_offline_with_no_error_and_no_request_but_itself(visit):
    assert visit.errors == [] and [m for m in visit.console if m[0] in ("error", "warning")] == []
    assert visit.requests and all(u == visit.url or u.startswith("data:") for u in visit.requests), visit.requests
    assert (
        visit.page.evaluate("performance.getEntriesByType('resource').filter(e => !e.name.startsWith('data:')).length")
        == 0
    )


def test_every_section_is_there(visit):
    for anchor in SECTIONS:
        assert visit.page.locator(f"section#{anchor}").count() == 1, anchor
    toc = visit.page.eval_on_selector_all("nav.toc a", "as => as.map(a => a.getAttribute('href'))")
    for href in toc:  # every table-of-contents link leads somewhere
        assert visit.page.locator(href).count() == 1, href


def test_every_thumbnail_decodes(visit, report):
    # Thumbnails load lazily as they scroll into view; ask for all of them, and wait until each has decoded.
    images = visit.page.evaluate("""async () => {
        const imgs = Array.from(document.images);
        imgs.forEach(i => { i.loading = "eager"; });
        await Promise.all(imgs.map(i => i.decode().catch(() => null)));
        return imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight]);
    }""")
    assert len(images) == report.read_text(encoding="utf-8").count('<img src="data:image/') >= 20
    assert all(done and w > 0 and h > 0 for done, w, h in images), images


def test_hostile_names_render_as_text_and_nothing_runs(visit):
    page = visit.page
    for name in (HOSTILE_JPG, HOSTILE_PNG):
        assert page.locator("div.path", has_text=name).count() >= 1, name
    assert page.locator('img[src="x"]').count() == 0 and page.locator("svg[onload]").count() == 0
    page.fill("#f-q", "onerror")
    rows = visit.rows_when(lambda rows: len(rows) == 1)
    assert rows[0][0] == HOSTILE_JPG  # through the table's own rendering too
    page.wait_for_timeout(200)
    assert visit.dialogs == [] and visit.errors == []


def test_the_filter_narrows_the_table_and_sort_orders_it(visit):
    page = visit.page
    everything = visit.rows()
    assert len(everything) == 13
    page.fill("#f-q", "cut")
    narrowed = visit.rows_when(lambda rows: len(rows) < 13)
    assert 0 < len(narrowed) < len(everything) and all("cut" in r[0] for r in narrowed)
    page.fill("#f-q", "")
    page.select_option("#f-reason", "truncated")
    rows = visit.rows_when(lambda rows: len(rows) == 7)
    assert {r[2] for r in rows} == {"truncated"}
    page.click("#f-clear")
    page.click('#problems th button[data-col="path"]')
    paths = [r[0] for r in visit.rows()]
    assert paths == sorted(paths)
    page.click('#problems th button[data-col="path"]')
    assert [r[0] for r in visit.rows()] == sorted(paths, reverse=True)


def test_show_all_button_filters_the_table_to_its_reason(browser, scanned, tmp_path):
    out = tmp_path / "r.html"
    from dsclean.report.collect import Caps

    write_report(str(scanned.root), str(out), ReportOptions(caps=Caps(per_reason=2), thumbnails=False))
    v = Visit(browser, out)
    try:
        v.page.click('button[data-show-reason="truncated"]')
        rows = v.rows()
        assert len(rows) == 7 and {r[2] for r in rows} == {"truncated"}
    finally:
        v.close()


def test_large_table_pages(browser, tmp_path):
    results = tmp_path / "results" / "scan_results.parquet"
    synthetic_results(str(results), str(tmp_path / "data"), rows=5_000, problems=321, classes=80)
    out = tmp_path / "r.html"
    write_report(str(results), str(out), ReportOptions(thumbnails=False))
    v = Visit(browser, out)
    try:
        assert len(v.rows()) == 50 and "1–50 of 321" in v.page.text_content("#problems-info")
        v.page.click("#page-next")
        assert "51–100 of 321" in v.page.text_content("#problems-info")
        first_page_two = v.rows()[0][0]
        v.page.click("#page-prev")
        assert v.rows()[0][0] != first_page_two
        assert v.errors == [] and v.page.locator("section#duplicates").count() == 1
    finally:
        v.close()


def test_screenshot_is_not_blank(visit, tmp_path):
    from PIL import Image

    shot = Image.open(io.BytesIO(visit.page.screenshot(full_page=True))).convert("RGB")
    a = np.asarray(shot).astype(np.int32)
    colours = np.unique((a[..., 0] << 16) | (a[..., 1] << 8) | a[..., 2])
    assert shot.height > 1500  # the whole page, not one screen
    assert a.std() > 20 and len(colours) > 500  # text, charts and photos, not one flat colour
    shot.save(tmp_path / "report.png")


def test_facts_sections_from_a_real_scan(browser, scanned, tmp_path):
    """No columns added afterwards: the scan itself recorded the facts and flags the report shows."""
    out = tmp_path / "facts.html"
    summary = write_report(str(scanned.root), str(out), ReportOptions(jobs=2, state_dir=str(scanned.state)))
    assert summary.results_source.startswith(f"the last scan of {scanned.root}")
    v = Visit(browser, out)
    try:
        assert v.errors == []

        def paths(anchor: str) -> list[str]:
            return v.page.eval_on_selector_all(
                f"xpath=//h3[@id='{anchor}']/following-sibling::div[contains(@class, 'grid')][1]//div[@class='path']",
                "ds => ds.map(d => d.textContent)",
            )

        assert v.page.locator("section#quality").count() == 1
        assert paths("flag-dark") == ["birds/dark.jpg"]  # mean luma 6/255, measured by the scan's decode
        assert "audio/loud.flac" in paths("flag-clipped")  # a tone driven 3x past full scale
        assert paths("outlier-brightness-low")[0] == "birds/dark.jpg"
        assert "audio/tone.wav" not in paths("flag-clipped")
    finally:
        v.close()


def _stat(text: str, label: str) -> str:
    """The value shown above the first label containing ``label`` in the summary's stats (inner text: value
    and label on their own lines)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[next(i for i, line in enumerate(lines) if label in line) - 1]


def test_summary_counts_the_quarantine_by_its_journal_after_restore(browser, tmp_path):
    """`dsclean restore` put the quarantined files back: the report says 0 in quarantine and 2 restored (as
    `dsclean status` does), not the scan summary's "2 moved"; the files are shown from ROOT."""
    from support import synth
    from support.files import write

    from dsclean.cli import main

    root, q = tmp_path / "r", tmp_path / "q"
    for i in range(3):
        write(root, f"a/ok{i}.jpg", synth.jpeg(64, 64, seed=i))
    for i in range(2):
        write(root, f"a/cut{i}.jpg", synth.truncate(synth.jpeg(64, 64, seed=10 + i), 0.5))
    assert main(["scan", str(root), "--quarantine", str(q), "-q"]) == 0
    out = tmp_path / "r.html"
    write_report(str(root), str(out), ReportOptions(jobs=1))
    v = Visit(browser, out)
    assert _stat(v.page.inner_text("#summary"), "quarantine") == "2"
    v.close()
    assert main(["restore", str(q)]) == 0
    assert sorted(p.name for p in (root / "a").iterdir() if p.name.startswith("cut")) == ["cut0.jpg", "cut1.jpg"]
    write_report(str(root), str(out), ReportOptions(jobs=1))
    v = Visit(browser, out)
    try:
        text = v.page.inner_text("#summary")
        assert _stat(text, "quarantine") == "0" and _stat(text, "restored to ROOT") == "2"
        assert "moved to quarantine" not in text
        shown = v.page.eval_on_selector_all("#reasons figure img", "imgs => imgs.length")
        assert shown == 2  # both restored files decode from ROOT: thumbnails, not "file not found"
    finally:
        v.close()


def test_bucket_scan_report_loads_offline_and_its_thumbnails_decode(
    browser, bucket, s3fs_direct, s3_endpoint, aws_env, tmp_path
):
    """A bucket scan's report: thumbnails read from the bucket when it was written, none of it asked of the
    bucket when it is opened (no request but the page itself and data: URIs)."""
    pytest.importorskip("s3fs")
    from support import synth

    from dsclean.storage.scan import BucketScanOptions, scan_bucket

    s3fs_direct.pipe_file(f"{bucket}/d/cut.jpg", synth.truncate(synth.jpeg(96, 64, seed=3), 0.5))
    s3fs_direct.pipe_file(f"{bucket}/d/ok.png", synth.png(40, 30, seed=2))
    url, state = f"s3://{bucket}/d", str(tmp_path / "state")
    scan_bucket(url, BucketScanOptions(storage_options={"endpoint_url": s3_endpoint}, jobs=1, state_dir=state))
    out = tmp_path / "bucket.html"
    s = write_report(url, str(out), ReportOptions(state_dir=state, jobs=1))
    assert s.thumbnails >= 1
    v = Visit(browser, out)
    try:
        assert v.errors == [] and all(u == v.url or u.startswith("data:") for u in v.requests), v.requests
        images = v.page.evaluate("""async () => {
            const imgs = Array.from(document.images);
            imgs.forEach(i => { i.loading = "eager"; });
            await Promise.all(imgs.map(i => i.decode().catch(() => null)));
            return imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight]);
        }""")
        assert [96, 64] in [[w, h] for _, w, h in images]  # the cut JPEG's thumbnail, read from the bucket
        assert all(done and w > 0 and h > 0 for done, w, h in images), images
    finally:
        v.close()
