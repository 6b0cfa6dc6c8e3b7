"""Training failures back into the quarantine: ``dsclean quarantine --from-log`` (:mod:`.recheck`)."""

from .recheck import FromLogOptions, FromLogSummary, Recheck, quarantine_from_log

__all__ = ["FromLogOptions", "FromLogSummary", "Recheck", "quarantine_from_log"]
