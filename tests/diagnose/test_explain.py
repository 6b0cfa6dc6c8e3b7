"""dsclean explain: each message family, from canned PyTorch text and from errors the installed PyTorch raises."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import traceback

import pytest
import torch
from support import synth
from support.fixtures_sys.fakesys import HERE
from torch.utils.data import DataLoader, Dataset

from dsclean.cli import diagnose as cli_doctor
from dsclean.diagnose.explain import (
    CRASH,
    EXCEPTION,
    OOM,
    OPEN_FILES,
    SHM,
    UNKNOWN,
    classify,
    explain,
    explain_error,
    format_explanation,
)

# ----------------------------------------------------------------------------- canned messages (PyTorch formats)

KILLED = "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed."
VANISHED = "RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly"
BUS_HANDLER = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
)
BUS = (
    "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Bus error. It is possible that "
    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
)
NO_SPACE = "RuntimeError: unable to write to file </torch_123_456_0>: No space left on device (28)"
EXIT_1 = (
    "RuntimeError: DataLoader worker (pid(s) 12345) exited unexpectedly with exit code 1. Details are lost "
    "due to multiprocessing. Rerunning with num_workers=0 may give better error message."
)
CAUGHT = """Traceback (most recent call last):
  File "train.py", line 40, in <module>
    for x, y in loader:
  File "/usr/lib/python3/site-packages/torch/_utils.py", line 706, in reraise
    raise exception
OSError: Caught OSError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
    data = fetcher.fetch(index)
  File "/usr/lib/python3/site-packages/PIL/ImageFile.py", line 251, in load
    raise OSError(msg)
OSError: image file is truncated (3 bytes not processed)
"""
TOO_MANY = (
    "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please "
    "increase the limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"
)
SEGV = "RuntimeError: DataLoader worker (pid 777) is killed by signal: Segmentation fault."


@pytest.mark.parametrize(
    "text, kind",
    [
        (KILLED, OOM),
        (VANISHED, OOM),
        (BUS_HANDLER, SHM),
        (BUS, SHM),
        (NO_SPACE, SHM),
        (EXIT_1, EXCEPTION),
        (CAUGHT, EXCEPTION),
        (TOO_MANY, OPEN_FILES),
        (SEGV, CRASH),
        ("ERROR: Unexpected segmentation fault encountered in worker.", CRASH),
        ("Killed process 5 (python) total-vm:1kB, anon-rss:1kB", OOM),
        ("ValueError: could not broadcast input array", UNKNOWN),
        ("", UNKNOWN),
    ],
)
def test_families(text, kind):
    exp = explain(text)
    assert exp.kind == kind
    assert exp.recognized == (kind != UNKNOWN)
    assert exp.cause and exp.fixes


def test_oom_details():
    exp = explain(KILLED)
    assert exp.pids == [1234] and exp.signal == "Killed" and exp.evidence == KILLED
    text = " ".join(exp.fixes)
    assert "dsclean doctor" in text and "dsclean probe" in text and "IndexedDataset" in text
    vanished = explain(VANISHED)
    assert vanished.pids == [1234, 1235] and "disappeared" in vanished.cause


def test_shm_details():
    exp = explain(BUS)
    assert exp.signal == "Bus error" and "/dev/shm" in exp.cause
    assert any("--shm-size" in f for f in exp.fixes) and any("--ipc=host" in f for f in exp.fixes)
    assert explain(NO_SPACE).kind == SHM


def test_exception_details():
    exp = explain(EXIT_1)
    assert exp.exit_code == 1 and exp.pids == [12345] and "lost the details" in exp.cause
    assert any("--num-workers 0 --all" in f for f in exp.fixes)
    caught = explain(CAUGHT)
    assert caught.worker == 0 and caught.exception == "OSError: image file is truncated (3 bytes not processed)"
    assert any("dsclean scan" in f for f in caught.fixes)  # a decode error: scan and quarantine


def test_log_with_several_messages_picks_the_most_specific():
    """A bus error log also says 'exited unexpectedly': the shm cause wins."""
    with open(HERE / "dataloader_bus_error.log", encoding="utf-8") as f:
        text = f.read()
    exp = explain(text)
    assert exp.kind == SHM and exp.evidence.startswith("ERROR: Unexpected bus error")
    assert classify(KILLED + "\n" + CAUGHT)[0] == EXCEPTION


def test_public_alias():
    assert explain_error(KILLED).kind == OOM


def test_format():
    text = format_explanation(explain(BUS))
    assert text.startswith("shm: out of shared memory") and "matched:" in text and "what to do:" in text


# ----------------------------------------------------------------------------- real messages from this PyTorch


class _Dies(Dataset):
    """A worker that dies the given way on its first item."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i):
        if self.how == "exit1":
            os._exit(1)
        if self.how == "raise":
            raise ValueError(f"bad sample {i}")
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "bus": signal.SIGBUS, "segv": signal.SIGSEGV}[self.how])
        return torch.zeros(1)


def _real_error(how: str, capfd) -> str:
    """The text a user sees: the traceback plus whatever the worker printed to stderr."""
    text = _loader_error(DataLoader(_Dies(how), batch_size=1, num_workers=1, timeout=30))
    return capfd.readouterr().err + text


def _loader_error(loader) -> str:
    """The formatted exception of the first batch; the iterator is shut down right away (no lingering worker)."""
    it = iter(loader)
    try:
        next(it)
    except Exception as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        while exc is not None:  # break the frame <-> exception cycles that keep the iterator alive
            traceback.clear_frames(exc.__traceback__)
            exc = exc.__cause__ or exc.__context__
        return text
    finally:
        del it
    raise AssertionError("the loader did not fail")


@pytest.mark.parametrize(
    "how, kind", [("kill", OOM), ("bus", SHM), ("segv", CRASH), ("exit1", EXCEPTION), ("raise", EXCEPTION)]
)
def test_real_pytorch_messages(how, kind, capfd):
    text = _real_error(how, capfd)
    exp = explain(text)
    assert exp.kind == kind, text
    if how == "raise":
        assert exp.exception == "ValueError: bad sample 0" and exp.worker == 0
    if how == "kill":
        assert exp.signal == "Killed" and exp.pids


def test_real_sample_error_names_the_file(tmp_path):
    """IndexedDataset's SampleError, re-raised by the DataLoader: the file is named."""
    from dsclean import IndexedDataset
    from dsclean.index.build import build_index

    (tmp_path / "data" / "c").mkdir(parents=True)
    (tmp_path / "data" / "c" / "bad.png").write_bytes(synth.truncate(synth.png(32, 32), 0.5))
    build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), check=False)  # unchecked: the bad file is in
    exp = explain(_loader_error(DataLoader(IndexedDataset(str(tmp_path / "i.arrow")), batch_size=1, num_workers=1)))
    assert exp.kind == EXCEPTION and exp.sample["path"] == "c/bad.png" and exp.sample["index"] == 0
    assert any("dsclean scan" in f for f in exp.fixes)


# ----------------------------------------------------------------------------- CLI


def _cli(argv, capsys, monkeypatch=None, stdin=None):
    p = argparse.ArgumentParser(prog="dsclean")
    cli_doctor.add_parsers(p.add_subparsers(dest="command"))
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    args = p.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_cli_message_file_stdin_and_exit_codes(capsys, monkeypatch):
    code, out = _cli(["explain", KILLED], capsys)
    assert code == 0 and out.startswith("oom:")
    code, out = _cli(["explain", "--file", str(HERE / "dataloader_bus_error.log"), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["kind"] == SHM and data["recognized"] is True
    code, out = _cli(["explain", "--file", "-"], capsys, monkeypatch, stdin=EXIT_1)
    assert code == 0 and out.startswith("exception:")
    code, out = _cli(["explain", "all good"], capsys)
    assert code == 1 and out.startswith("unknown:")


def test_cli_errors(tmp_path, capsys):
    from dsclean.errors import UserError

    with pytest.raises(UserError, match="nothing to explain"):
        _cli(["explain"], capsys)
    with pytest.raises(UserError, match="not both"):
        _cli(["explain", "x", "--file", "y"], capsys)
    with pytest.raises(UserError, match="nope.log: cannot read"):
        _cli(["explain", "--file", str(tmp_path / "nope.log")], capsys)


# ----------------------------------------------------------------------------- issue 10: wording


def test_dataloader_timeout_is_recognised():
    exp = explain("Traceback ...\nRuntimeError: DataLoader timed out after 120 seconds")
    assert exp.kind == "timeout" and exp.recognized and "timeout=120 seconds" in exp.cause
    assert any(f.startswith("dsclean scan") for f in exp.fixes)


def test_real_dataloader_timeout_text_is_recognised():
    """The message the installed PyTorch raises when a worker stalls past timeout=."""
    import time

    class Slow(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            time.sleep(3)
            return i

    loader = DataLoader(Slow(), batch_size=1, num_workers=1, timeout=0.5)
    it = iter(loader)
    try:
        with pytest.raises(RuntimeError) as info:
            next(it)
    finally:
        it._shutdown_workers()
    assert explain(str(info.value)).kind == "timeout"


IMAGEFOLDER_TRACE = """Traceback (most recent call last):
  File "main.py", line 300, in train
    for i, (images, target) in enumerate(train_loader):
OSError: Caught OSError in DataLoader worker process 3.
Original Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/torchvision/datasets/folder.py", line 245, in __getitem__
    sample = self.loader(path)
  File "/usr/lib/python3/site-packages/torchvision/datasets/folder.py", line 264, in pil_loader
    return img.convert("RGB")
OSError: image file is truncated (7 bytes not processed)
"""


def test_an_imagefolder_user_without_an_index_is_told_to_scan_first():
    exp = explain(IMAGEFOLDER_TRACE)
    assert exp.kind == EXCEPTION
    assert exp.fixes[0].startswith("dsclean scan ROOT --quarantine DIR")
    assert "from_folder" in exp.fixes[1]
    assert not explain(CAUGHT).fixes[0].startswith("dsclean scan")  # an IndexedDataset user: probe first


def test_imagefolder_empty_class_is_explained():
    exp = explain("FileNotFoundError: Found no valid file for the classes .dsclean. Supported extensions are: .jpg")
    assert exp.kind == "empty_class" and "allow_empty" in exp.cause
    assert any("--files imagefolder" in f for f in exp.fixes)


def test_an_empty_class_is_not_answered_with_scan_first():
    """Review 6, bug 7: the class may be empty because a scan moved all its files out; scanning again is no fix."""
    exp = explain(
        '  File "torchvision/datasets/folder.py", line 102, in make_dataset\n'
        "FileNotFoundError: Found no valid file for the classes zebra. Supported extensions are: .jpg"
    )
    assert exp.kind == "empty_class" and not exp.fixes[0].startswith("dsclean scan")
    assert "emptied" in exp.fixes[0] and "restore" in exp.fixes[0]
