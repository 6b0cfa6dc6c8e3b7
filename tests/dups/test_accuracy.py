"""Accuracy on real photographs shipped inside installed packages (scikit-image, matplotlib).

Every source picture gets eight edited copies (resized twice, recompressed, PNG->JPEG,
cropped twice, brightened, darkened); sources include quadrant tiles of textures
(brick, grass, gravel) and busy photos: distinct scenes with the same statistics.
"""

from __future__ import annotations

import pytest
from support import realphotos

from dsclean.dups.finder import DupsOptions, find_duplicates

pytestmark = pytest.mark.skipif(not realphotos.available(), reason="scikit-image's bundled images are not installed")


def test_edited_copies_are_found_and_distinct_scenes_never_grouped(tmp_path):
    truth = realphotos.write_set(tmp_path, max_side=320)  # smaller than the originals: a faster test
    result = find_duplicates([str(tmp_path / "train"), str(tmp_path / "val")], DupsOptions(jobs=2))
    groups = [[(m["root"], m["path"]) for m in rec["members"]] for rec in result.records()]
    s = realphotos.score(groups, truth)
    assert s["sources"] >= 30 and s["copies"] >= 240
    assert s["false_groups"] == 0, s
    assert s["recall"] >= 0.99, s  # without the second signal 97.3%: resize_odd and crop_side copies missed
    assert result.summary.leaking_groups >= s["sources"] - 2  # crop and brighten copies sit in val
