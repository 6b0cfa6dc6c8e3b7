"""A fake /proc, /sys/fs/cgroup, /.dockerenv and /dev/shm under tmp_path, as a SysPaths for the probes."""

from __future__ import annotations

from pathlib import Path

from dsclean.diagnose.sysinfo import SysPaths

HERE = Path(__file__).parent
GiB, MiB = 2**30, 2**20


def canned(name: str) -> str:
    """The text of a canned file in tests/support/fixtures_sys."""
    return (HERE / name).read_text()


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_sys(
    tmp_path: Path,
    *,
    cgroup: str | None = "v2",
    cg_path: str = "/",
    memory_max: str = "max",
    memory_current: int = 500 * MiB,
    cpu_max: str = "max 100000",
    memory_events: str | None = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    v1_limit: int = 9223372036854771712,
    v1_usage: int = 500 * MiB,
    v1_quota: int = -1,
    v1_period: int = 100_000,
    v1_oom_control: str | None = None,
    mem_total: int = 16 * GiB,
    mem_available: int = 12 * GiB,
    meminfo: str | None = None,
    cpus_allowed: str | None = "0-7",
    cpu_count: int = 8,
    dockerenv: bool = False,
    env: dict | None = None,
    proc1_cgroup: str | None = None,
    shm: tuple[int, int] | None = (8 * GiB, 8 * GiB),
    kernel_log: str | None = "",
    kernel_log_error: str | None = None,
    start_method: str = "fork",
    platform: str = "linux",
) -> SysPaths:
    """Build the fake tree and return SysPaths pointing at it (kernel_log "" = a readable, clean log)."""
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    if meminfo is None:
        meminfo = (
            f"MemTotal:       {mem_total // 1024} kB\nMemFree:        {mem_available // 2048} kB\n"
            f"MemAvailable:   {mem_available // 1024} kB\nBuffers:          1024 kB\n"
        )
    _put(proc / "meminfo", meminfo)
    status = "Name:\tpython\n" + (f"Cpus_allowed_list:\t{cpus_allowed}\n" if cpus_allowed else "")
    _put(proc / "self" / "status", status)
    if cgroup == "v2":
        _put(proc / "self" / "cgroup", f"0::{cg_path}\n")
        d = cg / cg_path.strip("/") if cg_path.strip("/") else cg
        _put(cg / "cgroup.controllers", "cpuset cpu io memory pids\n")
        _put(d / "memory.max", f"{memory_max}\n")
        _put(d / "memory.current", f"{memory_current}\n")
        _put(d / "cpu.max", f"{cpu_max}\n")
        if memory_events is not None:
            _put(d / "memory.events", memory_events)
    elif cgroup == "v1":
        lines = ["12:memory:" + cg_path, "11:cpu,cpuacct:" + cg_path, "1:name=systemd:" + cg_path]
        _put(proc / "self" / "cgroup", "\n".join(lines) + "\n")
        mem = cg / "memory" / cg_path.strip("/")
        _put(mem / "memory.limit_in_bytes", f"{v1_limit}\n")
        _put(mem / "memory.usage_in_bytes", f"{v1_usage}\n")
        if v1_oom_control is not None:
            _put(mem / "memory.oom_control", v1_oom_control)
        cpu = cg / "cpu,cpuacct" / cg_path.strip("/")
        _put(cpu / "cpu.cfs_quota_us", f"{v1_quota}\n")
        _put(cpu / "cpu.cfs_period_us", f"{v1_period}\n")
    else:
        _put(proc / "self" / "cgroup", "")
        cg.mkdir(parents=True, exist_ok=True)
    if proc1_cgroup is not None:
        _put(proc / "1" / "cgroup", proc1_cgroup)
    docker = tmp_path / "dockerenv"
    if dockerenv:
        docker.write_text("")
    shm_dir = tmp_path / "shm"
    return SysPaths(
        proc_root=str(proc),
        sys_cgroup=str(cg),
        dev_shm=str(shm_dir),
        dockerenv=str(docker),
        env=env or {},
        shm_usage=(lambda _p: shm) if shm is not None else None,
        kernel_log=kernel_log,
        kernel_log_error=kernel_log_error,
        cpu_count=cpu_count,
        start_method=start_method,
        platform=platform,
    )


def no_shm(tmp_path: Path, **kw) -> SysPaths:
    """A system whose /dev/shm does not exist (statvfs path, no override)."""
    return make_sys(tmp_path, shm=None, **kw)


def facts_index(
    path: Path,
    root: Path,
    *,
    rows: int = 10,
    width: int | None = 1000,
    height: int | None = 1000,
    channels: int | None = None,
    kind: int = 0,
    frames: int | None = None,
    fmt: str = "arrow",
) -> str:
    """A hand-made index whose rows carry the given media facts (files need not exist: only facts are read)."""
    import json

    import numpy as np
    import pyarrow as pa

    root.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": 1,
        "dsclean_version": "x",
        "classes": ["c"],
        "kinds": ["image", "audio"],
        "labels": "folder",
        "root": str(root),
        "created": "2020-01-01T00:00:00+00:00",
        "rows": rows,
    }
    cols = {
        "path": pa.array([f"c/{i}.png".encode() for i in range(rows)], pa.binary()),
        "label": pa.array([0] * rows, pa.int64()),
        "kind": pa.array([kind] * rows, pa.int8()),
        "size": pa.array([100] * rows, pa.int64()),
        "mtime_ns": pa.array([0] * rows, pa.int64()),
        "width": pa.array([width] * rows, pa.int32()),
        "height": pa.array([height] * rows, pa.int32()),
        "sample_rate": pa.array([None] * rows, pa.int32()),
        "frames": pa.array([frames] * rows, pa.int64()),
        "channels": pa.array([channels] * rows, pa.int32()),
    }
    if fmt == "npy":
        path.mkdir(parents=True, exist_ok=True)
        names = {"label": "labels", "kind": "kinds", "size": "sizes", "mtime_ns": "mtimes"}
        for name, arr in cols.items():
            if name == "path":  # a complete index: opening one validates every column
                blobs = arr.to_pylist()
                np.save(path / "paths.npy", np.frombuffer(b"".join(blobs), np.uint8), allow_pickle=False)
                np.save(
                    path / "offsets.npy", np.cumsum([0] + [len(b) for b in blobs], dtype=np.int64), allow_pickle=False
                )
                continue
            data = np.array([-1 if v is None else v for v in arr.to_pylist()], dtype=arr.type.to_pandas_dtype())
            np.save(path / f"{names.get(name, name)}.npy", data, allow_pickle=False)
        (path / "meta.json").write_text(json.dumps(meta))
        return str(path)
    table = pa.table(cols).replace_schema_metadata({b"dsclean": json.dumps(meta).encode()})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return str(path)
