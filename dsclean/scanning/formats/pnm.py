"""Netpbm (PPM / PGM) checker: torchvision's ``ImageFolder`` takes these, so dsclean decodes them too.

The formats have no checksums; what can go wrong is a header that lies or a file
cut short. Pillow parses the header (P1-P6, width, height, maxval) and its decoder
fails on missing pixel bytes ("image file is truncated"), so a full ``load()`` is
the check. The pixel limit (``--max-pixels``) is applied from the header, before decoding.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image

from ... import reasons as R
from ..verdict import Verdict


def check_pnm(data, v: Verdict, opts) -> None:
    """Open with Pillow (the pixel limit from the header first), then decode every pixel."""
    Image.MAX_IMAGE_PIXELS = opts.max_pixels or None  # as the other Pillow checks do: one value per run
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=["PPM"]) as im:
                v.width, v.height, v.mode, v.frames = im.width, im.height, im.mode, 1
                if im.width <= 0 or im.height <= 0:
                    v.mark(R.BAD, R.EMPTY, f"image is {im.width}x{im.height} pixels")
                    return
                im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        v.mark(R.BAD, R.DECOMPRESSION_BOMB, str(exc))
    except Exception as exc:  # Pillow raises OSError/ValueError/SyntaxError on a damaged file
        reason = R.TRUNCATED if "truncated" in str(exc).lower() else R.CORRUPT
        v.mark(R.BAD, reason, f"{type(exc).__name__}: {exc}")


CHECKERS = {"ppm": check_pnm}
