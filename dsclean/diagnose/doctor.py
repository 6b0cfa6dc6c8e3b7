"""``dsclean doctor``: measure the environment DataLoader workers run in, and say what to change.

Each check has a status (ok / warn / fail), the measured value, a detail saying
why it matters, and concrete fixes when it is not ok. The statuses:

- shared memory: fail when the estimated bytes in flight exceed the free space
  of /dev/shm, warn above half of it, or (without an estimate) when /dev/shm is
  smaller than 512 MiB (Docker's default is 64 MB) or missing on Linux.
- container: always ok; it explains which limits apply.
- memory: fail when the estimated loader memory exceeds what is available
  (MemAvailable or cgroup limit minus usage), warn above half of it or, without
  an estimate, when less than 10% is available.
- CPU: warn when ``num_workers`` exceeds the usable cores, ok otherwise.
- OOM kills: fail when the kernel log or the cgroup's counter shows OOM kills,
  warn when neither can be read, ok when the log is readable and clean.
- start method: always ok; on spawn/forkserver it reminds of the main guard.

The exit code is 1 when any check fails, else 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .loader_kwargs import (
    DEFAULT_PREFETCH,
    Recommendation,
    SampleEstimate,
    available_memory,
    estimate_sample_bytes,
    human,
    loader_memory,
    recommended_loader_kwargs,
)
from .sysinfo import (
    CgroupInfo,
    ContainerInfo,
    CpuInfo,
    KernelLog,
    MemInfo,
    ShmInfo,
    StartMethodInfo,
    SysPaths,
    detect_container,
    parse_oom_kills,
    read_cgroup,
    read_cpus,
    read_kernel_log,
    read_meminfo,
    read_shm,
    read_start_method,
)

OK, WARN, FAIL = "ok", "warn", "fail"
_RANK = {OK: 0, WARN: 1, FAIL: 2}
#: batch size assumed for estimates when --batch-size is not given
DEFAULT_BATCH = 32
#: below this, /dev/shm is "small" even without an estimate (Docker's default is 64 MB)
SMALL_SHM = 512 * 2**20
#: estimate above this share of the free space / available memory: warn
WARN_SHARE = 0.5
#: less than this share of memory available (no estimate): warn
LOW_MEMORY_SHARE = 0.10


@dataclass
class Check:
    """One diagnosis: ``status`` ok/warn/fail, the measured ``value``, why it matters, and fixes."""

    key: str
    title: str
    status: str
    value: str
    detail: str = ""
    fixes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)


@dataclass
class Settings:
    """The loader settings the estimates use; ``given`` lists the ones the user passed."""

    batch_size: int
    num_workers: int
    prefetch_factor: int
    given: list[str] = field(default_factory=list)


@dataclass
class DoctorReport:
    checks: list[Check]
    settings: Settings
    estimate: SampleEstimate | None
    recommendation: Recommendation
    index: str | None = None

    @property
    def status(self) -> str:
        return max((c.status for c in self.checks), key=_RANK.__getitem__, default=OK)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == FAIL else 0

    def check(self, key: str) -> Check:
        return next(c for c in self.checks if c.key == key)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "index": self.index,
            "settings": asdict(self.settings),
            "sample_bytes": self.estimate.to_json() if self.estimate else None,
            "checks": [asdict(c) for c in self.checks],
            "recommendation": self.recommendation.to_json(),
        }


# --------------------------------------------------------------------------- run


def run_doctor(
    index: str | None = None,
    *,
    batch_size: int | None = None,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    sys_paths: SysPaths = SysPaths(),
    cuda_available: bool | None = None,
) -> DoctorReport:
    """Probe the system (through ``sys_paths``) and return every check plus the loader recommendation.

    Without ``num_workers`` the estimates use the recommended number; without
    ``batch_size`` they assume 32; ``prefetch_factor`` defaults to PyTorch's 2.
    """
    estimate = estimate_sample_bytes(index) if index is not None else None
    batch = batch_size or DEFAULT_BATCH
    prefetch = prefetch_factor or DEFAULT_PREFETCH
    rec = recommended_loader_kwargs(
        None,
        batch,
        prefetch_factor=prefetch,
        sys_paths=sys_paths,
        cuda_available=cuda_available,
        sample_bytes=estimate.mean if estimate else None,
    )
    rec.estimate = estimate
    given = [
        n
        for n, v in (("batch_size", batch_size), ("num_workers", num_workers), ("prefetch_factor", prefetch_factor))
        if v is not None
    ]
    workers = num_workers if num_workers is not None else rec.kwargs["num_workers"]
    settings = Settings(batch, workers, prefetch, given)

    shm, cgroup, mem = read_shm(sys_paths), read_cgroup(sys_paths), read_meminfo(sys_paths)
    container = detect_container(sys_paths)
    start = read_start_method(sys_paths)
    cpus = read_cpus(sys_paths, cgroup)
    checks = [
        check_shm(shm, settings, estimate, container, start.platform),
        check_container(container, cgroup, shm),
        check_memory(mem, cgroup, settings, estimate, sys_paths, rec),
        check_cpu(cpus, settings, rec),
        check_oom(read_kernel_log(sys_paths), cgroup, container),
        check_start_method(start),
        check_torchvision(),
    ]
    return DoctorReport(checks, settings, estimate, rec, index)


def in_flight_bytes(settings: Settings, estimate: SampleEstimate | None) -> int | None:
    """``workers x prefetch_factor x batch_size x bytes per decoded sample`` (None without an estimate)."""
    if estimate is None:
        return None
    return settings.num_workers * settings.prefetch_factor * settings.batch_size * estimate.mean


# --------------------------------------------------------------------------- shared memory


def suggest_shm_size(in_flight: int | None) -> str:
    """A ``--shm-size`` value: twice the bytes in flight rounded up to a power of two GiB, at least 1g."""
    need = 2 * (in_flight or 0)
    gib = max(1, 2 ** math.ceil(math.log2(max(1, need / 2**30)))) if need > 2**30 else 1
    return f"{gib}g"


def shm_fixes(size: str) -> list[str]:
    """The ways to give a container more /dev/shm, plus the settings that need less of it."""
    return [
        f"docker run --shm-size={size} ...",
        f'docker compose: under the service, shm_size: "{size}b"',
        "Kubernetes: mount an emptyDir with medium: Memory at /dev/shm: "
        f"volumes: [{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: {size[:-1]}Gi}}}}] and "
        "volumeMounts: [{name: dshm, mountPath: /dev/shm}] (it counts against the pod's memory limit)",
        "docker run --ipc=host shares the host's /dev/shm; it also shares the host's IPC namespace, "
        "so use it only for containers you trust",
        "or need less: lower num_workers, prefetch_factor or batch_size",
    ]


def check_shm(
    shm: ShmInfo, settings: Settings, estimate: SampleEstimate | None, container: ContainerInfo, platform: str
) -> Check:
    """Size and free space of /dev/shm against the estimated bytes in flight."""
    title = "shared memory"
    if shm.total is None:
        if not platform.startswith("linux"):
            return Check(
                "shm",
                title,
                OK,
                f"{shm.path} not present ({platform})",
                "PyTorch shares worker batches through file descriptors on this platform",
            )
        return Check(
            "shm",
            title,
            WARN,
            f"{shm.path} does not exist",
            "PyTorch passes every worker batch through /dev/shm on Linux; without it workers fail",
            shm_fixes(suggest_shm_size(None)),
        )
    flight = in_flight_bytes(settings, estimate)
    value = f"{shm.path}: {human(shm.total)}, {human(shm.free)} free"
    data = {"path": shm.path, "total": shm.total, "free": shm.free, "in_flight": flight}
    if flight is not None:
        value += (
            f"; in flight {settings.num_workers} workers x {settings.prefetch_factor} prefetch x "
            f"{settings.batch_size} batch x {human(estimate.mean)} = {human(flight)}"
        )
    where = f" ({container.kind})" if container.kind else ""
    free = shm.free or 0
    if flight is not None and flight > free:
        return Check(
            "shm",
            title,
            FAIL,
            value,
            f"the batches in flight do not fit{where}: workers die with a bus error or 'No space left on device'",
            shm_fixes(suggest_shm_size(flight)),
            data,
        )
    if flight is not None and flight > WARN_SHARE * free:
        return Check(
            "shm",
            title,
            WARN,
            value,
            f"the batches in flight take more than half of the free space{where}; another "
            "process or a larger batch will run out",
            shm_fixes(suggest_shm_size(flight)),
            data,
        )
    if flight is None and shm.total < SMALL_SHM:
        return Check(
            "shm",
            title,
            WARN,
            value,
            f"{human(shm.total)} is small{where} (Docker's default is 64 MB): a few workers with image "
            "batches run out; pass --index (and loader settings) to compare with the bytes in flight",
            shm_fixes(suggest_shm_size(None)),
            data,
        )
    detail = (
        "the batches in flight fit"
        if flight is not None
        else "pass --index (and loader settings) to compare with the bytes in flight"
    )
    return Check("shm", title, OK, value, detail, [], data)


# --------------------------------------------------------------------------- container


def check_container(container: ContainerInfo, cgroup: CgroupInfo, shm: ShmInfo) -> Check:
    """Which container runtime (if any), and which of its limits apply to DataLoader workers."""
    data = {"kind": container.kind, "evidence": container.evidence, "cgroup_version": cgroup.version}
    limited = cgroup.memory_limit is not None or cgroup.cpu_quota is not None
    if container.kind is None:
        value = "not in a container" + (f" (but cgroup-limited, v{cgroup.version})" if limited else "")
        detail = (
            "cgroup limits apply as in a container: the OOM killer acts at the cgroup's limit, not at the machine's RAM"
            if limited
            else "the machine's limits apply directly"
        )
        return Check("container", "container", OK, value, detail, [], data)
    value = f"{container.kind} ({'; '.join(container.evidence)})"
    parts = []
    if container.kind in ("docker", "podman"):
        parts.append("/dev/shm is a separate 64 MB tmpfs unless --shm-size or --ipc=host is given")
    elif container.kind == "kubernetes":
        parts.append("/dev/shm is the runtime's 64 MB default unless an emptyDir with medium: Memory is mounted there")
    else:
        parts.append("/dev/shm is the runtime's own mount")
    if shm.total is not None:
        parts.append(f"here it is {human(shm.total)}")
    parts.append(
        "the cgroup memory limit, not the host's RAM, is where the OOM killer strikes "
        "(free and top show the host's RAM)"
        if cgroup.memory_limit
        else "no cgroup memory limit was found"
    )
    return Check("container", "container", OK, value, "; ".join(parts), [], data)


# --------------------------------------------------------------------------- memory


def check_memory(
    mem: MemInfo,
    cgroup: CgroupInfo,
    settings: Settings,
    estimate: SampleEstimate | None,
    sys_paths: SysPaths,
    rec: Recommendation,
) -> Check:
    """RAM and the cgroup limit against the estimated loader memory."""
    avail, source = available_memory(sys_paths)
    value = f"RAM {human(mem.total)} total, {human(mem.available)} available"
    if cgroup.version is not None:
        value += (
            f"; cgroup v{cgroup.version} limit "
            f"{human(cgroup.memory_limit) if cgroup.memory_limit else 'none'}, usage {human(cgroup.memory_usage)}"
        )
    need = (
        loader_memory(settings.num_workers, settings.batch_size, settings.prefetch_factor, estimate.mean)
        if estimate
        else None
    )
    data = {
        "total": mem.total,
        "available": mem.available,
        "cgroup_version": cgroup.version,
        "cgroup_limit": cgroup.memory_limit,
        "cgroup_usage": cgroup.memory_usage,
        "budget": avail,
        "budget_source": source,
        "loader_estimate": need,
    }
    fixes = [
        f"use num_workers={rec.kwargs['num_workers']} (dsclean's recommendation) or a smaller "
        "batch_size / prefetch_factor",
        "raise the limit: docker run --memory=..., or resources.limits.memory in Kubernetes",
        "keep per-sample Python objects out of the Dataset (IndexedDataset memory-maps its index) so "
        "workers do not copy them; check with dsclean probe INDEX",
    ]
    if avail is None:
        return Check(
            "memory", "memory", WARN, value, f"could not read {sys_paths.proc('meminfo')} or a cgroup limit", [], data
        )
    if need is not None:
        value += f"; loader estimate {human(need)} vs {human(avail)} ({source})"
        if need > avail:
            return Check(
                "memory",
                "memory",
                FAIL,
                value,
                "the loader would not fit: the OOM killer ends a worker with SIGKILL "
                "('DataLoader worker ... is killed by signal: Killed')",
                fixes,
                data,
            )
        if need > WARN_SHARE * avail:
            return Check(
                "memory",
                "memory",
                WARN,
                value,
                "the loader alone takes more than half of what is left for training",
                fixes,
                data,
            )
        return Check("memory", "memory", OK, value, "the loader's estimated memory fits", [], data)
    ceiling = cgroup.memory_limit or mem.total
    if ceiling and avail < LOW_MEMORY_SHARE * ceiling:
        return Check(
            "memory",
            "memory",
            WARN,
            value,
            f"only {human(avail)} of {human(ceiling)} is available ({source})",
            fixes,
            data,
        )
    return Check(
        "memory",
        "memory",
        OK,
        value,
        "pass --index (and loader settings) to compare with the loader's estimated memory",
        [],
        data,
    )


# --------------------------------------------------------------------------- CPU


def check_cpu(cpus: CpuInfo, settings: Settings, rec: Recommendation) -> Check:
    """Usable cores (affinity, cgroup quota) against num_workers."""
    value = (
        f"{cpus.usable} usable cores (os.cpu_count() {cpus.logical}, affinity {cpus.affinity}, "
        f"cgroup quota {'none' if cpus.quota is None else f'{cpus.quota:g}'})"
    )
    data = asdict(cpus) | {"num_workers": settings.num_workers, "recommended": rec.kwargs["num_workers"]}
    note = ""
    if cpus.logical and cpus.logical > cpus.usable:
        note = (
            f"; os.cpu_count() says {cpus.logical}, but only {cpus.usable} may be used: "
            "num_workers=os.cpu_count() oversubscribes"
        )
    suggestion = f"num_workers={rec.kwargs['num_workers']}"
    if "num_workers" in settings.given:
        value += f"; num_workers={settings.num_workers}"
        if settings.num_workers > cpus.usable:
            return Check(
                "cpu",
                "CPU",
                WARN,
                value,
                f"{settings.num_workers} workers share {cpus.usable} cores: they compete with each other "
                f"and the training loop, and each costs memory{note}",
                [f"use {suggestion}"],
                data,
            )
    return Check("cpu", "CPU", OK, value, f"recommended: {suggestion}{note}", [], data)


# --------------------------------------------------------------------------- OOM kills


def oom_check_fixes(container: ContainerInfo) -> list[str]:
    """How to look for OOM kills without reading the kernel log from here."""
    fixes = [
        "sudo dmesg -T | grep -i -E 'killed process|out of memory'",
        "journalctl -k --no-pager | grep -i oom (on the host, as root or in group adm/systemd-journal)",
    ]
    if container.kind in ("docker", "podman"):
        fixes.append("on the host: docker inspect --format '{{.State.OOMKilled}}' CONTAINER")
    if container.kind == "kubernetes":
        fixes.append("kubectl describe pod POD (Last State: Terminated, Reason: OOMKilled) and kubectl get events")
    fixes.append("cgroup v2: grep oom_kill /sys/fs/cgroup/memory.events")
    return fixes


def check_oom(log: KernelLog, cgroup: CgroupInfo, container: ContainerInfo) -> Check:
    """Recent 'Killed process' lines in the kernel log, and the cgroup's OOM-kill counter."""
    counter = cgroup.oom_kills
    counter_text = f"; the cgroup counts {counter} OOM kills" if counter else ""
    data: dict = {"source": log.source, "errors": log.errors, "cgroup_oom_kills": counter, "kills": []}
    fixes = [
        "find what grows: dsclean probe INDEX --num-workers W (per-worker memory over time)",
        "lower num_workers / batch_size / prefetch_factor, or raise the memory limit",
    ]
    if log.text is None:
        reason = "; ".join(log.errors) or "no kernel log source"
        if counter:
            return Check(
                "oom",
                "OOM kills",
                FAIL,
                f"cgroup OOM-kill counter {counter}",
                f"the kernel log is not readable ({reason}), but this cgroup's counter shows kills",
                fixes + oom_check_fixes(container),
                data,
            )
        return Check(
            "oom",
            "OOM kills",
            WARN,
            "kernel log not readable",
            f"{reason}; OOM kills cannot be checked from here",
            oom_check_fixes(container),
            data,
        )
    kills = parse_oom_kills(log.text)
    data["kills"] = [asdict(k) for k in kills]
    if kills:
        lines = [
            f"pid {k.pid} ({k.process}) anon-rss {human(k.anon_rss)}"
            + (f", {k.constraint}" if k.constraint else "")
            + (f" at {k.when}" if k.when else "")
            for k in kills[-5:]
        ]
        more = f" (last 5 of {len(kills)})" if len(kills) > 5 else ""
        return Check(
            "oom",
            "OOM kills",
            FAIL,
            f"{len(kills)} OOM kills in {log.source}{counter_text}",
            "the kernel killed: " + "; ".join(lines) + more,
            fixes,
            data,
        )
    if counter:
        return Check(
            "oom",
            "OOM kills",
            FAIL,
            f"none in {log.source}{counter_text}",
            "this cgroup's counter shows OOM kills the log no longer holds",
            fixes,
            data,
        )
    return Check("oom", "OOM kills", OK, f"no 'Killed process' lines in {log.source}", "", [], data)


# --------------------------------------------------------------------------- start method


def check_torchvision(extra_path: list[str] | None = None) -> Check:
    """torchvision, when installed, was built for this torch (:mod:`dsclean.diagnose.torchpair`; ``extra_path``:
    folders searched first, for tests)."""
    from .torchpair import torchvision_verdict

    status, value, detail, fixes, data = torchvision_verdict(extra_path)
    return Check("torchvision", "torchvision", status, value, detail, fixes, data)


def check_start_method(info: StartMethodInfo) -> Check:
    """fork/spawn/forkserver, and what each means for a Dataset."""
    value = f"{info.method} ({info.platform})"
    data = asdict(info)
    if info.needs_main_guard:
        return Check(
            "start_method",
            "start method",
            OK,
            value,
            "workers start a fresh interpreter that imports your script: keep the training code under "
            "'if __name__ == \"__main__\":' or every worker re-runs it; the Dataset is pickled to each "
            "worker (IndexedDataset pickles only its options)",
            [],
            data,
        )
    return Check(
        "start_method",
        "start method",
        OK,
        value,
        "workers are forked: Python objects the Dataset holds are copied into each worker as "
        "they are touched (reference counts); IndexedDataset memory-maps its index instead",
        [],
        data,
    )


# --------------------------------------------------------------------------- output


def format_report(report: DoctorReport) -> str:
    """Human-readable report: one block per check, then the recommended DataLoader arguments."""
    s = report.settings
    lines = [f"dsclean doctor: {report.status}"]
    assumed = [n for n in ("batch_size", "num_workers", "prefetch_factor") if n not in s.given]
    lines.append(
        f"loader settings: batch_size={s.batch_size}, num_workers={s.num_workers}, "
        f"prefetch_factor={s.prefetch_factor}" + (f" (assumed: {', '.join(assumed)})" if assumed else "")
    )
    if report.estimate:
        e = report.estimate
        lines.append(
            f"decoded sample: {human(e.mean)} on average, {human(e.max)} at most ({e.method}"
            + (f", {e.note}" if e.note else "")
            + ")"
        )
    for c in report.checks:
        lines.append("")
        lines.append(f"[{c.status:^4}] {c.title}: {c.value}")
        if c.detail:
            lines.append(f"       {c.detail}")
        for fix in c.fixes:
            lines.append(f"       fix: {fix}")
    lines.append("")
    lines.append("recommended:")
    lines.extend(f"  {ln}" for ln in str(report.recommendation).splitlines())
    return "\n".join(lines)
