"""Does the installed torchvision match torch? ``dsclean doctor``'s check, run in a separate process.

``pip install torchvision`` after a CPU build of torch often brings a torchvision built for
another torch (PyPI's default is a CUDA build): ``import torchvision`` then fails with
``operator torchvision::nms does not exist``. The check imports both in a child process (a
broken extension must not take doctor down), runs ``torchvision.ops.nms`` on two boxes, and
names the matching pair and the index URL to install it from.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys

#: torch minor version -> (torchvision, torchaudio) of the same release (pytorch.org's pairing table)
PAIRS = {(2, minor): (f"0.{minor + 15}", f"2.{minor}") for minor in range(4, 14)}

_PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out)); sys.exit(0)
try:
    import torchvision
    out["torchvision"] = torchvision.__version__
    from torchvision.ops import nms
    keep = nms(torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 10.0, 10.0]]), torch.tensor([0.9, 0.8]), 0.5)
    out["nms"] = keep.tolist()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def matching(torch_version: str) -> tuple[str, str] | None:
    """(torchvision, torchaudio) versions made for ``torch_version`` (e.g. ``"2.13.0+cpu"``), if known."""
    try:
        major, minor = (int(p) for p in torch_version.split("+")[0].split(".")[:2])
    except ValueError:
        return None
    return PAIRS.get((major, minor))


def index_url(torch_version: str, cuda: str | None) -> str:
    """pytorch.org's wheel index for this torch build: ``.../whl/cpu`` or ``.../whl/cu128``."""
    local = torch_version.partition("+")[2]
    if not local:
        local = f"cu{cuda.replace('.', '')}" if cuda else "cpu"
    return f"https://download.pytorch.org/whl/{local}"


def probe_torchvision(extra_path: list[str] | None = None, timeout: float = 120.0) -> dict | None:
    """What a fresh interpreter finds: torch's and torchvision's versions, and nms's result or error.

    None when torchvision is not installed (found on neither ``sys.path`` nor ``extra_path``): nothing to run.
    """
    path = [*(extra_path or []), *sys.path]
    if importlib.machinery.PathFinder.find_spec("torchvision", path) is None:
        return None
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([*extra_path, *filter(None, [env.get("PYTHONPATH")])])
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"importing torch and torchvision took more than {timeout:g} s"}
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": (out.stderr.strip().splitlines() or ["the probe printed nothing"])[-1]}


OK, FAIL = "ok", "fail"  # doctor's statuses (dsclean.diagnose.doctor builds its Check from this answer)


def torchvision_verdict(extra_path: list[str] | None = None) -> tuple[str, str, str, list[str], dict]:
    """``(status, value, detail, fixes, data)`` of doctor's ``torchvision`` check: ok (absent, or it works with
    this torch) or fail with the pair to install."""
    found = probe_torchvision(extra_path)
    if found is None:
        return (
            OK,
            "not installed",
            "dsclean does not need it; if you install it, install the build made for "
            "your torch (README: Installing torch)",
            [],
            {},
        )
    if "error" not in found:
        return (
            OK,
            f"{found['torchvision']} with torch {found['torch']}",
            "its C++ operators load (torchvision.ops.nms ran)",
            [],
            found,
        )
    torch_version = found.get("torch", "")
    pair = matching(torch_version) if torch_version else None
    fixes = []
    if pair:
        url = index_url(torch_version, found.get("cuda"))
        fixes.append(
            f"pip install torchvision=={pair[0]}.* torchaudio=={pair[1]}.* --index-url {url} "
            f"(the builds made for torch {torch_version}; add --no-deps to keep this torch)"
        )
    fixes.append(
        "or reinstall all three from one index: pip install torch torchvision torchaudio --index-url "
        "https://download.pytorch.org/whl/cpu (or .../cu128 for CUDA 12.8)"
    )
    return (
        FAIL,
        f"{found.get('torchvision', '?')} does not work with torch {torch_version or '?'}",
        f"torchvision was built for another torch: {found['error']}",
        fixes,
        found,
    )
