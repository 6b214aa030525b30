"""RSS, its anonymous part, swap, USS and PSS per role from fixture /proc trees (and one real
process), and the cgroup readings."""

from __future__ import annotations

import subprocess
import sys

from leakwatch.exporter.cgroup_memory import CgroupReader
from leakwatch.exporter.host_memory import HostMemory, anonymous_bytes
from leakwatch.exporter.process_tree import Discovery
from leakwatch.exporter.procfs import ProcFS
from tests.support.exporter_scrape import KIB, VLLM_PORT, FakeClock, cgroup_tree, proc_tree

MIB = 1 << 20


def read(proc, clock=None, interval=60.0):
    procfs = ProcFS(proc)
    tree = Discovery(procfs, VLLM_PORT).find()
    errors = []
    memory = HostMemory(procfs, interval, clock or FakeClock())
    return memory, tree, errors


def test_sums_per_role_and_rank(tmp_path):
    memory, tree, errors = read(proc_tree(tmp_path))
    reading = memory.read(tree, errors.append)
    assert errors == []
    assert reading.rss == {
        ("api_server", ""): 600000 * KIB,
        ("other", ""): 13000 * KIB,
        ("engine_core", ""): 620000 * KIB,
        ("worker", "0"): 1700000 * KIB,
        ("worker", "1"): 1710000 * KIB,
    }
    assert reading.swap[("worker", "0")] == 4096 * KIB and reading.swap[("worker", "1")] == 0
    assert reading.pss[("api_server", "")] == 500000 * KIB
    # USS = private clean + private dirty (+ private hugetlb), as psutil defines it.
    assert reading.uss[("worker", "1")] == (2000 + 1510000) * KIB
    assert reading.anonymous[("worker", "0")] == (1499900 + 100) * KIB  # RssAnon + RssShmem
    # The leak measure: anonymous memory + swap per role, workers of all ranks together.
    assert reading.anonymous_plus_swap_by_role()["worker"] == (1500000 + 4096 + 1510000) * KIB
    assert reading.anonymous_plus_swap_by_role()["api_server"] == (450000 + 2048) * KIB


def test_without_the_rss_split_the_measure_is_all_of_rss():
    """Kernels before 4.5 have no RssAnon line: nothing is left out then."""
    assert anonymous_bytes({"VmRSS": 5 * KIB, "VmSwap": 0}) == 5 * KIB
    assert anonymous_bytes({"VmRSS": 5 * KIB, "RssAnon": 3 * KIB, "RssFile": 2 * KIB, "RssShmem": 0}) == 3 * KIB


def test_file_pages_of_a_real_process_move_rss_and_not_the_leak_measure(tmp_path):
    """A real process maps a 64 MiB file and reads it in (what a vLLM process's libraries and
    mmapped weights do after the kernel dropped them under memory pressure): RSS grows by the
    file, the anonymous part does not. Then it allocates 64 MiB of heap, which is what a leak is."""
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * (64 * MIB))
    script = (
        "import mmap, sys\n"
        "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
        "total = sum(m[i] for i in range(0, len(m), 4096))\n"
        "print('mapped', flush=True); sys.stdin.readline()\n"
        "heap = bytearray(b'x' * (64 << 20))\n"
        "print('leaked', flush=True); sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    procfs = ProcFS()
    try:
        readings = {}
        for step in ("ready", "mapped", "leaked"):
            assert child.stdout.readline().strip() == step
            readings[step] = procfs.status(child.pid)
            child.stdin.write("\n")
            child.stdin.flush()
    finally:
        child.kill()
        child.wait()
    ready, mapped, leaked = readings["ready"], readings["mapped"], readings["leaked"]
    assert mapped["VmRSS"] - ready["VmRSS"] > 60 * MIB
    assert abs(anonymous_bytes(mapped) - anonymous_bytes(ready)) < 4 * MIB
    assert anonymous_bytes(leaked) - anonymous_bytes(mapped) > 60 * MIB


def test_smaps_is_cached_for_its_interval(tmp_path):
    proc = proc_tree(tmp_path)
    clock = FakeClock()
    memory, tree, errors = read(proc, clock, interval=60)
    assert memory.read(tree, errors.append).pss[("engine_core", "")] == 480000 * KIB
    rollup = proc / "102" / "smaps_rollup"
    rollup.write_text(rollup.read_text().replace("Pss:              480000 kB", "Pss:              490000 kB"))
    (proc / "102" / "status").write_text((proc / "102" / "status").read_text().replace("620000", "630000"))
    clock.advance(59)
    reading = memory.read(tree, errors.append)
    assert reading.pss[("engine_core", "")] == 480000 * KIB  # cached
    assert reading.rss[("engine_core", "")] == 630000 * KIB  # RSS is read on every scrape
    clock.advance(1)
    assert memory.read(tree, errors.append).pss[("engine_core", "")] == 490000 * KIB


def test_zero_interval_reads_smaps_every_time(tmp_path):
    proc = proc_tree(tmp_path)
    memory, tree, errors = read(proc, interval=0)
    memory.read(tree, errors.append)
    rollup = proc / "102" / "smaps_rollup"
    rollup.write_text(rollup.read_text().replace("Pss:              480000 kB", "Pss:              1 kB"))
    assert memory.read(tree, errors.append).pss[("engine_core", "")] == KIB


def test_a_failed_read_drops_that_roles_metric_and_is_reported(tmp_path):
    proc = proc_tree(tmp_path)
    (proc / "104" / "smaps_rollup").write_text("garbage\n")
    memory, tree, errors = read(proc)
    reading = memory.read(tree, errors.append)
    assert len(errors) == 1 and "Pss" in str(errors[0])
    assert ("worker", "1") not in reading.pss and ("worker", "1") not in reading.uss
    assert reading.rss[("worker", "1")] == 1710000 * KIB  # RSS still read
    assert ("worker", "0") in reading.pss


def test_an_exited_process_is_not_an_error(tmp_path):
    proc = proc_tree(tmp_path)
    memory, tree, errors = read(proc)
    for name in ("status", "smaps_rollup", "stat", "cmdline"):
        (proc / "101" / name).unlink()
    reading = memory.read(tree, errors.append)
    assert errors == [] and ("other", "") not in reading.rss


def test_cgroup_v2_with_a_limit(tmp_path):
    reader = CgroupReader(ProcFS(proc_tree(tmp_path)), cgroup_tree(tmp_path))
    memory = reader.read(100)
    assert (memory.usage, memory.limit) == (4 << 30, 16 << 30)


def test_cgroup_v2_unlimited(tmp_path):
    reader = CgroupReader(ProcFS(proc_tree(tmp_path)), cgroup_tree(tmp_path))
    memory = reader.read(300)  # in /user.slice, memory.max = max
    assert (memory.usage, memory.limit) == (1000, None)


def test_cgroup_v1_on_a_hybrid_host(tmp_path):
    proc = proc_tree(tmp_path)
    (proc / "100" / "cgroup").write_text("9:name=systemd:/\n4:memory:/docker/abc\n1:cpu:/\n0::/\n")
    root = tmp_path / "cgroup-v1"
    (root / "memory" / "docker" / "abc").mkdir(parents=True)
    (root / "unified").mkdir()
    (root / "memory" / "docker" / "abc" / "memory.usage_in_bytes").write_text("2818674688\n")
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    memory = CgroupReader(ProcFS(proc), root).read(100)
    assert (memory.usage, memory.limit) == (2818674688, None)
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text("8589934592\n")
    assert CgroupReader(ProcFS(proc), root).read(100).limit == 8 << 30


def test_cgroup_v1_of_vllms_container_seen_from_the_exporters_container(tmp_path):
    """Docker on cgroup v1 mounts each container's own memory cgroup at /sys/fs/cgroup/memory: the
    exporter (vLLM's PID namespace) has no /docker/<id> there, and reads vLLM's own mount through
    /proc/<pid>/root. Seen in the compose end-to-end test: no limit read, so the remediation alert
    forecast against the host's memory and the container was OOM-killed first."""
    proc = proc_tree(tmp_path)
    (proc / "100" / "cgroup").write_text("9:name=systemd:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n")
    exporters_own = tmp_path / "exporter-cgroup"
    (exporters_own / "memory").mkdir(parents=True)
    (exporters_own / "memory" / "memory.usage_in_bytes").write_text("5000\n")  # the exporter's, not vLLM's
    (exporters_own / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert CgroupReader(ProcFS(proc), exporters_own).read(100) is None
    vllms = proc / "100" / "root" / "sys" / "fs" / "cgroup" / "memory"
    vllms.mkdir(parents=True)
    (vllms / "memory.usage_in_bytes").write_text("3639922688\n")
    (vllms / "memory.limit_in_bytes").write_text("4373155840\n")
    memory = CgroupReader(ProcFS(proc), exporters_own).read(100)
    assert (memory.usage, memory.limit) == (3639922688, 4373155840)


def test_cgroup_v2_under_unified_on_a_hybrid_host(tmp_path):
    proc = proc_tree(tmp_path)
    root = tmp_path / "hybrid"
    (root / "unified" / "system.slice" / "vllm.service").mkdir(parents=True)
    (root / "unified" / "system.slice" / "vllm.service" / "memory.current").write_text("123\n")
    (root / "unified" / "system.slice" / "vllm.service" / "memory.max").write_text("max\n")
    assert CgroupReader(ProcFS(proc), root).read(100).usage == 123


def test_no_memory_cgroup_means_no_reading(tmp_path):
    proc = proc_tree(tmp_path)
    (proc / "100" / "cgroup").write_text("0::/\n")  # v2 root cgroup: no memory.current there
    assert CgroupReader(ProcFS(proc), tmp_path / "empty").read(100) is None


def test_cgroup_v2_of_a_container_in_another_cgroup_namespace(tmp_path):
    """A Kubernetes sidecar sees vLLM's cgroup as "/../<container>" (outside its own namespace); the
    reading comes from vLLM's own cgroupfs mount, /proc/<pid>/root/sys/fs/cgroup."""
    proc = proc_tree(tmp_path)
    (proc / "100" / "cgroup").write_text("0::/../cri-containerd-4f2a.scope\n")
    own = proc / "100" / "root" / "sys" / "fs" / "cgroup"
    own.mkdir(parents=True)
    (own / "memory.current").write_text("5368709120\n")
    (own / "memory.max").write_text("34359738368\n")
    memory = CgroupReader(ProcFS(proc), tmp_path / "sidecar-cgroup").read(100)
    assert (memory.usage, memory.limit) == (5 << 30, 32 << 30)
    (proc / "100" / "cgroup").write_text("0::/kubepods/pod1/vllm\n")  # inside our namespace: no fallback
    assert CgroupReader(ProcFS(proc), tmp_path / "sidecar-cgroup").read(100) is None
