"""What an index build can be told: :class:`IndexOptions`, shared by ``dsclean index``, :func:`build_index`,
:func:`~dsclean.index.folder.index_folder` and ``IndexedDataset.from_folder``.

Kept apart from the build (no pyarrow here), so the CLI and the Dataset can name it without loading the stage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from ..splits import SPLIT_NAMES

#: the file rules of ``--files``: dsclean's (media it can check; hidden and AppleDouble files skipped)
#: or torchvision ImageFolder's (IMG_EXTENSIONS, hidden files included, symlinks followed)
FILE_RULES = ("dsclean", "imagefolder")


@dataclass(frozen=True)
class IndexOptions:
    """Everything ``dsclean index`` can be told about building an index. The defaults are the CLI's.

    Each field is one option of :func:`dsclean.index.build.build_index` (see there for what it does);
    the functions taking an ``IndexOptions`` also take its fields as keyword arguments.
    """

    format: str | None = None  # "arrow" / "npy" (default: from the output name, else arrow)
    labels_csv: str | None = None  # --labels: labels from a CSV with columns path,label
    no_labels: bool = False  # --no-labels: every label is -1
    scan_results: str | Sequence[str] | None = None  # one results file, or every part's of a job array
    exclude: Sequence[str] = ()  # folders under the root to leave out
    progress: bool = False  # progress on stderr (the CLI)
    large_path_bytes: int | None = None  # path bytes past which offsets are 64-bit (default 2 GiB; for tests)
    check: bool = True  # False (--no-check): files the scan did not cover are confirmed by magic bytes only
    jobs: int = 0  # processes checking files the scan did not cover; 0 = usable cores
    files: str = "dsclean"  # the file rule: one of FILE_RULES
    symlinks: str | None = None  # none / inside / all (default: none; all for the imagefolder rule)
    state_dir: str | None = None  # where the root's state folder is (default: $DSCLEAN_STATE_DIR, per user)
    allow_inside_root: bool = False  # accept an output or state folder inside the root
    dedup: bool = False  # leave out exact duplicates (same content hash), keeping the first in index order
    root_moved: bool = False  # accept scan results that record another root
    facts: bool = False  # copy the scan's facts columns into the index (arrow only)
    include_warn: Sequence[str] = ()  # reasons of warnings left out by default, to ship anyway
    exclude_warn: Sequence[str] = ()  # reasons of warnings shipped by default, to leave out
    loaders: Sequence[str] = ()  # loader profiles training will use; empty: pillow (from_folder: its loader_profile)
    split_names: Sequence[str] = SPLIT_NAMES  # a root whose folders all have such names is refused (dsclean.splits)
    classes: Sequence[str] | None = None  # the class list (sorted names), e.g. a split set's; None: ROOT's folders


#: the names of :class:`IndexOptions`' fields (the keyword arguments that stand for them)
OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(IndexOptions))


def with_overrides(options: IndexOptions, overrides: dict[str, Any], where: str) -> IndexOptions:
    """``options`` with the fields a caller gave as keyword arguments of ``where`` (a function's name)."""
    unknown = sorted(set(overrides) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    return dataclasses.replace(options, **overrides) if overrides else options
