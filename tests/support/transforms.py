"""Transforms used by DataLoader tests: importable by name (``support.transforms``) in spawned workers.

Functions defined in a test module cannot be unpickled by a ``spawn`` worker: pytest
imports test modules under names the child process cannot import.
"""

from __future__ import annotations

import numpy as np


def to_array(img) -> np.ndarray:
    return np.array(img)
