"""dsclean: make image and audio training data safe to feed to PyTorch.

Pipeline: discover -> check (parallel) -> verdicts -> quarantine -> index -> IndexedDataset,
or index -> pack (WebDataset shards) -> verify -> IndexedDataset / webdataset.

Public names are imported on first use, so ``import dsclean`` stays cheap and
torch is loaded only by code that touches the Dataset.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "CheckOptions": "scanning.check",
    "check_file": "scanning.check",
    "check_bytes": "scanning.check",
    "DiscoverStats": "scanning.discover",
    "iter_media": "scanning.discover",
    "UserError": "errors",
    "build_index": "index.build",
    "index_info": "index.store",
    "IndexedDataset": "data.dataset",
    "collate_skip_none": "data.collate",
    "recover": "scanning.quarantine",
    "restore": "scanning.records",
    "status": "scanning.records",
    "quarantine_state": "scanning.records",
    "find_results": "locations",
    "REASONS": "reasons",
    "iter_verdicts": "scanning.results",
    "read_problems": "scanning.results",
    "read_results": "scanning.results",
    "ScanOptions": "scanning.scanner",
    "ScanSummary": "scanning.scanner",
    "scan": "scanning.scanner",
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

    "guard": "training.guard",
    "DataLoader": "training.dataloader",
    "WorkerDied": "training.errors",
    "TooManyFailures": "training.errors",
    "SampleError": "data.dataset",
    "read_failures": "failures",
    "ReportOptions": "report.build",
    "ReportSummary": "report.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'dsclean' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
