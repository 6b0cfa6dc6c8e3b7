"""System probes for ``dsclean doctor``: shared memory, cgroups, RAM, CPUs, containers, OOM kills.

Every probe takes a :class:`SysPaths` naming where it reads from, so tests point
them at a fake tree (``/proc``, ``/sys/fs/cgroup``, ``/.dockerenv``), a fake
``/dev/shm`` size and canned kernel-log text: every branch runs without root
or Docker. Probes never raise for a missing or unreadable file: they return
``None`` fields and the caller says what could not be measured.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Mapping

#: cgroup v1 writes this (or a page-rounded variant) for "no limit"; anything this large is unlimited
_V1_UNLIMITED = 2**60
KERNEL_LOG_CMDS: tuple[tuple[str, ...], ...] = (
    ("dmesg",),
    ("journalctl", "-k", "--no-pager", "-n", "2000"),
)
_LOG_TIMEOUT = 5.0


@dataclass(frozen=True)
class SysPaths:
    """Where the probes read the system from (defaults: the real system).

    - ``shm_usage``: ``f(path) -> (total_bytes, free_bytes)`` replaces ``statvfs``
      (a tmp dir's statvfs cannot be faked).
    - ``kernel_log``: canned kernel-log text used instead of running ``kernel_log_cmds``;
      ``kernel_log_error`` simulates an unreadable log (e.g. ``"Operation not permitted"``).
    - ``env``: environment variables (``KUBERNETES_SERVICE_HOST``); ``None`` = ``os.environ``.
    - ``start_method``: overrides multiprocessing's default start method; ``platform`` overrides ``sys.platform``.
    """

    proc_root: str = "/proc"
    sys_cgroup: str = "/sys/fs/cgroup"
    dev_shm: str = "/dev/shm"
    dockerenv: str = "/.dockerenv"
    kernel_log_cmds: tuple[tuple[str, ...], ...] = KERNEL_LOG_CMDS
    env: Mapping[str, str] | None = None
    shm_usage: Callable[[str], tuple[int, int]] | None = None
    kernel_log: str | None = None
    kernel_log_error: str | None = None
    cpu_count: int | None = None
    start_method: str | None = None
    platform: str | None = None

    def environ(self) -> Mapping[str, str]:
        return os.environ if self.env is None else self.env

    def proc(self, *parts: str) -> str:
        return os.path.join(self.proc_root, *parts)


# --------------------------------------------------------------------------- small readers


def read_text(path: str) -> str | None:
    """A small file's text, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_int(path: str) -> int | None:
    """An integer file (cgroup style); ``max`` and garbage read as None."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- memory


@dataclass
class MemInfo:
    """``/proc/meminfo``: total and available RAM in bytes (None if unreadable)."""

    total: int | None = None
    available: int | None = None


def read_meminfo(paths: SysPaths) -> MemInfo:
    """MemTotal and MemAvailable (MemFree + Buffers + Cached on kernels without MemAvailable)."""
    text = read_text(paths.proc("meminfo"))
    if text is None:
        return MemInfo()
    values: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            values[m.group(1)] = int(m.group(2)) * 1024
    available = values.get("MemAvailable")
    if available is None and "MemFree" in values:
        available = values["MemFree"] + values.get("Buffers", 0) + values.get("Cached", 0)
    return MemInfo(total=values.get("MemTotal"), available=available)


# --------------------------------------------------------------------------- cgroups


@dataclass
class CgroupInfo:
    """This process's cgroup limits. ``version`` is 1, 2 or None (no cgroup file system found).

    ``memory_limit`` is None when unlimited; ``cpu_quota`` is in cores (``1.5`` = 150 ms per 100 ms).
    ``oom_kills`` is the cgroup's own OOM-kill counter (v2 ``memory.events``, v1 ``memory.oom_control``).
    """

    version: int | None = None
    path: str = "/"
    memory_limit: int | None = None
    memory_usage: int | None = None
    cpu_quota: float | None = None
    oom_kills: int | None = None
    files: list[str] = field(default_factory=list)


def _own_cgroups(paths: SysPaths) -> dict[str, str]:
    """``controller -> path`` from /proc/self/cgroup (v2's single line is under key ``""``)."""
    text = read_text(paths.proc("self", "cgroup")) or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _candidates(base: str, cg_path: str) -> list[str]:
    """``base/cg_path`` and each of its ancestors up to ``base`` (deepest first, existing only).

    Inside a container the cgroup namespace usually makes the own cgroup the root,
    but with a host view the limit sits in the nested folder: look at both.
    """
    out: list[str] = []
    rel = cg_path.strip("/")
    while True:
        d = os.path.join(base, rel) if rel else base
        if os.path.isdir(d):
            out.append(d)
        if not rel:
            break
        rel = os.path.dirname(rel)
    return out


def _min_limit(values: list[int | None]) -> int | None:
    real = [v for v in values if v is not None and 0 < v < _V1_UNLIMITED]
    return min(real) if real else None


def read_cgroup(paths: SysPaths) -> CgroupInfo:
    """Memory limit/usage and CPU quota for cgroup v2 (unified) or v1, tightest along the hierarchy."""
    own = _own_cgroups(paths)
    root = paths.sys_cgroup
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return _read_v2(root, own.get("", "/"))
    if os.path.isdir(os.path.join(root, "memory")) or os.path.isdir(os.path.join(root, "cpu")):
        return _read_v1(root, own)
    return CgroupInfo()


def _read_v2(root: str, cg_path: str) -> CgroupInfo:
    info = CgroupInfo(version=2, path=cg_path)
    dirs = _candidates(root, cg_path)
    limits = [read_int(os.path.join(d, "memory.max")) for d in dirs]
    info.memory_limit = _min_limit(limits)
    info.files = [os.path.join(d, "memory.max") for d in dirs if os.path.exists(os.path.join(d, "memory.max"))]
    for d in dirs:
        usage = read_int(os.path.join(d, "memory.current"))
        if usage is not None:
            info.memory_usage = usage
            break
    quotas = []
    for d in dirs:
        text = read_text(os.path.join(d, "cpu.max"))
        if text:
            quota, _, period = text.strip().partition(" ")
            if quota != "max":
                try:
                    quotas.append(int(quota) / int(period or 100_000))
                except (ValueError, ZeroDivisionError):
                    continue
    info.cpu_quota = min(quotas) if quotas else None
    for d in dirs:
        events = read_text(os.path.join(d, "memory.events"))
        m = re.search(r"^oom_kill (\d+)", events or "", re.M)
        if m:
            info.oom_kills = int(m.group(1))
            break
    return info


def _read_v1(root: str, own: dict[str, str]) -> CgroupInfo:
    mem_dirs = _candidates(os.path.join(root, "memory"), own.get("memory", "/"))
    info = CgroupInfo(version=1, path=own.get("memory", "/"))
    info.memory_limit = _min_limit([read_int(os.path.join(d, "memory.limit_in_bytes")) for d in mem_dirs])
    info.files = [
        os.path.join(d, "memory.limit_in_bytes")
        for d in mem_dirs
        if os.path.exists(os.path.join(d, "memory.limit_in_bytes"))
    ]
    for d in mem_dirs:
        usage = read_int(os.path.join(d, "memory.usage_in_bytes"))
        if usage is not None:
            info.memory_usage = usage
            break
    for d in mem_dirs:
        m = re.search(r"^oom_kill (\d+)", read_text(os.path.join(d, "memory.oom_control")) or "", re.M)
        if m:
            info.oom_kills = int(m.group(1))
            break
    cpu_path = own.get("cpu", own.get("cpu,cpuacct", "/"))
    cpu_base = next(
        (os.path.join(root, n) for n in ("cpu", "cpu,cpuacct") if os.path.isdir(os.path.join(root, n))),
        os.path.join(root, "cpu"),
    )
    quotas = []
    for d in _candidates(cpu_base, cpu_path):
        quota = read_int(os.path.join(d, "cpu.cfs_quota_us"))
        period = read_int(os.path.join(d, "cpu.cfs_period_us"))
        if quota is not None and quota > 0 and period:
            quotas.append(quota / period)
    info.cpu_quota = min(quotas) if quotas else None
    return info


# --------------------------------------------------------------------------- CPUs


@dataclass
class CpuInfo:
    """``logical``: os.cpu_count(); ``affinity``: CPUs this process may run on; ``quota``: cgroup cores;
    ``usable``: the smallest of them, rounded down (at least 1)."""

    logical: int | None
    affinity: int | None
    quota: float | None
    usable: int


def parse_cpu_list(text: str) -> int:
    """Number of CPUs in a list like ``0-3,8,10-11``."""
    n = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def _affinity(paths: SysPaths) -> int | None:
    """CPUs allowed for this process: ``Cpus_allowed_list`` in /proc/self/status, else sched_getaffinity."""
    status = read_text(paths.proc("self", "status"))
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", status or "", re.M)
    if m:
        try:
            return parse_cpu_list(m.group(1))
        except ValueError:
            pass  # malformed: fall through to the system call
    if paths.proc_root == "/proc" and hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return None


def read_cpus(paths: SysPaths, cgroup: CgroupInfo | None = None) -> CpuInfo:
    """Usable cores: min of the logical count, the affinity mask and the cgroup CPU quota."""
    cgroup = cgroup if cgroup is not None else read_cgroup(paths)
    logical = paths.cpu_count if paths.cpu_count is not None else os.cpu_count()
    affinity = _affinity(paths)
    limits = [float(x) for x in (logical, affinity, cgroup.cpu_quota) if x is not None]
    usable = max(1, int(min(limits))) if limits else 1
    return CpuInfo(logical=logical, affinity=affinity, quota=cgroup.cpu_quota, usable=usable)


# --------------------------------------------------------------------------- shared memory


@dataclass
class ShmInfo:
    """Size and free space of the shared-memory mount (None when it does not exist)."""

    path: str
    total: int | None
    free: int | None


def read_shm(paths: SysPaths) -> ShmInfo:
    """statvfs of ``dev_shm`` (or the ``shm_usage`` override)."""
    if paths.shm_usage is not None:
        total, free = paths.shm_usage(paths.dev_shm)
        return ShmInfo(paths.dev_shm, total, free)
    if not os.path.isdir(paths.dev_shm):
        return ShmInfo(paths.dev_shm, None, None)
    usage = shutil.disk_usage(paths.dev_shm)
    return ShmInfo(paths.dev_shm, usage.total, usage.free)


# --------------------------------------------------------------------------- containers


@dataclass
class ContainerInfo:
    """``kind``: ``kubernetes``, ``docker``, ``podman``, ``container`` (another runtime) or None."""

    kind: str | None
    evidence: list[str] = field(default_factory=list)


_RUNTIME_MARKERS = (
    ("kubepods", "kubernetes"),
    ("docker", "docker"),
    ("containerd", "container"),
    ("libpod", "podman"),
    ("crio", "container"),
    ("lxc", "container"),
)


def detect_container(paths: SysPaths) -> ContainerInfo:
    """Kubernetes (service env var, kubepods cgroup), Docker (/.dockerenv, docker cgroup), or another runtime."""
    evidence: list[str] = []
    kinds: list[str] = []
    env = paths.environ()
    if env.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST is set")
        kinds.append("kubernetes")
    if os.path.exists(paths.dockerenv):
        evidence.append(f"{paths.dockerenv} exists")
        kinds.append("docker")
    for name in ("1", "self"):
        text = read_text(paths.proc(name, "cgroup")) or ""
        for marker, kind in _RUNTIME_MARKERS:
            if marker in text:
                evidence.append(f"/proc/{name}/cgroup mentions {marker}")
                kinds.append(kind)
                break
    if env.get("container"):  # set by podman, systemd-nspawn, LXC
        evidence.append(f"container={env['container']} is set")
        kinds.append("podman" if env["container"] == "podman" else "container")
    order = ("kubernetes", "docker", "podman", "container")
    kind = next((k for k in order if k in kinds), None)
    return ContainerInfo(kind, evidence)


# --------------------------------------------------------------------------- kernel log / OOM kills


@dataclass
class OomKill:
    """One OOM kill from the kernel log (sizes in bytes)."""

    pid: int
    process: str
    anon_rss: int | None = None
    total_vm: int | None = None
    file_rss: int | None = None
    shmem_rss: int | None = None
    constraint: str | None = None
    memcg: str | None = None
    when: str | None = None
    line: str = ""


_KILLED = re.compile(r"Killed process (\d+) \((.*?)\)(.*)$")
_FIELD = re.compile(r"([a-z-]+):(\d+)kB")
_OOM_KILL = re.compile(r"oom-kill:(\S+)")
_STAMP = re.compile(r"^\s*(\[[^\]]+\]|\w{3} [ \d]\d \d\d:\d\d:\d\d)")


def parse_oom_kills(text: str) -> list[OomKill]:
    """``Killed process`` lines (plus the ``oom-kill:constraint=...`` line before them), oldest first.

    Handles ``dmesg`` (``[  12.3]``/``-T``), ``journalctl -k`` prefixes, old kernels'
    ``Kill process ... or sacrifice child`` + ``Killed process`` pairs, and
    ``Memory cgroup out of memory:`` lines.
    """
    kills: list[OomKill] = []
    pending: dict[str, str] = {}
    for line in text.splitlines():
        m = _OOM_KILL.search(line)
        if m:
            pending = dict(kv.split("=", 1) for kv in m.group(1).split(",") if "=" in kv)
            continue
        m = _KILLED.search(line)
        if not m:
            continue
        fields = {k: int(v) * 1024 for k, v in _FIELD.findall(m.group(3))}
        stamp = _STAMP.match(line)
        kill = OomKill(
            pid=int(m.group(1)),
            process=m.group(2),
            anon_rss=fields.get("anon-rss"),
            total_vm=fields.get("total-vm"),
            file_rss=fields.get("file-rss"),
            shmem_rss=fields.get("shmem-rss"),
            when=stamp.group(1) if stamp else None,
            line=line.strip(),
        )
        if pending and pending.get("pid") in (None, str(kill.pid)):
            kill.constraint = pending.get("constraint")
            kill.memcg = pending.get("oom_memcg") or pending.get("task_memcg")
        pending = {}
        kills.append(kill)
    return kills


@dataclass
class KernelLog:
    """The kernel log's text and where it came from, or why it could not be read."""

    text: str | None
    source: str | None
    errors: list[str] = field(default_factory=list)


def _usable_output(out: str) -> bool:
    lines = [
        ln
        for ln in out.splitlines()
        if ln.strip() and not ln.startswith("-- No entries --") and not ln.startswith("Hint:")
    ]
    return bool(lines)


def read_kernel_log(paths: SysPaths) -> KernelLog:
    """Run ``dmesg`` then ``journalctl -k`` (first readable wins), or use the canned text of ``paths``."""
    if paths.kernel_log is not None:
        return KernelLog(paths.kernel_log, "canned")
    if paths.kernel_log_error is not None:
        return KernelLog(None, None, [paths.kernel_log_error])
    errors: list[str] = []
    for cmd in paths.kernel_log_cmds:
        try:
            proc = subprocess.run(
                list(cmd), capture_output=True, text=True, errors="replace", timeout=_LOG_TIMEOUT, check=False
            )
        except FileNotFoundError:
            errors.append(f"{cmd[0]}: not installed")
            continue
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{cmd[0]}: {exc}")
            continue
        if proc.returncode == 0 and _usable_output(proc.stdout):
            return KernelLog(proc.stdout, " ".join(cmd), errors)
        reason = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()[0]
        errors.append(f"{' '.join(cmd)}: {reason}")
    return KernelLog(None, None, errors)


# --------------------------------------------------------------------------- start method


@dataclass
class StartMethodInfo:
    method: str
    platform: str
    needs_main_guard: bool


def read_start_method(paths: SysPaths) -> StartMethodInfo:
    """The default multiprocessing start method DataLoader workers will use (fork/spawn/forkserver)."""
    method = (
        paths.start_method
        or multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_context().get_start_method()
    )
    return StartMethodInfo(
        method=method, platform=paths.platform or sys.platform, needs_main_guard=method in ("spawn", "forkserver")
    )
