"""not_media names what the content is, with the fix (dsclean.content), from real bytes."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import tarfile
import zipfile

import pytest
from support import synth
from support.files import write

from dsclean.content import describe_content, describe_symlink_target

LFS = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
)
S3 = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message>'
    b"<RequestId>4442587FB7D0A2F9</RequestId></Error>"
)


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.jpg", synth.jpeg(16, 16))
    return buf.getvalue()


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = synth.jpeg(16, 16)
        info = tarfile.TarInfo("a.jpg")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    "data, expected",
    [
        (LFS, "a Git LFS pointer (of a 12,345-byte file) — the content was never fetched: run git lfs pull"),
        (S3, "an XML error body (AccessDenied: Access Denied)"),
        (
            b"<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>nginx</body></html>",
            "an HTML page titled '403 Forbidden'",
        ),
        (
            json.dumps({"error": {"code": 404, "message": "No such object: bucket/a.jpg"}}).encode(),
            "a JSON error body (No such object: bucket/a.jpg)",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n\r\n" + synth.jpeg(8, 8),
            "an HTTP response with its headers (status 200 OK)",
        ),
        (gzip.compress(synth.jpeg(16, 16)), "gzip-compressed data"),
        (_zip(), "a zip archive"),
        (bz2.compress(b"x" * 100), "bzip2-compressed data"),
        (lzma.compress(b"x" * 100), "xz-compressed data"),
        (_tar(), "a tar archive"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "a PDF document"),
        (b"\x00" * 4096, "all zero bytes"),
        (b"hello, this is not a picture\n", "plain text ('hello, this is not a picture')"),
    ],
)
def test_describe_content_names_what_the_bytes_are(data, expected):
    said = describe_content(data[:4096])
    assert said is not None and said.startswith(expected), said
    assert " — " in said  # every description carries its fix


def test_a_real_executable_and_random_bytes():
    import sys

    with open(sys.executable, "rb") as f:
        assert describe_content(f.read(4096)).startswith("an ELF executable")
    assert describe_content(bytes(range(256)) * 16) is None  # not recognisable


def test_a_git_annex_symlink_target():
    target = "../../.git/annex/objects/Wk/3F/SHA256E-s20480--e3b0c44298fc1c149afbf4c8996fb924.jpg/SHA256E-s20480--e3b0c44298fc1c149afbf4c8996fb924.jpg"
    assert describe_symlink_target(target) == (
        "a git-annex pointer (of a 20,480-byte file) — the content was never fetched: run git annex get"
    )
    assert describe_symlink_target("../other/a.jpg") is None
    # an unlocked annexed file on a file system without symlinks holds the target as its content
    assert describe_content(b"/annex/objects/SHA256E-s20480--e3b0c442.jpg\n").startswith("a git-annex pointer")


def test_scan_names_an_lfs_pointer_html_and_an_annex_link(check, tmp_path):
    v = check("a/pointer.jpg", LFS)
    assert (v.status, v.reason) == ("bad", "not_media")
    assert v.detail == (
        "content is not jpeg: it is a Git LFS pointer (of a 12,345-byte file) — the content was "
        "never fetched: run git lfs pull"
    )
    v = check("a/page.png", b"<html><head><title>Just a moment...</title></head></html>")
    assert v.detail.startswith("content is not png: it is an HTML page titled 'Just a moment...' — the server sent")
    v = check("a/odd.png", bytes(range(1, 200)))
    assert v.detail.startswith("content is not png: starts with ")  # nothing recognised: today's wording
    from dsclean.scanning.check import CheckOptions, check_file

    os.makedirs(tmp_path / "b", exist_ok=True)
    os.symlink("../.git/annex/objects/Wk/3F/SHA256E-s99--abc.jpg/SHA256E-s99--abc.jpg", tmp_path / "b" / "x.jpg")
    v = check_file(str(tmp_path), "b/x.jpg", CheckOptions())
    assert (v.status, v.reason) == ("bad", "unreadable")
    assert (
        v.detail == "broken symlink: it is a git-annex pointer (of a 99-byte file) — the content was never "
        "fetched: run git annex get"
    )


def test_a_whole_scan_reports_the_description(tmp_path):
    from dsclean import iter_verdicts
    from dsclean.cli import main

    root = tmp_path / "data"
    write(root, "a/ok.jpg", synth.jpeg(16, 16))
    write(root, "a/lfs.jpg", LFS)
    write(root, "a/s3.jpg", S3)
    assert main(["scan", str(root), "--dry-run", "--quiet", "--jobs", "1", "--report", str(tmp_path / "r")]) == 0
    detail = {v.path: v.detail for v in iter_verdicts(str(tmp_path / "r"), status="bad")}
    assert detail["a/lfs.jpg"].endswith("run git lfs pull")
    assert detail["a/s3.jpg"].startswith("content is not jpeg: it is an XML error body (AccessDenied: Access Denied)")
