"""Datasets that fail on purpose, for the guard's tests (importable by spawned workers)."""

from __future__ import annotations

import os
import resource
import signal

import torch
from torch.utils.data import Dataset, IterableDataset


class Numbers(Dataset):
    """Sample i is tensor([i]); indices in ``raise_on`` raise OSError, in ``segv_on`` kill the process."""

    def __init__(self, n: int, raise_on=(), segv_on=(), kill_on=(), exit_on=()) -> None:
        self.n = n
        self.raise_on, self.segv_on, self.kill_on, self.exit_on = (
            set(raise_on),
            set(segv_on),
            set(kill_on),
            set(exit_on),
        )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i in self.segv_on:
            os.kill(os.getpid(), signal.SIGSEGV)
        if i in self.kill_on:
            os.kill(os.getpid(), signal.SIGKILL)
        if i in self.exit_on:
            os._exit(3)
        if i in self.raise_on:
            raise OSError(f"broken sample {i}")
        return torch.tensor([i])


class Hungry(Dataset):
    """Index ``big`` allocates far more than the RLIMIT_AS set by :func:`limit_memory`."""

    def __init__(self, n: int, big: int) -> None:
        self.n, self.big = n, big

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.big:
            chunks = []
            while True:  # grows until the address-space limit refuses (MemoryError)
                chunks.append(bytearray(64 << 20))
        return torch.tensor([i])


def limit_memory(worker_id: int) -> None:
    """worker_init_fn: cap this worker's address space 1 GiB above what it has mapped now."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))


class Stream(IterableDataset):
    """Yields i for i < n (split between workers); ``transform`` in the guard fails on ``bad``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        step, first = (1, 0) if info is None else (info.num_workers, info.id)
        return iter(range(first, self.n, step))


class FailOn:
    """A picklable transform that raises on the given values."""

    def __init__(self, bad) -> None:
        self.bad = set(bad)

    def __call__(self, x):
        if x in self.bad:
            raise ValueError(f"cannot decode {x}")
        return x


class SegvLoader:
    """An IndexedDataset loader that crashes the process (like a native decoder) on one file name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, path: str):
        if path.endswith(self.name):
            os.kill(os.getpid(), signal.SIGSEGV)
        with open(path, "rb") as f:
            return torch.tensor([len(f.read())])


class SegvStream(IterableDataset):
    """Yields 0..n-1 in worker 0 and crashes at ``bad``."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id != 0:
            return
        for i in range(self.n):
            if i == self.bad:
                os.kill(os.getpid(), signal.SIGSEGV)
            yield i


class FullShm(Dataset):
    """Index ``bad`` writes into a shared mapping bigger than its (full) tmpfs: a real SIGBUS, as /dev/shm gives."""

    def __init__(self, n: int, bad: int, folder: str) -> None:
        self.n, self.bad, self.folder = n, bad, folder

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.bad:
            import mmap

            with open(os.path.join(self.folder, "segment"), "w+b") as f:
                f.truncate(64 << 20)  # sparse: the tmpfs holds 1 MiB, the mapping promises 64
                view = mmap.mmap(f.fileno(), 64 << 20)
                for page in range(0, 64 << 20, mmap.PAGESIZE):
                    view[page] = 1  # the first page past the tmpfs's size: SIGBUS
        return torch.tensor([i])
