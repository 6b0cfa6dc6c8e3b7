"""dsclean report's "Failed in training" section: counts by error and kind, examples, the re-check's conclusion;
hostile strings escaped; the page in real Chromium."""

from __future__ import annotations

import html

import pytest
from support.browser import chromium, unavailable
from support.failurelogs import log_failures
from support.fixtures.cli import run_cli

from dsclean.fromlog import FromLogOptions, quarantine_from_log
from dsclean.report.build import ReportOptions, write_report
from dsclean.scanning.scanner import ScanOptions, scan

HOSTILE = "<script>alert('x')</script> & <img src=x onerror=alert(1)>"


@pytest.fixture
def reported(tree, tmp_path):
    root, _ = tree
    scan(str(root), ScanOptions(jobs=1, dry_run=True))
    log = tmp_path / "runs" / "failures.jsonl"
    log_failures(
        log,
        [
            (
                0,
                {
                    "kind": "exception",
                    "path": "cats/cut.jpg",
                    "root": str(root),
                    "error": "OSError",
                    "message": "image file is truncated",
                },
            ),
            (
                1,
                {
                    "kind": "exception",
                    "path": "cats/cut.jpg",
                    "root": str(root),
                    "error": "OSError",
                    "message": "image file is truncated",
                },
            ),
            (
                1,
                {
                    "kind": "exception",
                    "path": "cats/c3.jpg",
                    "root": str(root),
                    "error": "ValueError",
                    "message": HOSTILE,
                },
            ),
            (
                None,
                {
                    "kind": "worker_died",
                    "path": "dogs/d0.png",
                    "root": str(root),
                    "error": "SIGKILL",
                    "message": "killed by signal: Killed",
                },
            ),
        ],
    )
    return root, log


def test_the_section_counts_errors_and_shows_conclusions(reported, tmp_path):
    root, log = reported
    out = tmp_path / "r.html"
    write_report(str(root), str(out), ReportOptions(failures=(str(log),), thumbnails=False))
    page = out.read_text()
    assert 'id="training"' in page and "Failed in training" in page
    assert '<td>OSError</td><td>exception</td><td class="n">2</td>' in page
    assert '<td>SIGKILL</td><td>worker_died</td><td class="n">1</td>' in page
    assert page.count("not re-checked yet") == 3 + 1  # rows + the conclusions table, before quarantine --from-log
    assert HOSTILE not in page and html.escape(HOSTILE, quote=True) in page
    quarantine_from_log([str(log)], FromLogOptions(quarantine=str(tmp_path / "bad")))
    write_report(str(root), str(out), ReportOptions(failures=(str(log),), thumbnails=False))
    page = out.read_text()
    assert "bad: quarantined (truncated)" in page and page.count("checks ok: left in place") == 2 + 1  # rows + table


def test_without_logs_the_recorded_rechecks_make_the_section(reported, tmp_path):
    root, log = reported
    out = tmp_path / "r.html"
    cli = run_cli("report", str(root), "-o", str(out), "--no-thumbnails", "-q")
    assert cli.returncode == 0 and 'id="training"' not in out.read_text()  # nothing logged, nothing recorded
    quarantine_from_log([str(log)], FromLogOptions(dry_run=True))
    cli = run_cli("report", str(root), "-o", str(out), "--no-thumbnails", "-q")
    assert cli.returncode == 0, cli.stderr
    page = out.read_text()
    assert 'id="training"' in page and "bad: not moved (dry run) (truncated)" in page
    cli = run_cli("report", str(root), "-o", str(out), "--no-thumbnails", "-q", "--failures", str(log))
    assert cli.returncode == 0 and "SIGKILL" in out.read_text()


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_the_section_in_chromium(reported, tmp_path):
    root, log = reported
    out = tmp_path / "r.html"
    write_report(str(root), str(out), ReportOptions(failures=(str(log),), thumbnails=False))
    with chromium() as context:
        page = context.new_page()
        errors, dialogs = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(out.as_uri(), wait_until="load")
        assert page.locator("section#training").count() == 1
        assert page.locator('nav.toc a[href="#training"]').count() == 1
        cells = page.eval_on_selector_all("table.training tbody tr", "trs => trs.map(tr => tr.children[3].textContent)")
        assert HOSTILE in cells  # shown as text
        assert page.locator("section#training script, section#training img").count() == 0
        assert not errors and not dialogs


def test_a_missing_failure_log_is_a_clear_error(reported, tmp_path):
    root, _ = reported
    cli = run_cli("report", str(root), "-o", str(tmp_path / "r.html"), "--failures", str(tmp_path / "nope.jsonl"))
    assert cli.returncode == 2 and "no failure log" in cli.stderr and "Traceback" not in cli.stderr
    assert not (tmp_path / "r.html").exists()
