"""``dsclean explain``: classify a DataLoader error message and say what fixes it.

The three failure kinds users meet, by the text PyTorch prints:

- ``oom``: ``DataLoader worker (pid N) is killed by signal: Killed.`` (SIGKILL, almost
  always the kernel's OOM killer), or ``DataLoader worker (pid(s) N) exited unexpectedly``
  with no exit code (the worker vanished; usually the same cause).
- ``shm``: ``ERROR: Unexpected bus error encountered in worker...``, ``killed by signal:
  Bus error. It is possible that dataloader's workers are out of shared memory``,
  ``unable to write to file </torch_...>: No space left on device (28)``.
- ``exception``: ``exited unexpectedly with exit code 1`` or ``Caught ValueError in
  DataLoader worker process 0.`` followed by the worker's traceback: Python code in
  the Dataset (a broken file, a transform) raised.

More are recognised because they are frequent and need other fixes:
``crash`` (segmentation fault / abort / floating-point exception in native code, e.g.
a decoder on a malformed file), ``open_files`` (``Too many open files``), ``timeout``
(``DataLoader timed out after N seconds``: a worker produced no batch within the
``timeout=`` the loader was given) and ``empty_class`` (torchvision's ``ImageFolder``
refusing a class folder without images, e.g. a stray dsclean or quarantine folder).
A library's own message (:data:`LIBRARY_MESSAGES`: Pillow's truncated or unidentified image or
decompression bomb, libsndfile's errors, torchvision's decode errors or its operators missing
after a torch/torchvision mismatch, webdataset's missing key), alone or inside a worker's traceback,
is an ``exception`` whose ``library`` field names it, with its own title and the dsclean fix first. Anything else is ``unknown``; the CLI then exits 1 (0 when the text was recognised).

When a log holds several, the most specific wins: shm, exception, crash, open_files,
timeout, empty_class, oom (a bus error is also "killed by signal", a shm failure can
surface as a caught exception).

When the text comes from torchvision's ``ImageFolder``/``DatasetFolder`` (no dsclean
index yet), the fixes start with ``dsclean scan`` rather than with commands that
need an index.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

OOM, SHM, EXCEPTION, CRASH, OPEN_FILES, UNKNOWN = "oom", "shm", "exception", "crash", "open_files", "unknown"
TIMEOUT, EMPTY_CLASS = "timeout", "empty_class"

_PATTERNS: list[tuple[str, re.Pattern]] = [
    (
        SHM,
        re.compile(
            r"bus error|out of shared memory|insufficient shared memory|"
            r"unable to write to file </torch_|unable to (?:open|mmap|allocate) shared memory|"
            r"could not (?:unlink|unmap) the shared memory|No space left on device.*/dev/shm|"
            r"/dev/shm.*No space left on device",
            re.I,
        ),
    ),
    (EXCEPTION, re.compile(r"Caught \w+ in DataLoader worker process \d+|exited unexpectedly with exit code \d+")),
    (
        CRASH,
        re.compile(
            r"killed by signal: (?:Segmentation fault|Aborted|Floating point exception|Illegal instruction)"
            r"|Unexpected (?:segmentation fault|floating-point exception) encountered in worker",
            re.I,
        ),
    ),
    (OPEN_FILES, re.compile(r"Too many open files|received 0 items of ancdata", re.I)),
    (TIMEOUT, re.compile(r"DataLoader timed out after [\d.]+ seconds", re.I)),
    (EMPTY_CLASS, re.compile(r"Found no valid file for the classes? ", re.I)),
    (
        OOM,
        re.compile(
            r"killed by signal: Killed|exited unexpectedly(?! with exit code)|Killed process \d+|"
            r"Out of memory: Kill|OOMKilled",
            re.I,
        ),
    ),
]
_PIDS = re.compile(r"pid(?:\(s\))? ([\d, ]+)\)")
_EXIT_CODE = re.compile(r"exit code (-?\d+)")
_SIGNAL = re.compile(r"killed by signal: ([A-Za-z -]+)")
_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
_SAMPLE = re.compile(r"sample (\d+) \((.+?) under (.+?)\): (.*)")
_TIMEOUT = re.compile(r"timed out after ([\d.]+) seconds")
#: text that comes from torchvision's folder datasets (a user without a dsclean index)
_IMAGEFOLDER = re.compile(
    r"torchvision[/\\]datasets[/\\]folder\.py|\bImageFolder\b|\bDatasetFolder\b|"
    r"\bpil_loader\b|\bdefault_loader\b|Found no valid file for the class"
)
#: the first steps for a folder dataset: find and move the broken files, then index what is left
_SCAN_FIRST = [
    "dsclean scan ROOT --quarantine DIR: decodes every file under your ImageFolder root (in isolated processes) and "
    "moves the broken ones aside, journaled (nothing is deleted, nothing is written into ROOT)",
    "then IndexedDataset.from_folder(ROOT, transform) (or dsclean index ROOT -o INDEX.arrow and "
    "IndexedDataset(INDEX, transform)): a drop-in for ImageFolder with flat worker memory",
]
_DECODE_HINTS = (
    "UnidentifiedImageError",
    "cannot identify image file",
    "image file is truncated",
    "truncated",
    "LibsndfileError",
    "Error opening",
    "broken data stream",
    "DecompressionBombError",
    "SampleError",
    "StaleEntryError",
    "not a valid",
    "Premature end",
    "Invalid data",
)


@dataclass(frozen=True)
class LibraryMessage:
    """A decoding or loading library's own message, what it means and the dsclean fix."""

    pattern: re.Pattern
    kind: str
    text: str  # what happened, in the user's words
    fix: str


_SCAN = "run dsclean scan ROOT --quarantine DIR: it finds every such file (not just this one) and moves them aside"
_MISMATCH = (
    "install torch and torchvision builds made for each other, from the same index: "
    "pip install torch==X torchvision==Y --index-url https://download.pytorch.org/whl/cpu (or .../cu128 for "
    "CUDA; README 'Installing torch'); dsclean doctor checks the pair"
)
#: the common library messages, most specific first (a message may quote another's words)
LIBRARY_MESSAGES: tuple[LibraryMessage, ...] = (
    LibraryMessage(
        re.compile(
            r"operator torchvision::\w+ does not exist|Couldn't load custom C\+\+ ops|"
            r"torchvision[^\n]*(?:undefined symbol|libtorch\w*\.so)"
        ),
        "torchvision_mismatch",
        "torchvision was built for another torch (its C++ operators do not load)",
        _MISMATCH,
    ),
    LibraryMessage(
        re.compile(r"didn't find \[[^\]]*\] in \["),
        "webdataset_key",
        "a webdataset sample lacks a key the recipe asks for (to_tuple/ select): the shard stores it "
        "under another extension (e.g. a PNG as .png where the recipe reads .jpg)",
        "re-pack with dsclean pack (one extension per kind) or read the keys the shards have "
        "(tar tf SHARD lists them; to_tuple('jpg;png', ...) accepts either)",
    ),
    LibraryMessage(
        re.compile(r"image file is truncated"),
        "truncated_image",
        "a file is cut short (Pillow: image file is truncated)",
        _SCAN,
    ),
    LibraryMessage(
        re.compile(r"cannot identify image file"),
        "unidentified_image",
        "a file is not an image Pillow can read (not media, an unsupported format, or damaged at the start)",
        _SCAN + "; its verdict says what the content is",
    ),
    LibraryMessage(
        re.compile(r"DecompressionBombError|could be decompression bomb"),
        "decompression_bomb",
        "an image has more pixels than Pillow's limit (a decompression bomb, or a huge scan)",
        "dsclean scan ROOT --quarantine DIR --max-pixels N: over the limit is bad/decompression_bomb and "
        "moved aside; raise Image.MAX_IMAGE_PIXELS only for files you trust",
    ),
    LibraryMessage(
        re.compile(
            r"Error opening .*?: (?:Format not recognised|File contains data in an unknown format|"
            r"unimplemented format|Supported file format but file is malformed|Error in \S+ file)"
            r"|Internal psf_fseek\(\) failed|Unspecified internal error|LibsndfileError"
        ),
        "audio_decode",
        "libsndfile cannot read an audio file (not audio, cut short, or malformed)",
        _SCAN,
    ),
    LibraryMessage(
        re.compile(
            r"Unsupported image file\. Only|Not a JPEG file|Unsupported marker type|"
            r"Invalid (?:PNG|image) (?:file|data)|Internal error in decode_|decode_jpeg|decode_png"
            r"|Premature end of JPEG file"
        ),
        "torchvision_decode",
        "torchvision.io could not decode a file (damaged, or not the format it expects)",
        _SCAN,
    ),
)


def match_library(text: str) -> tuple[LibraryMessage, str] | None:
    """The first :data:`LIBRARY_MESSAGES` entry the text matches, and the line it matched on."""
    for entry in LIBRARY_MESSAGES:
        m = entry.pattern.search(text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            return entry, text[start : end if end >= 0 else len(text)].strip()
    return None


@dataclass
class Explanation:
    """What kind of failure the text shows, why it happens, and what to run or change."""

    kind: str
    title: str
    cause: str
    fixes: list[str] = field(default_factory=list)
    evidence: str = ""  # the line that decided
    pids: list[int] = field(default_factory=list)
    signal: str | None = None
    exit_code: int | None = None
    exception: str | None = None  # e.g. "OSError: image file is truncated" (the worker's last traceback line)
    worker: int | None = None
    sample: dict | None = None  # index/path/root of a dsclean SampleError
    library: str | None = None  # the kind of a library's own message (LIBRARY_MESSAGES), e.g. "truncated_image"

    @property
    def recognized(self) -> bool:
        return self.kind != UNKNOWN

    def to_json(self) -> dict:
        return asdict(self) | {"recognized": self.recognized}


def classify(text: str) -> tuple[str, str]:
    """``(kind, evidence line)`` by the most specific family present in ``text``."""
    for kind, pattern in _PATTERNS:
        m = pattern.search(text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            return kind, text[start : end if end >= 0 else len(text)].strip()
    return UNKNOWN, ""


def _last_exception_line(text: str) -> str | None:
    """The worker's own exception: the last ``Name: message`` line after 'Original Traceback'."""
    tail = text.split("Original Traceback", 1)[1] if "Original Traceback" in text else text
    candidates = [
        ln.strip()
        for ln in tail.splitlines()
        if re.match(r"^\s*[\w.]+(?:Error|Exception|Interrupt|Exit|Warning)\b.*", ln)
        and not ln.strip().startswith(("File ", "During handling", "The above exception"))
    ]
    return candidates[-1] if candidates else None


def explain(text: str) -> Explanation:
    """Classify a DataLoader error (message or whole log) and explain it."""
    kind, evidence = classify(text)
    exp = _BUILDERS[kind](text)
    known = match_library(text) if kind in (EXCEPTION, UNKNOWN) else None
    if known is not None:  # a library's own words: what happened and the fix for it come first
        entry, line = known
        if kind == UNKNOWN:  # the library's message alone: still an exception raised in the loading code
            exp = _exception(text)
            exp.cause = f"the library said: {line}"
            evidence = line
        exp.library, exp.title = entry.kind, entry.text
        # a bad file: the worker-exception fixes (probe --all, on_error="skip") still apply; not to an install or recipe
        rest = [f for f in exp.fixes if "dsclean scan" not in f] if entry.fix.startswith(_SCAN) else []
        exp.fixes = [entry.fix] + rest
        exp.exception = exp.exception or line
    # a class left empty is no bad file to scan for (it may be what a scan's moves left): its own fixes stand
    scan_fix = known is None or known[0].fix.startswith(_SCAN)  # a bad file: for a folder dataset, scan first
    if kind not in (UNKNOWN, EMPTY_CLASS) and scan_fix and _IMAGEFOLDER.search(text) and "IndexedDataset" not in text:
        exp.fixes = _SCAN_FIRST + [f for f in exp.fixes if f not in _SCAN_FIRST and "dsclean scan" not in f]
    exp.evidence = evidence
    pids = _PIDS.search(evidence) or _PIDS.search(text)
    if pids:
        exp.pids = [int(p) for p in re.findall(r"\d+", pids.group(1))]
    sig = _SIGNAL.search(text)
    exp.signal = sig.group(1).strip().rstrip(".") if sig else None
    code = _EXIT_CODE.search(text)
    exp.exit_code = int(code.group(1)) if code else None
    return exp


#: the public name (``dsclean.diagnose.explain`` is this module, so the function is exported under another name)
explain_error = explain


def _oom(text: str) -> Explanation:
    vanished = "exited unexpectedly" in text and "killed by signal" not in text
    cause = (
        "the worker process disappeared without reporting an exception: usually the kernel's OOM killer "
        "(SIGKILL), sometimes a shared-memory failure"
        if vanished
        else "SIGKILL ended the worker: nearly always the kernel's out-of-memory killer, when the machine or the "
        "container's cgroup limit ran out of memory. Workers grow when they copy the Dataset's Python "
        "objects (copy-on-write through reference counts) or hold too many batches"
    )
    return Explanation(
        OOM,
        "worker killed: out of memory",
        cause,
        [
            "dsclean doctor --index INDEX --batch-size B --num-workers W: compares the loader's estimated memory with "
            "RAM and the cgroup limit, and looks for 'Killed process' in the kernel log",
            "dsclean probe INDEX --num-workers W: per-worker memory over time; a steady climb is per-worker copying",
            "use IndexedDataset (memory-mapped index, no per-sample Python objects) instead of lists of paths",
            "lower num_workers, batch_size or prefetch_factor (dsclean.recommended_loader_kwargs), or raise the "
            "memory limit (docker run --memory, Kubernetes resources.limits.memory)",
        ],
    )


def _shm(text: str) -> Explanation:
    return Explanation(
        SHM,
        "out of shared memory (/dev/shm)",
        "workers pass each batch to the main process through /dev/shm; when it is full (Docker's "
        "default is 64 MB) writing the batch fails with SIGBUS or 'No space left on device'",
        [
            "dsclean doctor --index INDEX --batch-size B --num-workers W: measures /dev/shm against the bytes in flight "
            "(workers x prefetch_factor x batch_size x decoded sample) and suggests a size",
            "docker run --shm-size=8g (compose: shm_size), or in Kubernetes an emptyDir with medium: Memory at /dev/shm",
            "docker run --ipc=host shares the host's /dev/shm (only for trusted containers)",
            "or need less: lower num_workers, prefetch_factor or batch_size",
        ],
    )


def _exception(text: str) -> Explanation:
    caught = _CAUGHT.search(text)
    exp = Explanation(
        EXCEPTION,
        "exception in Dataset code",
        "Python code running in the worker (the Dataset's __getitem__, the loader or a transform) "
        "raised an exception; the worker exited with code 1",
        [],
    )
    if caught:
        exp.worker = int(caught.group(2))
        exp.exception = _last_exception_line(text) or caught.group(1)
        exp.cause = f"worker {exp.worker} raised {exp.exception}"
    else:
        exp.cause += "; PyTorch lost the details (they went to the worker's stderr)"
    sample = _SAMPLE.search(text)
    if sample:
        exp.sample = {"index": int(sample.group(1)), "path": sample.group(2), "root": sample.group(3)}
        exp.cause += f"; the failing file is {sample.group(2)} (sample {sample.group(1)})"
    exp.fixes.append(
        "dsclean probe INDEX --num-workers 0 --all: loads every sample in the main process and lists "
        "every failure (not just the first), grouped by reason with counts (--tracebacks: each in full)"
    )
    if any(h in text for h in _DECODE_HINTS):
        exp.fixes.append(
            "a file does not decode: dsclean scan ROOT --quarantine DIR, then rebuild the index "
            "(dsclean index ROOT -o INDEX)"
        )
    exp.fixes.append(
        'to keep training past bad files: IndexedDataset(INDEX, on_error="skip") with '
        "collate_fn=dsclean.collate_skip_none"
    )
    return exp


def _crash(text: str) -> Explanation:
    return Explanation(
        CRASH,
        "worker crashed in native code",
        "a C library in the worker (an image or audio decoder, NumPy, a transform) crashed with a "
        "signal; a malformed file is a common trigger",
        [
            "dsclean scan ROOT --quarantine DIR: decodes every file in isolated processes and quarantines the broken ones",
            "dsclean probe INDEX --num-workers 0 --all: the last sample printed before the crash is the suspect",
            "python -X faulthandler train.py prints the Python stack of the crash",
        ],
    )


def _open_files(text: str) -> Explanation:
    return Explanation(
        OPEN_FILES,
        "too many open files",
        "with the default file_descriptor sharing strategy every tensor in flight holds a file "
        "descriptor; the open-files limit (ulimit -n) ran out",
        [
            "ulimit -n 65536 (or a higher nofile limit in the container/service)",
            "torch.multiprocessing.set_sharing_strategy('file_system') at the start of the program",
            "return fewer, larger tensors per sample; lower prefetch_factor or num_workers",
        ],
    )


def _timeout(text: str) -> Explanation:
    m = _TIMEOUT.search(text)
    seconds = f" {m.group(1)} seconds" if m else ""
    return Explanation(
        TIMEOUT,
        "DataLoader timed out",
        f"no worker delivered a batch within the loader's timeout={seconds.strip() or 'N seconds'}: "
        "a decoder stuck on a malformed file, slow or stalled storage (a network file system), a "
        "transform that hangs, or a deadlock after fork (threads or locks held in the parent)",
        [
            "dsclean scan ROOT --quarantine DIR: a file that hangs its decoder becomes bad/timeout (--timeout) and is "
            "moved aside instead of stalling training",
            "dsclean probe INDEX --num-workers W: samples/s and per-worker memory; a stall shows as no batches",
            "dsclean probe INDEX --num-workers 0 --all: every sample in this process, failures grouped by reason",
            "raise DataLoader(timeout=...) for slow storage, or use multiprocessing_context='spawn' if the parent "
            "starts threads before the loader",
        ],
    )


def _empty_class(text: str) -> Explanation:
    return Explanation(
        EMPTY_CLASS,
        "ImageFolder found a class folder without images",
        "torchvision's ImageFolder treats every folder under its root as a class, hidden ones too, "
        "and refuses one without image files; with allow_empty=True it keeps it and every label "
        "after it shifts by one. A folder left in the data tree (an old dsclean's .dsclean, a "
        "quarantine or report folder inside ROOT) is the usual culprit; so is a class whose every "
        "file was broken and moved out by dsclean scan --quarantine (its summary names such folders)",
        [
            "if the scan emptied that class (its summary's note, or scan_summary.json's emptied_folders): remove the "
            "empty folder, or dsclean restore the quarantine and repair or replace its files",
            "move that folder out of ROOT: dsclean >= 0.2 writes nothing into ROOT (its state lives in "
            "$XDG_CACHE_HOME/dsclean or --state-dir; a leftover ROOT/.dsclean can be deleted)",
            "dsclean index ROOT -o INDEX.arrow --files imagefolder: ImageFolder's exact file rule, leaving dsclean's "
            "own folders out; IndexedDataset(INDEX, transform) then replaces ImageFolder",
        ],
    )


def _unknown(text: str) -> Explanation:
    return Explanation(
        UNKNOWN,
        "not a known DataLoader failure",
        "the text holds none of the messages PyTorch prints when a worker dies "
        "(killed by signal, bus error / shared memory, exited unexpectedly, Caught ... in "
        "DataLoader worker process)",
        [
            "pass the full error including the 'RuntimeError: DataLoader worker ...' line, or the whole log "
            "with --file",
            "dsclean doctor checks the environment either way",
        ],
    )


_BUILDERS = {
    OOM: _oom,
    SHM: _shm,
    EXCEPTION: _exception,
    CRASH: _crash,
    OPEN_FILES: _open_files,
    TIMEOUT: _timeout,
    EMPTY_CLASS: _empty_class,
    UNKNOWN: _unknown,
}


def format_explanation(exp: Explanation) -> str:
    """Human-readable explanation."""
    lines = [f"{exp.kind}: {exp.title}"]
    if exp.evidence:
        lines.append(f"  matched: {exp.evidence}")
    if exp.pids:
        lines.append(f"  worker pid(s): {', '.join(map(str, exp.pids))}")
    lines.append(f"  cause: {exp.cause}")
    if exp.fixes:
        lines.append("  what to do:")
        lines.extend(f"    - {f}" for f in exp.fixes)
    return "\n".join(lines)
