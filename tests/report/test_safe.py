"""Hostile text is escaped, embedded JSON cannot close its script tag, machine paths are scrubbed."""

from __future__ import annotations

import json
import os

from dsclean.report.safe import Scrubber, display, esc, script_json


def test_esc_turns_markup_into_text():
    assert esc("<img src=x onerror=alert(1)>.jpg") == "&lt;img src=x onerror=alert(1)&gt;.jpg"
    assert esc('"><svg onload=alert(2)>.png') == "&quot;&gt;&lt;svg onload=alert(2)&gt;.png"
    assert esc("a'b&c") == "a&#x27;b&amp;c"


def test_display_makes_bytes_and_controls_visible():
    assert display(os.fsdecode(b"caf\xe9.jpg")) == "caf\ufffd.jpg"  # undecodable byte -> replacement char
    assert display("new\nline\t.jpg") == "new\\nline\\t.jpg"
    assert display("evil\u202egpj.exe") == "evil\\u202egpj.exe"  # right-to-left override shown, not obeyed


def test_script_json_cannot_end_the_script_element():
    payload = script_json({"rows": [["</script><script>alert(1)</script>", "<!--", "\u2028"]]})
    assert "</script" not in payload.lower() and "<!--" not in payload and "\u2028" not in payload
    assert json.loads(payload) == {"rows": [["</script><script>alert(1)</script>", "<!--", "\u2028"]]}


def test_scrubber_names_known_folders_and_cuts_other_absolute_paths(tmp_path):
    root = str(tmp_path / "data")
    s = Scrubber({root: "ROOT", str(tmp_path / "q"): "QUARANTINE"})
    assert s(f"cannot open {root}/cats/x.jpg") == "cannot open ROOT/cats/x.jpg"
    assert s(f"moved to {tmp_path}/q/cats/x.jpg") == "moved to QUARANTINE/cats/x.jpg"
    assert s(f"{root}2/x.jpg") != "ROOT2/x.jpg"  # a sibling sharing the prefix is not the root
    assert s("decoder said: /usr/lib/x86_64-linux-gnu/libjpeg.so.8: oops") == "decoder said: …/libjpeg.so.8: oops"
    assert s(os.path.expanduser("~") + "/secret/plan.jpg").startswith("~/")
    # not paths: fractions, ratios, words with slashes
    assert s("decoded at 1/8 scale, and/or RIFF/RF64") == "decoded at 1/8 scale, and/or RIFF/RF64"
    assert str(tmp_path) not in s(f"{tmp_path}/elsewhere/file.png")


def test_scrubber_keeps_everything_when_asked(tmp_path):
    s = Scrubber({str(tmp_path): "ROOT"}, keep=True)
    assert s(f"{tmp_path}/a.jpg") == f"{tmp_path}/a.jpg"
    assert s.command(["/usr/bin/dsclean", "scan", str(tmp_path)]) == f"/usr/bin/dsclean scan {tmp_path}"


def test_scrubbed_command_line(tmp_path):
    s = Scrubber({str(tmp_path / "data"): "ROOT"})
    cmd = s.command(
        ["/opt/venv/bin/dsclean", "scan", str(tmp_path / "data"), "--quarantine", "bad dir", "--html", "r.html"]
    )
    assert cmd == "dsclean scan ROOT --quarantine 'bad dir' --html r.html"
