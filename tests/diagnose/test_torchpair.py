"""dsclean doctor's torchvision check: absent, or the real mismatch a torchvision built for another torch gives."""

from __future__ import annotations

import glob
import sys
import zipfile

import pytest

from dsclean.diagnose.doctor import FAIL, OK, check_torchvision, run_doctor
from dsclean.diagnose.explain import explain
from dsclean.diagnose.torchpair import index_url, matching, probe_torchvision


def test_the_pairing_table():
    assert matching("2.13.0+cpu") == ("0.28", "2.13")
    assert matching("2.5.1") == ("0.20", "2.5")
    assert matching("nonsense") is None
    assert index_url("2.13.0+cpu", None) == "https://download.pytorch.org/whl/cpu"
    assert index_url("2.13.0", "12.8") == "https://download.pytorch.org/whl/cu128"


def test_doctor_reports_torchvision():
    c = run_doctor(cuda_available=False).check("torchvision")
    try:
        import torchvision  # noqa: F401
    except ImportError:
        assert (c.status, c.value) == (OK, "not installed")
    except RuntimeError:  # installed, and built for another torch: what the check is for
        assert c.status == FAIL
    else:
        assert c.status == OK and "ops.nms ran" in c.detail


def _other_torchs_torchvision(tmp_path) -> str:
    wheels = sorted(glob.glob(f"/opt/pypi-more/files/torchvision-*-cp{sys.version_info[0]}{sys.version_info[1]}-*.whl"))
    if not wheels:
        pytest.skip("no torchvision wheel of another torch on this machine")
    with zipfile.ZipFile(wheels[0]) as z:  # installed by hand into a folder of its own: this venv is untouched
        z.extractall(tmp_path / "site")
    return str(tmp_path / "site")


def test_a_torchvision_built_for_another_torch_fails_with_the_pair_to_install(tmp_path):
    import torch

    site = _other_torchs_torchvision(tmp_path)
    found = probe_torchvision([site])
    if "error" not in found:
        pytest.skip(f"that wheel works with this torch ({found})")
    assert "operator torchvision::nms does not exist" in found["error"]
    c = check_torchvision([site])
    assert c.status == FAIL and c.value.endswith(f"does not work with torch {torch.__version__}")
    want = matching(torch.__version__)
    assert c.fixes[0].startswith(
        f"pip install torchvision=={want[0]}.* torchaudio=={want[1]}.* --index-url "
        f"{index_url(torch.__version__, torch.version.cuda)}"
    )
    assert explain(found["error"]).library == "torchvision_mismatch"  # and explain names the same fix
