"""``dsclean pack --from SHARDS -o OUT``: a clean copy of another tool's WebDataset tars, without the
samples of the deny-list. The source shards are only read; each output shard is written to a temp file
and renamed (:func:`dsclean.atomic.atomic_output`), one member in memory at a time.

Every member of a sample that is not denied is copied (name and bytes unchanged, headers normalised:
PAX where a name needs it, fixed owner, mode and time); what the source's structure lost (members after
the point a tar is cut) is reported, not invented.

To a bucket (``-o s3://...``, :func:`dsclean.pack.remote.pack_to_bucket`) the output folder is a local staging
folder and a ``shard_sink`` (:class:`dsclean.pack.remote.BucketShards`) takes each shard as soon as it is
written: uploaded, then its local copy removed, so staging holds about one shard at a time. A killed copy is
resumed by the same command: the shards the bucket already holds (this copy's, by the sink's journal) are not
written again; ``.repack.json`` in the staging folder records what the copy is of (source, shard names, the
denied samples; hidden: never uploaded): once a shard of it is in the bucket, another source or deny-list is
refused rather than mixed with the old shards.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import denylist
from ..atomic import atomic_output
from ..errors import UserError
from ..locations import REPACK_STATE_FILE, is_inside, url_state_dir
from ..pack.tarformat import MTIME, TarError
from .detect import detect
from .webdataset import base_plus_ext, iter_members, open_stream


class ShardSink(Protocol):
    """Where each finished output shard goes (:class:`dsclean.pack.remote.BucketShards`)."""

    def has(self, name: str) -> bool: ...

    def put(self, path: str, name: str) -> None: ...


@dataclass
class RepackSummary:
    """What a repack wrote."""

    source: str
    output: str
    shards: int = 0
    reused: int = 0  # shards a killed copy already put in the bucket (not written again)
    members: int = 0
    left_out: int = 0  # members of denied samples
    denied_samples: int = 0
    denylist: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _check_output(output: str, source: str, staging: bool = False) -> None:
    """A new or empty folder outside the source (``staging``: a bucket copy's own folder, a killed copy's to resume)."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserError(f"{output}: the output must be a new or empty folder")
    if not staging and os.path.exists(output) and os.listdir(output):
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


def _digest(denied: Any) -> str:
    """One hash of the denied ``(shard, key)`` pairs (order-free): a changed deny-list changes it."""
    h = hashlib.sha256()
    for shard, key in sorted(denied):
        h.update(f"{shard}\0{key}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _resume_record(staging: str, what: dict, uploaded: Any) -> None:
    """Write what this copy is of into its staging folder, or refuse when a killed copy there was of another and
    ``uploaded()`` says some of its shards are in the bucket already (with none there, it starts over). With no
    record and shards there, :func:`dsclean.pack.remote.pack_to_bucket` has refused already (their origin unknown)."""
    path = os.path.join(staging, REPACK_STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            before = json.load(f)
    except FileNotFoundError:
        before = None
    except (OSError, ValueError):
        before = {}  # unreadable: not provably the same copy
    if before is not None and before != what and uploaded():
        changed = [k for k in what if not isinstance(before, dict) or before.get(k) != what[k]] or ["record"]
        raise UserError(
            f"{what['source']}: a killed copy of these shards cannot be resumed: its {', '.join(changed)} differ "
            "from this one's (the deny-list or the shards changed since)"
        )
    if before != what:
        with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(what, f)


def _output_name(name: str) -> str:
    """The copy's name of the shard ``name`` (a ``.tar.gz``/``.tgz`` is written as a plain ``.tar``)."""
    out = name[: -len(".gz")] if name.endswith(".tar.gz") else name
    return out[: -len(".tgz")] + ".tar" if out.endswith(".tgz") else out


def repack_shard_set(
    specs: list[str],
    output: str,
    denylist_file: str | None = None,
    as_kind: str | None = None,
    storage_options: dict | None = None,
    shard_sink: ShardSink | None = None,
) -> RepackSummary:
    """Copy the WebDataset tars ``specs`` name into ``output``, leaving out the deny-list's samples (tars in a
    bucket are streamed from it; their deny-list is by default the one their scan wrote beside its results).
    ``shard_sink``: each finished shard handed to it (uploaded) and removed from ``output`` (a staging folder);
    the shards it already has are not written again."""
    ss = detect(specs, as_kind, storage_options)
    if ss is None or ss.kind != "webdataset":
        what = ss.kind if ss else "a folder of files"
        raise UserError(f"{specs[0]}: pack --from copies WebDataset tars; this is {what}")
    _check_output(output, ss.folder, staging=shard_sink is not None)
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
    if shard_sink is not None:
        sink = shard_sink
        what = {"source": ss.folder, "shards": list(ss.names), "denied": _digest(denied)}
        _resume_record(output, what, lambda: any(sink.has(_output_name(n)) for n in ss.names))
    for name in ss.missing:
        summary.notes.append(f"{name}: named by the set but not there: not copied")
    for name in ss.names:
        out_name = _output_name(name)
        final = os.path.join(output, out_name)
        if shard_sink is not None and shard_sink.has(out_name):
            summary.reused += 1  # a killed copy's shard, whole in the bucket (a PUT is whole or absent)
            summary.shards += 1
            continue
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
        if shard_sink is not None:
            shard_sink.put(final, out_name)
            os.unlink(final)  # uploaded: staging keeps the shard being written only
        summary.shards += 1
    return summary
