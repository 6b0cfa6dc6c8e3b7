"""How many cores a scan with ``--jobs 0`` uses: the affinity mask and the cgroup CPU quota, as joblib counts them,
read without importing joblib (issue 29: its import was most of a default scan's start-up)."""

from __future__ import annotations

import os

import pytest
from joblib import cpu_count

from dsclean.scanning import cores


def test_the_count_is_joblibs_on_this_machine():
    assert cores.usable_cores() == cpu_count(only_physical_cores=False)


@pytest.fixture
def eight_cores(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    monkeypatch.setattr(cores, "CGROUP_CPU_MAX", str(tmp_path / "cpu.max"))
    monkeypatch.setattr(cores, "CGROUP_V1_QUOTA", (str(tmp_path / "quota"), str(tmp_path / "period")))
    return tmp_path


@pytest.mark.parametrize(
    "cpu_max, expected", [(None, 6), ("max 100000", 6), ("150000 100000", 2), ("50000 100000", 1), ("900000 100000", 6)]
)
def test_the_cgroup_v2_quota_rounded_up_and_the_affinity_mask(eight_cores, cpu_max, expected):
    if cpu_max is not None:
        (eight_cores / "cpu.max").write_text(cpu_max + "\n")
    assert cores.usable_cores() == expected


@pytest.mark.parametrize("quota, expected", [("-1", 6), ("250000", 3), ("garbage", 6)])
def test_the_cgroup_v1_quota_when_there_is_no_v2_file(eight_cores, quota, expected):
    (eight_cores / "quota").write_text(quota + "\n")
    (eight_cores / "period").write_text("100000\n")
    assert cores.usable_cores() == expected
