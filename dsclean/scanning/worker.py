"""What runs inside a checking process: a chunk of checks under a time limit and a memory ceiling.

A native decoder can hang in C code where no Python exception reaches it, so
the time limit is an interval timer whose SIGALRM *terminates* the worker
(default action). A crash (segfault, abort) or a timeout therefore looks the
same to the scan: a dead worker, whose chunk :mod:`dsclean.scanning.executors` re-checks
in fresh processes, split where it dies, to name the culprit. The memory ceiling is
RLIMIT_AS: an allocation past it fails (MemoryError -> ``too_large``) instead of
waking the OOM killer for the whole machine.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from .. import argtypes
from ..errors import UserError
from . import check, importguard
from .check import CheckOptions, check_bytes, check_file
from .verdict import Verdict

#: Set to "1" only by dsclean's own tests: files named with __segfault__, __abort__, __hang__, __stuck__ (a hang
#: with SIGALRM blocked) or __oom__ then make the check crash, hang or allocate without bound (real faults, for real tests);
#: __stderr__ writes a line to file descriptor 2, as a native decoder's warning does; __modules__ writes
#: there which decoder libraries the checking process had imported when the file's check began.
FAULT_ENV = "DSCLEAN_TEST_FAULTS"


@dataclass(frozen=True)
class FileSlices:
    """A check source whose items are byte ranges inside the files of one folder (e.g. samples in tar shards).

    Pass it where the scan passes its root folder. Items are ``(file, name, offset, size)``:
    each check reads the range with one ``pread`` and runs :func:`check_bytes` on it, so
    the same pool, time limit, memory ceiling and crash isolation apply. The verdict's
    ``path`` is ``file/name``.
    """

    folder: str


@dataclass(frozen=True)
class SampleBytes:
    """A check source whose items carry their bytes: ``(name, data)`` (e.g. samples read from another tool's
    shards through a file object: a tar streamed, a Parquet row, an MDS sample).

    Pass it where the scan passes its root folder: :func:`check_bytes` runs on ``data`` in the same pool,
    under the same time limit, memory ceiling and crash isolation. The verdict's ``path`` is ``name``.
    """

    label: str = ""


def check_item(source, item, options: CheckOptions, *, capture_stderr: bool = True) -> Verdict:
    """One check, whatever the source: a file under a root folder, a byte range of a file, bytes in hand."""
    if isinstance(source, SampleBytes):
        return check_bytes(item[1], item[0], options, capture_stderr=capture_stderr)
    if isinstance(source, FileSlices):
        file, name, offset, size = item
        with open(os.path.join(source.folder, file), "rb") as f:
            data = os.pread(f.fileno(), size, offset)
        return check_bytes(data, f"{file}/{name}", options, capture_stderr=capture_stderr)
    return check_file(source, item, options, capture_stderr=capture_stderr)


def item_name(source, item) -> str:
    """The verdict path an item gets (also when its check never returned)."""
    if isinstance(source, SampleBytes):
        return item[0]
    return f"{item[0]}/{item[1]}" if isinstance(source, FileSlices) else item


def check_chunk(root: str, rels: list[str], options: CheckOptions) -> list[Verdict]:
    """Worker task: check each file in turn. Depends only on its arguments and the files."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    watchdog = Watchdog(options.timeout)

    @contextlib.contextmanager
    def import_guard() -> Iterator[None]:
        # The forkserver preloaded the checkers of the formats the scan expected; another one is imported on
        # its format's first file, with the ceiling lifted (the import itself could fail under it) and on the
        # import's own clock, not the file's (seconds on a cold network file system are not a hung decode).
        with without_ceiling(), watchdog.importing():
            yield

    previous_hook = importguard.hook
    importguard.hook = import_guard  # reset when the chunk ends: a finished watchdog's timer must never be re-armed
    limits = resource.getrlimit(resource.RLIMIT_AS)
    set_memory_ceiling(effective_ceiling(options.max_memory))
    check.fault_hook = inject_fault if os.environ.get(FAULT_ENV) == "1" else None
    from . import facts  # here, not at the top: numpy stays out of the main process's import of the executors

    out = []
    # facts.batched: the JPEG facts of the chunk are computed 32 at a time (same values, less CPU)
    try:
        with watchdog, check.decoder_messages_for_run(), facts.batched():
            for rel in rels:
                watchdog.next_file()
                out.append(check_item(root, rel, options))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)  # the ceiling is the checks': not the verdicts' batch
        importguard.hook = previous_hook
    return out


def as_batch(task, root, rels: list, options: CheckOptions) -> tuple:
    """Run a chunk task and hand its verdicts back as one Arrow IPC message and a few counts
    (:func:`~dsclean.scanning.schema.chunk_message`): no Python object per file to pickle and unpickle."""
    from .schema import chunk_message  # pyarrow: imported once by the forkserver (see executors)

    return chunk_message(task(root, rels, options))


def start_worker(env: tuple[tuple[str, str], ...] = ()) -> None:
    """Initializer of a local pool worker: the handed variables as the scan had them (:func:`handed_env`);
    exit with the scan's process.

    A pool worker is forked from the forkserver and waits on its task queue forever; if the
    scan's process is killed (kill -9, OOM) nothing else would end it. A thread blocked in
    one ``poll`` on the parent's sentinel (no CPU, no GIL) ends it when the parent is gone.
    """
    set_handed_env(env)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True, name="dsclean-orphan-watch").start()


def _exit_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


#: prefixes of the variables object stores read credentials and endpoints from (botocore/s3fs, gcsfs, adlfs, fsspec)
STORE_ENV_PREFIXES = ("AWS_", "GOOGLE_", "GCE_", "AZURE_", "FSSPEC_", "BOTO_")


def _handed(name: str) -> bool:
    return name == FAULT_ENV or name.startswith(STORE_ENV_PREFIXES)


def handed_env() -> tuple[tuple[str, str], ...]:
    """The variables a worker must see as this process has them *now*: the test-only fault switch and the
    stores' credentials and endpoints. A worker is forked from a server started earlier, whose environment
    may predate them (credentials set later, in a notebook; a test's). Hashable: a kept pool is reused
    only while it is the same (:func:`dsclean.scanning.executors.local_pool`)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if _handed(k)))


def set_handed_env(env: tuple[tuple[str, str], ...]) -> None:
    """In a worker: exactly ``env`` for the handed variables (those the sender had not are removed)."""
    given = dict(env)
    for name in [k for k in os.environ if _handed(k) and k not in given]:
        del os.environ[name]
    os.environ.update(given)


def set_fault_switch(value: str | None) -> None:
    """The test-only fault switch as the parent process had it (forked workers see the server's environment)."""
    if value is None:
        os.environ.pop(FAULT_ENV, None)
    else:
        os.environ[FAULT_ENV] = value


def check_chunk_in_thread(root: str, rels: list[str], options: CheckOptions) -> list[Verdict]:
    """Thread-backend task: no time limit, memory ceiling or stderr capture (all process-wide)."""
    return [check_item(root, rel, options, capture_stderr=False) for rel in rels]


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Kill this process with SIGALRM if the body runs longer than ``seconds`` (0 = no limit)."""
    if seconds <= 0:
        yield
        return
    previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: time a checker module's import may take inside a worker (a hung import still ends the worker)
IMPORT_SECONDS = 120.0


class Watchdog:
    """A per-file time limit for a run of files, without a timer system call per file.

    Like :func:`time_limit`, the interval timer's SIGALRM *terminates* the process
    (default action: nothing in C can block it). The timer is armed for
    ``seconds + slack`` and re-armed at the start of a file only when it was last armed
    more than ``slack`` ago, so each file gets at least ``seconds`` and at most
    ``seconds + slack`` (slack: a tenth of the limit, at most 1 s); files faster than
    the slack share one ``setitimer``.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.slack = min(1.0, seconds / 10)
        self._armed = float("-inf")
        self._previous = None

    def __enter__(self) -> "Watchdog":
        if self.seconds > 0:
            self._previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)
        return self

    def next_file(self) -> None:
        """Call as each file's check starts."""
        if self.seconds > 0:
            now = time.monotonic()
            if now - self._armed > self.slack:
                signal.setitimer(signal.ITIMER_REAL, self.seconds + self.slack)
                self._armed = now

    @contextlib.contextmanager
    def importing(self) -> Iterator[None]:
        """A module imported in the middle of a file's check gets :data:`IMPORT_SECONDS` (or the file's limit if
        longer); the file's own limit starts again after it."""
        if self.seconds <= 0:
            yield
            return
        signal.setitimer(signal.ITIMER_REAL, max(IMPORT_SECONDS, self.seconds + self.slack))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, self.seconds + self.slack)
            self._armed = time.monotonic()

    def __exit__(self, *exc) -> None:
        if self.seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


#: environment variable overriding the default ceiling per check (bytes; for admins and tests)
DEFAULT_CEILING_ENV = "DSCLEAN_DEFAULT_MAX_MEMORY"


def default_memory_ceiling() -> int:
    """A quarter of RAM's share per core, between 1 GiB and 8 GiB: what one check may add by default.

    Large enough for any image under Pillow's pixel limit (89.5 Mpx RGBA is 358 MB), small
    enough that a few hostile files on every core cannot push the machine into the OOM killer.
    """
    override = default_ceiling_override()
    if override:
        return override
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cores = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return max(1 << 30, min(8 << 30, ram // cores // 4))


def default_ceiling_override() -> int | None:
    """``$DSCLEAN_DEFAULT_MAX_MEMORY`` as bytes (``512M`` or a number of bytes), or None when unset.

    Raises :class:`~dsclean.errors.UserError` for a value that is not a size or is below
    :data:`~dsclean.argtypes.MIN_MEMORY` (the scan checks it before any worker starts).
    """
    text = os.environ.get(DEFAULT_CEILING_ENV, "").strip()
    if not text:
        return None
    try:
        value = argtypes.size(text)
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"${DEFAULT_CEILING_ENV}: {exc}") from None
    if value < argtypes.MIN_MEMORY:
        raise UserError(
            f"${DEFAULT_CEILING_ENV}={text} is below the {argtypes.MIN_MEMORY >> 20}M a worker needs "
            "for its own bookkeeping (a bare number is bytes)"
        )
    return value


def effective_ceiling(max_memory: int) -> int:
    """``CheckOptions.max_memory`` as bytes for :func:`set_memory_ceiling`: 0 = the default, -1 = none."""
    return default_memory_ceiling() if max_memory == 0 else max(0, max_memory)


def set_memory_ceiling(extra_bytes: int) -> None:
    """Let this process grow by at most ``extra_bytes`` of address space from now (0 = no ceiling)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if extra_bytes <= 0:
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        return
    limit = _address_space() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


@contextlib.contextmanager
def memory_ceiling(extra_bytes: int) -> Iterator[None]:
    """The body may grow this process by at most ``extra_bytes`` (0: no ceiling); the limits of before after it.

    For one check in a process that does other work between checks (the bucket scan's workers, whose reader
    threads fill buffers beside the checks): the ceiling covers the check, not the whole task. A mid-check
    import of a decoder runs outside it (:data:`~dsclean.scanning.importguard.hook`), as in :func:`check_chunk`.
    """
    if extra_bytes <= 0:
        yield
        return
    limits = resource.getrlimit(resource.RLIMIT_AS)
    previous_hook = importguard.hook
    importguard.hook = without_ceiling
    set_memory_ceiling(extra_bytes)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        importguard.hook = previous_hook


@contextlib.contextmanager
def without_ceiling() -> Iterator[None]:
    """Lift the memory ceiling for a while; afterwards the same headroom as before it (what was loaded meanwhile
    does not count against the check)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == hard:
        yield
        return
    before = _address_space()
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        yield
    finally:
        limit = soft + max(0, _address_space() - before)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def inject_fault(path: str) -> None:
    """Test-only faults, active only with DSCLEAN_TEST_FAULTS=1 in the worker's environment."""
    name = os.path.basename(path)
    if "__segfault__" in name:
        import ctypes

        ctypes.string_at(0)  # read address 0: SIGSEGV in C, as a broken decoder would
    elif "__stderr__" in name:
        os.write(2, f"warning from the decoder about {name}\n".encode())  # what a C library's fprintf does
    elif "__modules__" in name:
        import sys

        loaded = sorted(m for m in ("PIL", "simplejpeg", "soundfile") if m in sys.modules)
        os.write(2, f"modules: {' '.join(loaded)}\n".encode())
    elif "__abort__" in name:
        os.abort()
    elif "__hang__" in name:
        while True:
            time.sleep(3600)
    elif "__stuck__" in name:  # a hang the worker's own timer cannot end (a decoder blocking SIGALRM)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while True:
            time.sleep(3600)
    elif "__oom__" in name:
        hog = []
        while True:
            hog.append(bytearray(64 << 20))
