"""dsclean doctor: every system probe and every check's branches, on a fake /proc, /sys/fs/cgroup and /dev/shm."""

from __future__ import annotations

import json
import sys

import pytest
from support.fixtures_sys.fakesys import GiB, MiB, canned, facts_index, make_sys, no_shm

from dsclean.cli import diagnose as cli_doctor
from dsclean.diagnose.doctor import FAIL, OK, WARN, format_report, run_doctor, suggest_shm_size
from dsclean.diagnose.sysinfo import (
    SysPaths,
    detect_container,
    parse_cpu_list,
    parse_oom_kills,
    read_cgroup,
    read_cpus,
    read_kernel_log,
    read_meminfo,
    read_shm,
    read_start_method,
)

# ----------------------------------------------------------------------------- helpers


def doctor(tmp_path, *, index=None, sys_kw=None, **settings):
    sp = make_sys(tmp_path / "sys", **(sys_kw or {}))
    return run_doctor(index, sys_paths=sp, cuda_available=False, **settings)


@pytest.fixture
def big_index(tmp_path):
    """10 rows of 1000x1000 images (3 channels assumed): 3,000,000 decoded bytes per sample."""
    return facts_index(tmp_path / "big.arrow", tmp_path / "data")


# 4 workers x 2 prefetch x 32 batch x 3 MB = 768 MB in flight
LOADER = dict(batch_size=32, num_workers=4, prefetch_factor=2)
IN_FLIGHT = 4 * 2 * 32 * 3_000_000


# ----------------------------------------------------------------------------- probes: memory


def test_meminfo(tmp_path):
    info = read_meminfo(make_sys(tmp_path, mem_total=16 * GiB, mem_available=3 * GiB))
    assert (info.total, info.available) == (16 * GiB, 3 * GiB)


def test_meminfo_without_memavailable_falls_back_to_free_buffers_cached(tmp_path):
    text = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n"
    info = read_meminfo(make_sys(tmp_path, meminfo=text))
    assert (info.total, info.available) == (1000 * 1024, 310 * 1024)


def test_meminfo_missing(tmp_path):
    info = read_meminfo(SysPaths(proc_root=str(tmp_path / "nowhere")))
    assert (info.total, info.available) == (None, None)


# ----------------------------------------------------------------------------- probes: cgroups


def test_cgroup_v2_limits(tmp_path):
    sp = make_sys(
        tmp_path,
        cgroup="v2",
        memory_max=str(4 * GiB),
        memory_current=GiB,
        cpu_max="250000 100000",
        memory_events="oom 2\noom_kill 3\n",
    )
    cg = read_cgroup(sp)
    assert (cg.version, cg.memory_limit, cg.memory_usage, cg.cpu_quota, cg.oom_kills) == (2, 4 * GiB, GiB, 2.5, 3)


def test_cgroup_v2_unlimited(tmp_path):
    cg = read_cgroup(make_sys(tmp_path, cgroup="v2"))
    assert cg.version == 2 and cg.memory_limit is None and cg.cpu_quota is None and cg.oom_kills == 0


def test_cgroup_v2_nested_path_takes_tightest_ancestor(tmp_path):
    """A host-view path: the own cgroup is unlimited, its parent has the limit."""
    sp = make_sys(tmp_path, cgroup="v2", cg_path="/kubepods/pod1/ctr", memory_current=123)
    (tmp_path / "cgroup" / "kubepods" / "pod1" / "memory.max").write_text(f"{2 * GiB}\n")
    (tmp_path / "cgroup" / "kubepods" / "pod1" / "cpu.max").write_text("50000 100000\n")
    cg = read_cgroup(sp)
    assert (cg.memory_limit, cg.memory_usage, cg.cpu_quota) == (2 * GiB, 123, 0.5)


def test_cgroup_v1_limits(tmp_path):
    sp = make_sys(
        tmp_path,
        cgroup="v1",
        v1_limit=3 * GiB,
        v1_usage=GiB,
        v1_quota=150_000,
        v1_period=100_000,
        v1_oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
    )
    cg = read_cgroup(sp)
    assert (cg.version, cg.memory_limit, cg.memory_usage, cg.cpu_quota, cg.oom_kills) == (1, 3 * GiB, GiB, 1.5, 1)


def test_cgroup_v1_unlimited_and_nested(tmp_path):
    """v1 'unlimited' is a huge page-rounded number; a docker-style nested path is followed."""
    sp = make_sys(tmp_path, cgroup="v1", cg_path="/docker/abc")
    cg = read_cgroup(sp)
    assert cg.version == 1 and cg.memory_limit is None and cg.cpu_quota is None
    assert cg.memory_usage == 500 * MiB


def test_no_cgroup_filesystem(tmp_path):
    cg = read_cgroup(make_sys(tmp_path, cgroup=None))
    assert cg.version is None and cg.memory_limit is None


# ----------------------------------------------------------------------------- probes: CPUs


@pytest.mark.parametrize("text, n", [("0-7", 8), ("0-3,8,10-11", 7), ("5", 1), ("", 0)])
def test_parse_cpu_list(text, n):
    assert parse_cpu_list(text) == n


def test_usable_cpus_is_the_smallest_bound(tmp_path):
    assert read_cpus(make_sys(tmp_path / "a", cpu_count=32, cpus_allowed="0-7")).usable == 8
    cpus = read_cpus(make_sys(tmp_path / "b", cpu_count=32, cpus_allowed="0-7", cpu_max="250000 100000"))
    assert (cpus.logical, cpus.affinity, cpus.quota, cpus.usable) == (32, 8, 2.5, 2)
    assert read_cpus(make_sys(tmp_path / "c", cpu_count=4, cpus_allowed=None)).usable == 4
    assert read_cpus(make_sys(tmp_path / "d", cpu_max="20000 100000")).usable == 1  # 0.2 cores: at least 1


# ----------------------------------------------------------------------------- probes: shm, container, start method


def test_shm_override_and_missing(tmp_path):
    assert read_shm(make_sys(tmp_path / "a", shm=(64 * MiB, 60 * MiB))).free == 60 * MiB
    missing = read_shm(no_shm(tmp_path / "b"))
    assert missing.total is None and missing.free is None


def test_shm_statvfs_of_a_real_folder(tmp_path):
    info = read_shm(SysPaths(dev_shm=str(tmp_path)))
    assert info.total > 0 and 0 <= info.free <= info.total


def test_container_detection(tmp_path):
    assert detect_container(make_sys(tmp_path / "a")).kind is None
    assert detect_container(make_sys(tmp_path / "b", dockerenv=True)).kind == "docker"
    assert (
        detect_container(make_sys(tmp_path / "c", proc1_cgroup=canned("proc1_cgroup_docker_v1.txt"))).kind == "docker"
    )
    k8s = detect_container(make_sys(tmp_path / "d", env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, dockerenv=True))
    assert k8s.kind == "kubernetes" and len(k8s.evidence) == 2
    assert (
        detect_container(make_sys(tmp_path / "e", proc1_cgroup=canned("proc1_cgroup_kubepods.txt"))).kind
        == "kubernetes"
    )
    assert detect_container(make_sys(tmp_path / "f", env={"container": "podman"})).kind == "podman"
    assert detect_container(make_sys(tmp_path / "g", env={"container": "lxc"})).kind == "container"


def test_start_method(tmp_path):
    assert read_start_method(make_sys(tmp_path / "a")).needs_main_guard is False
    spawn = read_start_method(make_sys(tmp_path / "b", start_method="spawn", platform="darwin"))
    assert spawn.needs_main_guard and spawn.platform == "darwin"
    real = read_start_method(SysPaths())
    assert real.method in ("fork", "spawn", "forkserver")


# ----------------------------------------------------------------------------- probes: kernel log


def test_parse_oom_kills_dmesg():
    kills = parse_oom_kills(canned("kernel_log_dmesg.txt"))
    assert [(k.pid, k.process) for k in kills] == [(41877, "python"), (41880, "pt_data_worker")]
    first, second = kills
    assert first.anon_rss == 3145728 * 1024 and first.total_vm == 9876544 * 1024 and first.shmem_rss == 1024 * 1024
    assert first.constraint == "CONSTRAINT_MEMCG" and first.memcg == "/system.slice/docker-3f2a.scope"
    assert first.when == "[ 8123.457390]"
    assert second.constraint == "CONSTRAINT_NONE" and second.anon_rss == 2 * GiB


def test_parse_oom_kills_journal_and_old_kernels():
    (k,) = parse_oom_kills(canned("kernel_log_journal.txt"))
    assert (k.pid, k.process, k.anon_rss, k.when) == (2201, "python3", 15 * GiB, "Mar 03 10:15:01")
    assert k.constraint == "CONSTRAINT_MEMCG"
    (old,) = parse_oom_kills(canned("kernel_log_old.txt"))  # "Kill process ... or sacrifice child" is not a kill
    assert (old.pid, old.anon_rss, old.constraint) == (7777, 30408704 * 1024, None)
    assert parse_oom_kills(canned("kernel_log_clean.txt")) == []


def _sh(script: str) -> tuple[str, ...]:
    return (sys.executable, "-c", script)


def test_read_kernel_log_commands(tmp_path):
    denied = _sh(
        "import sys; sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n'); sys.exit(1)"
    )
    empty_journal = _sh("print('-- No entries --')")
    ok = _sh("print('[1.0] Out of memory: Killed process 5 (python) total-vm:10kB, anon-rss:8kB, file-rss:0kB')")
    log = read_kernel_log(SysPaths(kernel_log_cmds=(("no-such-dmesg-xyz",), denied, empty_journal, ok)))
    assert log.text is not None and "Killed process 5" in log.text
    assert log.errors[0] == "no-such-dmesg-xyz: not installed"
    assert "Operation not permitted" in log.errors[1]
    assert "No entries" in log.errors[2]
    unreadable = read_kernel_log(SysPaths(kernel_log_cmds=(denied,)))
    assert unreadable.text is None and "Operation not permitted" in unreadable.errors[0]


# ----------------------------------------------------------------------------- check: shared memory


def test_shm_ok_without_estimate(tmp_path):
    c = doctor(tmp_path).check("shm")
    assert c.status == OK and "pass --index" in c.detail and not c.fixes


def test_shm_small_without_estimate_warns(tmp_path):
    c = doctor(tmp_path, sys_kw={"shm": (64 * MiB, 64 * MiB), "dockerenv": True}).check("shm")
    assert c.status == WARN and "64 MB" in c.detail and "(docker)" in c.detail
    assert any(f.startswith("docker run --shm-size=1g") for f in c.fixes)


def test_shm_in_flight_does_not_fit_fails(tmp_path, big_index):
    report = doctor(tmp_path, index=big_index, sys_kw={"shm": (64 * MiB, 64 * MiB)}, **LOADER)
    c = report.check("shm")
    assert c.status == FAIL and c.data["in_flight"] == IN_FLIGHT
    assert "4 workers x 2 prefetch x 32 batch" in c.value
    fixes = "\n".join(c.fixes)
    for needle in (
        "docker run --shm-size=2g",
        "shm_size:",
        "emptyDir",
        "medium: Memory",
        "/dev/shm",
        "--ipc=host",
        "trust",
    ):
        assert needle in fixes
    assert report.exit_code == 1


def test_shm_in_flight_over_half_warns(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, sys_kw={"shm": (GiB, GiB)}, **LOADER).check("shm")
    assert c.status == WARN and "more than half" in c.detail


def test_shm_in_flight_fits(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, sys_kw={"shm": (8 * GiB, 8 * GiB)}, **LOADER).check("shm")
    assert c.status == OK and c.detail == "the batches in flight fit"


def test_shm_missing(tmp_path):
    sp = no_shm(tmp_path / "linux")
    assert run_doctor(sys_paths=sp, cuda_available=False).check("shm").status == WARN
    sp = no_shm(tmp_path / "mac", platform="darwin", start_method="spawn")
    assert run_doctor(sys_paths=sp, cuda_available=False).check("shm").status == OK


def test_suggest_shm_size():
    assert suggest_shm_size(None) == "1g"
    assert suggest_shm_size(100 * MiB) == "1g"
    assert suggest_shm_size(IN_FLIGHT) == "2g"
    assert suggest_shm_size(3 * GiB) == "8g"


# ----------------------------------------------------------------------------- check: container


def test_container_check(tmp_path):
    none = doctor(tmp_path / "a").check("container")
    assert none.status == OK and none.value == "not in a container"
    limited = doctor(tmp_path / "b", sys_kw={"memory_max": str(4 * GiB)}).check("container")
    assert "cgroup-limited" in limited.value and "OOM killer" in limited.detail
    docker = doctor(tmp_path / "c", sys_kw={"dockerenv": True, "memory_max": str(4 * GiB)}).check("container")
    assert docker.value.startswith("docker") and "64 MB" in docker.detail and "free and top" in docker.detail
    k8s = doctor(tmp_path / "d", sys_kw={"env": {"KUBERNETES_SERVICE_HOST": "x"}}).check("container")
    assert k8s.value.startswith("kubernetes") and "emptyDir" in k8s.detail and "no cgroup memory limit" in k8s.detail
    other = doctor(tmp_path / "e", sys_kw={"env": {"container": "lxc"}}).check("container")
    assert other.value.startswith("container") and "runtime's own" in other.detail


# ----------------------------------------------------------------------------- check: memory


def test_memory_estimate_over_cgroup_limit_fails(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, sys_kw={"memory_max": str(GiB), "memory_current": 100 * MiB}, **LOADER).check(
        "memory"
    )
    assert c.status == FAIL and "killed by signal: Killed" in c.detail
    assert c.data["budget_source"] == "cgroup v2 limit minus usage" and c.data["budget"] == GiB - 100 * MiB
    assert any("num_workers=" in f for f in c.fixes)


def test_memory_v1_limit_fails(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, sys_kw={"cgroup": "v1", "v1_limit": GiB, "v1_usage": 0}, **LOADER).check(
        "memory"
    )
    assert c.status == FAIL and "cgroup v1 limit 1.0 GiB" in c.value


def test_memory_estimate_over_half_warns(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, sys_kw={"mem_available": 3 * GiB}, **LOADER).check("memory")
    assert c.status == WARN and c.data["budget_source"] == "MemAvailable"


def test_memory_estimate_fits(tmp_path, big_index):
    c = doctor(tmp_path, index=big_index, **LOADER).check("memory")
    assert c.status == OK and c.data["loader_estimate"] > IN_FLIGHT


def test_memory_without_estimate(tmp_path):
    low = doctor(tmp_path / "a", sys_kw={"mem_total": 16 * GiB, "mem_available": GiB}).check("memory")
    assert low.status == WARN and "only 1.0 GiB of 16.0 GiB" in low.detail
    fine = doctor(tmp_path / "b").check("memory")
    assert fine.status == OK and fine.data["loader_estimate"] is None


def test_memory_unreadable(tmp_path):
    sp = make_sys(tmp_path, cgroup=None, meminfo="garbage\n")
    c = run_doctor(sys_paths=sp, cuda_available=False).check("memory")
    assert c.status == WARN and "could not read" in c.detail


# ----------------------------------------------------------------------------- check: CPU


def test_cpu_too_many_workers_warns(tmp_path):
    c = doctor(
        tmp_path, sys_kw={"cpu_count": 64, "cpus_allowed": "0-63", "cpu_max": "400000 100000"}, num_workers=16
    ).check("cpu")
    assert c.status == WARN and "16 workers share 4 cores" in c.detail
    assert "os.cpu_count() says 64" in c.detail and c.fixes == ["use num_workers=3"]


def test_cpu_ok(tmp_path):
    given = doctor(tmp_path / "a", num_workers=4).check("cpu")
    assert given.status == OK and "num_workers=4" in given.value and "recommended: num_workers=7" in given.detail
    assumed = doctor(tmp_path / "b").check("cpu")
    assert assumed.status == OK and "num_workers=" not in assumed.value


# ----------------------------------------------------------------------------- check: OOM kills


def test_oom_kills_found_fail(tmp_path):
    report = doctor(tmp_path, sys_kw={"kernel_log": canned("kernel_log_dmesg.txt")})
    c = report.check("oom")
    assert c.status == FAIL and "2 OOM kills" in c.value
    assert "pid 41877 (python) anon-rss 3.0 GiB, CONSTRAINT_MEMCG" in c.detail
    assert report.exit_code == 1


def test_oom_clean_log_ok(tmp_path):
    c = doctor(tmp_path, sys_kw={"kernel_log": canned("kernel_log_clean.txt")}).check("oom")
    assert c.status == OK


def test_oom_log_unreadable_warns_and_says_how_to_check(tmp_path):
    c = doctor(
        tmp_path, sys_kw={"kernel_log": None, "kernel_log_error": "dmesg: Operation not permitted", "dockerenv": True}
    ).check("oom")
    assert c.status == WARN and "Operation not permitted" in c.detail
    fixes = "\n".join(c.fixes)
    assert "sudo dmesg" in fixes and "journalctl -k" in fixes and "OOMKilled" in fixes
    k8s = doctor(
        tmp_path / "k",
        sys_kw={"kernel_log": None, "kernel_log_error": "denied", "env": {"KUBERNETES_SERVICE_HOST": "x"}},
    ).check("oom")
    assert "kubectl describe pod" in "\n".join(k8s.fixes)


def test_oom_cgroup_counter_fails_even_without_log(tmp_path):
    c = doctor(
        tmp_path / "a",
        sys_kw={"kernel_log": None, "kernel_log_error": "denied", "memory_events": "oom 1\noom_kill 2\n"},
    ).check("oom")
    assert c.status == FAIL and "counter 2" in c.value
    c = doctor(tmp_path / "b", sys_kw={"memory_events": "oom_kill 1\n"}).check("oom")
    assert c.status == FAIL and "counts 1 OOM kills" in c.value


# ----------------------------------------------------------------------------- check: start method


def test_start_method_check(tmp_path):
    fork = doctor(tmp_path / "a").check("start_method")
    assert fork.status == OK and "forked" in fork.detail
    spawn = doctor(tmp_path / "b", sys_kw={"start_method": "spawn", "platform": "darwin"}).check("start_method")
    assert spawn.status == OK and 'if __name__ == "__main__":' in spawn.detail and spawn.value == "spawn (darwin)"


# ----------------------------------------------------------------------------- report, estimate, CLI


def test_all_ok_report(tmp_path):
    report = doctor(tmp_path)
    assert report.status == OK and report.exit_code == 0
    assert [c.key for c in report.checks] == ["shm", "container", "memory", "cpu", "oom", "start_method", "torchvision"]
    text = format_report(report)
    assert text.startswith("dsclean doctor: ok") and "recommended:" in text and "DataLoader(dataset," in text


def test_estimate_measured_when_index_has_no_facts(tmp_path):
    """An index built without scan results has no facts: a few samples are decoded instead."""
    from support import synth

    from dsclean.index.build import build_index

    root = tmp_path / "data" / "c"
    root.mkdir(parents=True)
    for i in range(3):
        (root / f"{i}.png").write_bytes(synth.png(20, 10, seed=i))
    build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), check=False)  # magic bytes only: no facts
    report = doctor(tmp_path, index=str(tmp_path / "i.arrow"), batch_size=4, num_workers=2)
    assert report.estimate.method == "measured" and report.estimate.mean == 20 * 10 * 3
    assert report.check("shm").data["in_flight"] == 2 * 2 * 4 * 600


def test_estimate_from_scan_facts(tmp_path):
    """Scan then index: the width/height the scan recorded give the estimate without decoding."""
    from support import synth

    from dsclean.index.build import build_index
    from dsclean.scanning.scanner import ScanOptions, scan

    root = tmp_path / "data" / "c"
    root.mkdir(parents=True)
    for i in range(2):
        (root / f"{i}.jpg").write_bytes(synth.jpeg(40, 30, seed=i))
    scan(str(tmp_path / "data"), ScanOptions(jobs=1, progress=False))
    build_index(str(tmp_path / "data"), str(tmp_path / "i.arrow"), facts=True)  # facts only with --facts
    report = doctor(tmp_path, index=str(tmp_path / "i.arrow"))
    assert report.estimate.method == "index facts" and report.estimate.mean == 40 * 30 * 3


def test_cli_json_and_exit_codes(tmp_path, big_index, monkeypatch, cli):
    bad = make_sys(tmp_path / "bad", shm=(64 * MiB, 64 * MiB))
    monkeypatch.setattr(cli_doctor, "system_paths", lambda: bad)
    code, out, _ = cli(
        [
            "doctor",
            "--index",
            big_index,
            "--batch-size",
            "32",
            "--num-workers",
            "4",
            "--prefetch-factor",
            "2",
            "--json",
        ],
        direct=True,
    )
    data = json.loads(out)
    assert code == 1 and data["status"] == FAIL
    assert {c["key"]: c["status"] for c in data["checks"]}["shm"] == FAIL
    assert data["settings"] == {
        "batch_size": 32,
        "num_workers": 4,
        "prefetch_factor": 2,
        "given": ["batch_size", "num_workers", "prefetch_factor"],
    }
    assert data["sample_bytes"]["mean"] == 3_000_000 and "num_workers" in data["recommendation"]["kwargs"]

    good = make_sys(tmp_path / "good")
    monkeypatch.setattr(cli_doctor, "system_paths", lambda: good)
    code, out, _ = cli(["doctor"], direct=True)
    assert code == 0 and out.startswith("dsclean doctor: ok")


def test_cli_missing_index_is_a_user_error(tmp_path, monkeypatch, cli):
    from dsclean.errors import UserError

    monkeypatch.setattr(cli_doctor, "system_paths", lambda: make_sys(tmp_path / "s"))
    with pytest.raises(UserError, match="index not found"):
        cli(["doctor", "--index", str(tmp_path / "nope.arrow")], direct=True)


def test_real_system_runs(capsys):
    """On the real machine every probe answers without raising (values vary)."""
    report = run_doctor(cuda_available=False)
    assert report.status in (OK, WARN, FAIL)
    json.dumps(report.to_json())
