"""Report wording a user understands: labelled check options, transparent images as the model sees them."""

from __future__ import annotations

import io
import re

import numpy as np
from PIL import Image
from support import synth
from support.files import write

from dsclean.report.build import ReportOptions, write_report
from dsclean.report.render import check_option_rows
from dsclean.report.thumbs import ALPHA_NOTE, ThumbLimits, render
from dsclean.scanning.worker import default_memory_ceiling


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def test_check_options_are_labelled_and_show_the_ceiling_in_force(tmp_path):
    from dsclean.cli import main

    root = tmp_path / "data"
    write(root, "a/ok.jpg", synth.jpeg(16, 16))
    write(root, "a/cut.jpg", synth.truncate(synth.jpeg(64, 64), 0.5))
    assert main(["scan", str(root), "--dry-run", "--quiet", "--jobs", "1", "--report", str(tmp_path / "r")]) == 0
    write_report(str(tmp_path / "r"), str(tmp_path / "report.html"), ReportOptions(thumbnails=False))
    html = (tmp_path / "report.html").read_text()
    options = html[html.index("<h3>Check options</h3>") :]
    options = options[: options.index("</table>")]
    assert "max_memory=0" not in options and "checker=" not in options
    assert re.search(r"<th>checker version</th><td>\d+ ", options)
    assert (
        f"<th>memory ceiling per check</th><td>{_gib(default_memory_ceiling())} (default: a share of RAM per "
        "core on this machine"
    ) in options
    assert "<th>time limit per file</th>" in options and "<th>pixel limit</th><td>89,478,485 pixels" in options


def test_an_explicit_or_no_ceiling_is_said_as_it_is():
    rows = dict(check_option_rows({"max_memory": 2 << 30, "timeout": 0, "lenient": True}))
    assert rows == {
        "memory ceiling per check": "2.0 GiB (--max-memory: a file past it is bad/too_large)",
        "time limit per file": "none (--timeout 0)",
        "recoverable decoder warnings": "warn (--lenient)",
    }
    assert dict(check_option_rows({"max_memory": -1}))["memory ceiling per check"] == "none (--max-memory none)"


def _thumb(tmp_path, name: str, im: Image.Image):
    buf = io.BytesIO()
    im.save(buf, "PNG")
    path = write(tmp_path, name, buf.getvalue())
    result = render(str(path), "image", False, ThumbLimits(size=64))
    assert result.mime == "image/jpeg", result.note
    return Image.open(io.BytesIO(result.data)).convert("RGB"), result


def _halves(shown: np.ndarray, width: int):
    return shown[:, :width], shown[:, -width:]


def _checkerboard(region: np.ndarray) -> bool:
    """Two greys alternating (the board), not one flat colour."""
    grey = region.mean(axis=-1)
    return grey.max() - grey.min() > 30 and np.abs(region[..., 0].astype(int) - region[..., 1]).max() < 30


def test_rgba_is_drawn_on_a_checkerboard_and_as_convert_rgb_gives_it(tmp_path):
    a = np.zeros((64, 64, 4), np.uint8)
    a[:, :32] = (200, 30, 30, 255)  # left: opaque red
    a[:, 32:] = (0, 200, 0, 0)  # right: fully transparent, green underneath (the model sees green)
    shown, result = _thumb(tmp_path, "logo.png", Image.fromarray(a, "RGBA"))
    assert result.width == 64 * 2 + 4 and result.note == ALPHA_NOTE
    pixels = np.asarray(shown).astype(int)
    left, right = _halves(pixels, 64)
    assert _checkerboard(left[:, 40:60])  # the transparent half: the board, not white
    assert (left[:, 4:28, 0] > 150).all() and (left[:, 4:28, 1] < 80).all()  # the opaque half: red
    green = right[:, 40:60]
    assert (green[..., 1] > 150).all() and (green[..., 0] < 60).all()  # what convert("RGB") hands the model
    assert np.array_equal(np.asarray(Image.fromarray(a, "RGBA").convert("RGB"))[0, 40], [0, 200, 0])


def test_palette_transparency_is_shown_both_ways(tmp_path):
    im = Image.new("P", (64, 64), 1)
    im.putpalette([255, 255, 255, 0, 0, 255] + [0] * 762)  # index 1: blue, declared transparent
    im.paste(0, (0, 0, 32, 64))  # left half: index 0 (white, opaque)
    im.info["transparency"] = 1
    shown, result = _thumb(tmp_path, "icon.png", im)
    assert result.note == ALPHA_NOTE
    pixels = np.asarray(shown).astype(int)
    left, right = _halves(pixels, 64)
    assert _checkerboard(left[:, 40:60])
    assert (right[:, 40:60, 2] > 180).all() and (right[:, 40:60, 0] < 70).all()  # the model sees blue


def test_an_opaque_image_and_an_alpha_that_hides_nothing_get_one_picture(tmp_path):
    shown, result = _thumb(tmp_path, "rgb.png", Image.new("RGB", (64, 64), (10, 120, 200)))
    assert result.width == 64 and ALPHA_NOTE not in result.note
    shown, result = _thumb(tmp_path, "opaque.png", Image.new("RGBA", (64, 64), (10, 120, 200, 255)))
    assert result.width == 64 and ALPHA_NOTE not in result.note
