"""dsclean: make image and audio training data safe to feed to PyTorch.

Pipeline: discover -> check (parallel) -> verdicts -> quarantine -> index -> IndexedDataset,
or index -> pack (WebDataset shards) -> verify -> IndexedDataset / webdataset.

Public names are imported on first use, so ``import dsclean`` stays cheap and
torch is loaded only by code that touches the Dataset.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# library code logs on "dsclean.*" and never prints: without a handler of the program's (its logging config, or
# the CLI's dsclean.cli.notes), nothing shows, not even Python's last-resort printing of warnings
logging.getLogger("dsclean").addHandler(logging.NullHandler())

# public name -> module that defines it
_EXPORTS = {
    "CheckOptions": "scanning.check",
    "check_file": "scanning.check",
    "check_bytes": "scanning.check",
    "DiscoverStats": "scanning.discover",
    "iter_media": "scanning.discover",
    "UserError": "errors",
    "build_index": "index.build",
    "build_bucket_index": "index.bucket",
    "BucketIndexOptions": "index.bucket",
    "build_split_indexes": "index.splitset",
    "IndexOptions": "index.options",
    "index_info": "index.store",
    "IndexedDataset": "data.dataset",
    "collate_skip_none": "data.collate",
    "recover": "scanning.quarantine.recovery",
    "restore": "scanning.quarantine.restore",
    "status": "scanning.quarantine.status",
    "quarantine_state": "scanning.quarantine.status",
    "find_results": "locations",
    "REASONS": "reasons",
    "iter_verdicts": "scanning.results",
    "read_problems": "scanning.results",
    "read_results": "scanning.results",
    "ScanOptions": "scanning.scanner",
    "ScanSummary": "scanning.scanner",
    "scan": "scanning.scanner",
    "BucketScanOptions": "storage.scan",
    "scan_bucket": "storage.scan",
    "Verdict": "scanning.verdict",
    "recommended_loader_kwargs": "diagnose.loader_kwargs",
    "Recommendation": "diagnose.loader_kwargs",
    "run_doctor": "diagnose.doctor",
    "DoctorReport": "diagnose.doctor",
    "SysPaths": "diagnose.sysinfo",
    "explain_error": "diagnose.explain",
    "probe_index": "diagnose.probe",
    "probe_dataset": "diagnose.probe",
    "check_all": "diagnose.probe",
    "pack_shards": "pack.packer",
    "finish_pack": "pack.packer",
    "PackOptions": "pack.packer",
    "PackSummary": "pack.packer",
    "verify_shards": "pack.verify",
    "scan_shard_set": "shardsets.run",
    "verify_shard_set": "shardsets.run",
    "ShardScanOptions": "shardsets.run",
    "quarantine_from_log": "fromlog.recheck",
    "FromLogOptions": "fromlog.recheck",
    "FromLogSummary": "fromlog.recheck",
    "read_denylist": "denylist",
    "FLAGS": "quality.flags",
    "FlagOptions": "quality.flags",
    "Facts": "quality.facts",
    "image_facts": "quality.image",
    "AudioStats": "quality.audio",
    "facts_from_path": "quality.files",
    "find_duplicates": "dups.finder",
    "DupsOptions": "dups.finder",
    "DupsResult": "dups.finder",
    "write_groups": "dups.finder",
    "quarantine_duplicates": "dups.moves",
    "write_report": "report.build",
    "guard": "data.guard",
    "DataLoader": "training.dataloader",
    "StatefulDataLoader": "training.stateful",
    "WorkerDied": "training.errors",
    "TooManyFailures": "data.errors",
    "SampleError": "data.dataset",
    "read_failures": "failures",
    "ReportOptions": "report.build",
    "ReportSummary": "report.build",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 (a list at run time)

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time the names load lazily (__getattr__)
    from .data.collate import collate_skip_none
    from .data.dataset import IndexedDataset, SampleError
    from .data.errors import TooManyFailures
    from .data.guard import guard
    from .denylist import read_denylist
    from .diagnose.doctor import DoctorReport, run_doctor
    from .diagnose.explain import explain_error
    from .diagnose.loader_kwargs import Recommendation, recommended_loader_kwargs
    from .diagnose.probe import check_all, probe_dataset, probe_index
    from .diagnose.sysinfo import SysPaths
    from .dups.finder import DupsOptions, DupsResult, find_duplicates, write_groups
    from .dups.moves import quarantine_duplicates
    from .errors import UserError
    from .failures import read_failures
    from .fromlog.recheck import FromLogOptions, FromLogSummary, quarantine_from_log
    from .index.bucket import BucketIndexOptions, build_bucket_index
    from .index.build import build_index
    from .index.options import IndexOptions
    from .index.splitset import build_split_indexes
    from .index.store import index_info
    from .locations import find_results
    from .pack.packer import PackOptions, PackSummary, finish_pack, pack_shards
    from .pack.verify import verify_shards
    from .quality.audio import AudioStats
    from .quality.facts import Facts
    from .quality.files import facts_from_path
    from .quality.flags import FLAGS, FlagOptions
    from .quality.image import image_facts
    from .reasons import REASONS
    from .report.build import ReportOptions, ReportSummary, write_report
    from .scanning.check import CheckOptions, check_bytes, check_file
    from .scanning.discover import DiscoverStats, iter_media
    from .scanning.quarantine.recovery import recover
    from .scanning.quarantine.restore import restore
    from .scanning.quarantine.status import quarantine_state, status
    from .scanning.results import iter_verdicts, read_problems, read_results
    from .scanning.scanner import ScanOptions, ScanSummary, scan
    from .scanning.verdict import Verdict
    from .shardsets.run import ShardScanOptions, scan_shard_set, verify_shard_set
    from .storage.scan import BucketScanOptions, scan_bucket
    from .training.dataloader import DataLoader
    from .training.errors import WorkerDied
    from .training.stateful import StatefulDataLoader


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'dsclean' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
