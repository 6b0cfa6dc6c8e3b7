"""Helpers for tests/training/test_guard_integrations.py (importable by spawned processes)."""

from __future__ import annotations

import io
import json
import os

import torch
from torch.utils.data import Dataset


def jpeg(i: int) -> bytes:
    """A small real JPEG, a different colour for each i."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), ((i * 37) % 256, (i * 91) % 256, 40)).save(buf, "JPEG")
    return buf.getvalue()


def write_shards(folder, *, shards: int, per_shard: int, bad: dict[int, bytes]) -> tuple[str, list[str]]:
    """webdataset tars ``part-000.tar``..: sample i is ``s<i>`` (.jpg, .cls); ``bad`` maps i to its .jpg bytes.

    Returns the brace url of the shards and every key in order.
    """
    import webdataset as wds

    os.makedirs(folder, exist_ok=True)
    keys = []
    for s in range(shards):
        with wds.TarWriter(os.path.join(folder, f"part-{s:03d}.tar")) as w:
            for i in range(s * per_shard, (s + 1) * per_shard):
                key = f"s{i:03d}"
                keys.append(key)
                w.write({"__key__": key, "jpg": bad.get(i, jpeg(i)), "cls": str(i % 3).encode()})
    return os.path.join(os.fspath(folder), f"part-{{000..{shards - 1:03d}}}.tar"), keys


class DecodeRGB:
    """webdataset's own decode step (``.decode("torchrgb")``) as a picklable transform for the guard."""

    def __init__(self) -> None:
        import webdataset as wds

        self.decoder = wds.autodecode.Decoder([wds.autodecode.imagehandler("torchrgb")])

    def __call__(self, sample: dict) -> dict:
        out = self.decoder(sample)
        return {"__key__": out["__key__"], "__url__": out["__url__"], "jpg": out["jpg"], "cls": int(out["cls"])}


def ddp_rank(rank: int, tmp: str, ctx: str, n: int, bad: list[int], epochs: int) -> None:
    """One DDP rank (gloo, CPU): a guarded Numbers under DistributedSampler; writes what it got to r<rank>.json."""
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler

    import dsclean
    from support.guarded import Numbers

    # the rank is given to init_process_group only (as torch.multiprocessing.spawn users do): no RANK variable
    os.environ.pop("RANK", None)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=2)
    try:
        ds = dsclean.guard(Numbers(n, raise_on=bad), on_error="skip", log=os.path.join(tmp, "f.jsonl"))
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=1)
        loader = dsclean.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=1, multiprocessing_context=ctx)
        got = {}
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            got[epoch] = [x for b in loader for x in b.flatten().tolist()]
        dist.barrier()
        with open(os.path.join(tmp, f"r{rank}.json"), "w") as f:
            json.dump(got, f)
    finally:
        dist.destroy_process_group()


class AlwaysFails(Dataset):
    """Every sample raises, with a long message and a long path: failure lines of several pages each."""

    root = "/data"

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def path(self, i: int) -> str:
        return f"{'deep/' * 2000}{i}.jpg"

    def __getitem__(self, i: int):
        raise OSError(f"broken sample {i} " + "x" * 3000)


def fail_forever(log: str, workers: int) -> None:
    """A training loop whose every sample fails (skip, no budget), writing failure lines as fast as it can."""
    import dsclean

    ds = dsclean.guard(AlwaysFails(10_000), on_error="skip", log=log, max_failures=None)
    loader = dsclean.DataLoader(
        ds,
        batch_size=8,
        num_workers=workers,
        collate_fn=lambda b: b,
        multiprocessing_context="fork" if workers else None,
    )
    while True:
        for batch in loader:
            assert batch == []
        torch.zeros(1)  # an "optimizer step"
