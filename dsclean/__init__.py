"""dsclean: make image and audio training data safe to feed to PyTorch.

Pipeline: discover -> check (parallel) -> verdicts -> quarantine -> index -> IndexedDataset.

Public names are imported on first use, so ``import dsclean`` stays cheap and
torch is loaded only by code that touches the Dataset.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "CheckOptions": "check",
    "check_file": "check",
    "DiscoverStats": "discover",
    "iter_media": "discover",
    "UserError": "errors",
    "build_index": "index",
    "index_info": "index",
    "IndexedDataset": "dataset",
    "collate_skip_none": "dataset",
    "recover": "quarantine",
    "restore": "quarantine",
    "REASONS": "reasons",
    "iter_verdicts": "results",
    "read_problems": "results",
    "read_results": "results",
    "ScanOptions": "scanner",
    "ScanSummary": "scanner",
    "scan": "scanner",
    "Verdict": "verdict",
    "recommended_loader_kwargs": "loader_kwargs",
    "Recommendation": "loader_kwargs",
    "run_doctor": "doctor",
    "DoctorReport": "doctor",
    "SysPaths": "sysinfo",
    "explain_error": "explain",
    "probe_index": "probe",
    "probe_dataset": "probe",
    "check_all": "probe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'dsclean' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
