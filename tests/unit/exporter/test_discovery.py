"""Process discovery on fixture /proc trees: which processes are vLLM's, their roles and ranks."""

from __future__ import annotations

import shutil

import pytest

from leakwatch.exporter.process_tree import Discovery, classify
from leakwatch.exporter.procfs import ProcFS
from tests.support.exporter_scrape import VLLM_PORT, FakeClock, proc_tree


@pytest.mark.parametrize(
    "title, expected",
    [
        ("VLLM::EngineCore", ("engine_core", "")),
        ("VLLM::EngineCore_DP1", ("engine_core", "")),
        ("VLLM::Worker", ("worker", "0")),  # vLLM 0.32 with one worker (this CPU machine)
        ("VLLM::Worker_TP3", ("worker", "3")),  # tensor parallel
        ("VLLM::Worker-2", ("worker", "2")),  # older releases
        ("VLLM::Worker_DP0_PP1_TP2", ("worker", "DP0_PP1_TP2")),
        ("VLLM::APIServer_1", ("api_server", "")),  # --api-server-count > 1
        ("VLLM::DPCoordinator", ("other", "")),
        ("/venv/bin/python -B -c from multiprocessing.resource_tracker import main;main(32)", ("other", "")),
        ("VLLM::Workerish", ("other", "")),
    ],
)
def test_classify(title, expected):
    assert classify(title) == expected


def test_classify_with_a_custom_prefix():
    assert classify("MYLLM::Worker_TP1", prefix="MYLLM") == ("worker", "1")
    assert classify("VLLM::Worker_TP1", prefix="MYLLM") == ("other", "")


def roles(tree):
    return sorted((p.pid, p.role, p.rank) for p in tree.processes)


def test_finds_the_tree_listening_on_the_port(tmp_path):
    tree = Discovery(ProcFS(proc_tree(tmp_path)), VLLM_PORT).find()
    assert tree.root_pid == 100
    # EngineCore (102) holds an inherited copy of the listening socket: its parent listens too, so
    # it is not a root. The other vLLM (200, 201) and unrelated processes are left out.
    assert roles(tree) == [
        (100, "api_server", ""),
        (101, "other", ""),
        (102, "engine_core", ""),
        (103, "worker", "0"),
        (104, "worker", "1"),
    ]
    assert (tree.count("worker"), tree.count("engine_core"), tree.count("api_server")) == (2, 1, 1)


def test_another_port_finds_the_other_server(tmp_path):
    tree = Discovery(ProcFS(proc_tree(tmp_path)), 8100).find()
    assert roles(tree) == [(200, "api_server", ""), (201, "engine_core", "")]


def test_no_listener_means_no_tree(tmp_path):
    assert Discovery(ProcFS(proc_tree(tmp_path)), 9999).find() is None


def test_a_connected_but_not_listening_socket_is_not_the_server(tmp_path):
    proc = proc_tree(tmp_path)
    # Only the established connection (inode 5002, state 01) stays on port 8000.
    (proc / "100" / "fd" / "3").unlink()
    (proc / "102" / "fd" / "3").unlink()
    assert Discovery(ProcFS(proc), VLLM_PORT).find() is None


def test_restart_gives_a_new_identity_and_new_processes(tmp_path):
    proc = proc_tree(tmp_path)
    discovery = Discovery(ProcFS(proc), VLLM_PORT)
    before = discovery.find()
    # vLLM restarted: the old tree is gone; the new API server is pid 150 with a new EngineCore.
    for pid in (100, 101, 102, 103, 104):
        shutil.rmtree(proc / str(pid))
    _clone(proc, 200, 150, ppid=1)  # an API server like 200, moved to port 8000
    _clone(proc, 201, 151, ppid=150)
    (proc / "150" / "fd" / "3").unlink()
    (proc / "150" / "fd" / "3").symlink_to("socket:[5001]")
    after = discovery.find()
    assert after.identity != before.identity
    assert roles(after) == [(150, "api_server", ""), (151, "engine_core", "")]


def test_a_reused_pid_is_a_new_process(tmp_path):
    proc = proc_tree(tmp_path)
    discovery = Discovery(ProcFS(proc), VLLM_PORT)
    before = discovery.find()
    stat = proc / "100" / "stat"
    fields = stat.read_text().split(" ")
    fields[21] = "999999"  # starttime: same pid, a different process
    stat.write_text(" ".join(fields))
    assert discovery.find().identity == (100, 999999) != before.identity


def test_a_process_that_exits_mid_scan_is_left_out(tmp_path):
    proc = proc_tree(tmp_path)
    procfs = ProcFS(proc)
    discovery = Discovery(procfs, VLLM_PORT, rescan_s=0)  # walk /proc on every call
    discovery.find()
    original = procfs.title

    def title(pid):
        if pid == 104:
            shutil.rmtree(proc / "104")  # gone between the stat scan and the title read
        return original(pid)

    procfs.title = title
    assert [p.pid for p in discovery.find().processes] == [100, 101, 102, 103]


def test_a_known_tree_is_checked_cheaply_and_walked_again_every_rescan(tmp_path):
    proc = proc_tree(tmp_path)
    clock = FakeClock()
    discovery = Discovery(ProcFS(proc), VLLM_PORT, rescan_s=30, clock=clock)
    discovery.find()
    shutil.rmtree(proc / "101")  # a child exits: gone at once
    _clone(proc, 103, 105, ppid=102)  # a new worker appears: seen at the next walk
    (proc / "105" / "cmdline").write_bytes(b"VLLM::Worker_TP2\0")
    clock.advance(29)
    assert [p.pid for p in discovery.find().processes] == [100, 102, 103, 104]
    clock.advance(1)
    assert [(p.pid, p.rank) for p in discovery.find().processes][-1] == (105, "2")


def test_while_vllm_is_down_it_is_looked_for_every_retry(tmp_path):
    proc = proc_tree(tmp_path)
    clock = FakeClock()
    listener = proc / "100" / "fd" / "3"
    listener.unlink()
    (proc / "102" / "fd" / "3").unlink()
    discovery = Discovery(ProcFS(proc), VLLM_PORT, retry_s=2, clock=clock)
    assert discovery.find() is None
    listener.symlink_to("socket:[5001]")  # vLLM is listening now
    clock.advance(1)
    assert discovery.find() is None  # not looked for yet
    clock.advance(1)
    assert discovery.find().root_pid == 100


def _clone(proc, source: int, pid: int, ppid: int) -> None:
    shutil.copytree(proc / str(source), proc / str(pid), symlinks=True)
    fields = (proc / str(pid) / "stat").read_text().split(" ")
    fields[0], fields[3], fields[21] = str(pid), str(ppid), str(5000 + pid)
    (proc / str(pid) / "stat").write_text(" ".join(fields))


def test_the_listener_is_found_in_its_own_network_namespace(tmp_path):
    """As in compose: vLLM listens inside its container's network namespace, not the exporter's."""
    proc = proc_tree(tmp_path)
    for pid in (100, 102):
        for link in (proc / str(pid) / "fd").iterdir():
            if link.name != "0":
                link.unlink()
    (proc / "200" / "ns" / "net").unlink()
    (proc / "200" / "ns" / "net").symlink_to("net:[4026532999]")
    (proc / "200" / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7001 1 0 100 0 0 10 0\n"
    )
    (proc / "200" / "fd" / "3").unlink()
    (proc / "200" / "fd" / "3").symlink_to("socket:[7001]")
    tree = Discovery(ProcFS(proc), VLLM_PORT).find()
    assert roles(tree) == [(200, "api_server", ""), (201, "engine_core", "")]
