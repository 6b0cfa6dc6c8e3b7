"""``dsclean pack --from SHARDS -o OUT``: a clean copy of another tool's WebDataset tars, without the
samples of the deny-list. The source shards are only read; each output shard is written to a temp file
and renamed (:func:`dsclean.atomic.atomic_output`), one member in memory at a time.

Every member of a sample that is not denied is copied (name and bytes unchanged, headers normalised:
PAX where a name needs it, fixed owner, mode and time); what the source's structure lost (members after
the point a tar is cut) is reported, not invented.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field

from .. import denylist
from ..atomic import atomic_output
from ..errors import UserError
from ..locations import is_inside, url_state_dir
from ..pack.tarformat import MTIME, TarError
from .detect import detect
from .webdataset import base_plus_ext, iter_members, open_stream


@dataclass
class RepackSummary:
    """What a repack wrote."""

    source: str
    output: str
    shards: int = 0
    members: int = 0
    left_out: int = 0  # members of denied samples
    denied_samples: int = 0
    denylist: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _check_output(output: str, source: str) -> None:
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise UserError(f"{output}: the output must be a new or empty folder")
    if is_inside(os.path.abspath(output), source) or os.path.abspath(output) == os.path.abspath(source):
        raise UserError(f"{output}: the output is inside the source shard folder {source}")


def _denylist_of(ss, denylist_file: str | None, storage_options: dict, tmp: str) -> str:
    """The local path of the deny-list to honour (a ``--denylist`` URL: copied into ``tmp`` first)."""
    from ..storage.urls import is_url

    if denylist_file and is_url(denylist_file):
        from ..storage.fs import Store
        from .run import fetch_denylist

        local = os.path.join(tmp, denylist.FILE)
        if not fetch_denylist(Store(denylist_file, storage_options), local):
            raise UserError(f"{denylist_file}: no such deny-list")
        return local
    if denylist_file and not os.path.lexists(denylist_file):
        raise UserError(f"{denylist_file}: no such deny-list")
    if denylist_file:
        return denylist_file
    if ss.store is not None:
        return os.path.join(url_state_dir(ss.folder), denylist.FILE)
    return denylist.denylist_path(ss.folder)


def repack_shard_set(
    specs: list[str],
    output: str,
    denylist_file: str | None = None,
    as_kind: str | None = None,
    storage_options: dict | None = None,
) -> RepackSummary:
    """Copy the WebDataset tars ``specs`` name into ``output``, leaving out the deny-list's samples (tars in a
    bucket are streamed from it; their deny-list is by default the one their scan wrote beside its results)."""
    ss = detect(specs, as_kind, storage_options)
    if ss is None or ss.kind != "webdataset":
        what = ss.kind if ss else "a folder of files"
        raise UserError(f"{specs[0]}: pack --from copies WebDataset tars; this is {what}")
    _check_output(output, ss.folder)
    with tempfile.TemporaryDirectory(prefix="dsclean-denylist-") as tmp:
        path = _denylist_of(ss, denylist_file, storage_options or {}, tmp)
        dl = denylist.read_denylist(path)
        present = os.path.lexists(path)
    if dl.refused:
        raise UserError(f"{path}: cannot read the deny-list: {dl.refused}")
    denied = dl.keys()
    summary = RepackSummary(ss.folder, output, denylist=(denylist_file or path) if present else None)
    summary.denied_samples = len(denied)
    os.makedirs(output, exist_ok=True)
    for name in ss.missing:
        summary.notes.append(f"{name}: named by the set but not there: not copied")
    for name in ss.names:
        out_name = name[: -len(".gz")] if name.endswith(".tar.gz") else name
        out_name = out_name[: -len(".tgz")] + ".tar" if out_name.endswith(".tgz") else out_name
        final = os.path.join(output, out_name)
        os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
        with ss.open(name) as f, atomic_output(final) as tmp:
            with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tf:
                try:
                    for member, _, data, why in iter_members(open_stream(f, name)):
                        key = base_plus_ext(member)[0]
                        if key is not None and (name, key) in denied:
                            summary.left_out += 1
                            continue
                        if data is None:
                            summary.notes.append(f"{name}: {member}: not copied: {why[1] if why else 'not read'}")
                            continue
                        info = tarfile.TarInfo(member)
                        info.size, info.mtime, info.mode = len(data), MTIME, 0o644
                        tf.addfile(info, io.BytesIO(data))
                        summary.members += 1
                except (TarError, OSError, EOFError, zlib.error) as exc:
                    summary.notes.append(f"{name}: copied up to where it breaks: {exc}")
        summary.shards += 1
    return summary
