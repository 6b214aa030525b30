"""`make bench-faults`: attacks on and faults of the path to a restart, against a real `leakwatch heal`
process, a real supervisord with a stand-in target and a real Alertmanager 0.25 with our auth and
routing. Restarts are counted from the target's own start log. The last line reads
`faults: attacks_refused=N/N faults_recovered=N/N storm_restarts=N lost_alerts=N`:
  attacks_refused  attacks that caused no restart and were refused;
  faults_recovered faults after which a genuine episode restarted the target exactly once;
  storm_restarts   restarts caused by 100 identical notifications within a second (exactly 1: more
                   is a storm, none is a lost alert);
  lost_alerts      genuine episodes (the storm's included), after a fault or through Alertmanager,
                   that restarted nothing.
Waits are keyed on events (the healer's own count of finished restarts, the target's start log),
with generous bounds, so a loaded machine gives the same line as a quiet one.
The same attacks, one by one and with more assertions, are tests/integration/test_healer_attacks.py.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.test_healer_alertmanager_auth import real_alertmanager, remediation_alert
from tests.support.healer_support import (
    alert,
    healer_process,
    metric,
    notification,
    start_healer_process,
    stop_healer,
    supervised_standin,
    wait_for,
)

TARGET = "leakwatch=127.0.0.1:9405"


def main() -> int:
    attacks: dict[str, bool] = {}
    faults: dict[str, bool] = {}
    lost = 0
    counter = iter(range(0x1000, 0x10000))

    def episode() -> dict:
        return notification(alert(fingerprint=f"{next(counter):x}", starts_at=time.time()))

    with supervised_standin() as target, tempfile.TemporaryDirectory(prefix="lw-faults-") as tmp:
        folder = Path(tmp)

        def restarted_once(before: int, timeout: float = 90) -> bool:
            try:
                wait_for(lambda: len(target.starts()) >= before + 1, timeout=timeout)
            except AssertionError:
                return False
            time.sleep(2)
            return len(target.starts()) == before + 1

        def genuine(healer) -> bool:
            nonlocal lost
            wait_for(lambda: target.rpc().getProcessInfo("vllm")["statename"] == "RUNNING", timeout=60)
            # Sequencing only (the count comes from the target): the previous restart has finished.
            wait_for(lambda: metric(healer.url, "leakwatch_healer_remediation_in_progress") == 0, timeout=120)
            before = len(target.starts())
            resp = healer.post(episode())
            ok = resp.status_code == 202 and restarted_once(before)
            if not ok:
                print(
                    f"  a genuine episode got HTTP {resp.status_code} {resp.text[:200]!r}; starts {before} -> "
                    f"{len(target.starts())}"
                )
            lost += 0 if ok else 1
            return ok

        state = folder / "state" / "state.json"
        with healer_process(
            target, folder, "--target", TARGET, state_file=state, cooldown="0s", max_restarts_per_hour=1000
        ) as healer:

            def refused(name: str, send) -> None:
                before = len(target.starts())
                status = send()
                time.sleep(1)
                attacks[name] = 400 <= status < 500 and len(target.starts()) == before

            port = int(healer.url.rsplit(":", 1)[1])

            def raw(data: bytes) -> int:
                with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
                    sock.sendall(data)
                    reply = sock.recv(4096)
                return int(reply.split()[1]) if reply.startswith(b"HTTP/1.1 ") else 0

            body = notification(alert(fingerprint="aaaa", starts_at=time.time()))
            refused("no token", lambda: healer.post(body, token=None).status_code)
            refused("wrong token", lambda: healer.post(body, token=healer.token[:-1] + "x").status_code)
            refused(
                "forged alertname",
                lambda: (
                    healer.post(
                        episode()
                        | {"alerts": [alert(name="TotallyNotALeak", fingerprint="bbbb", starts_at=time.time())]}
                    ).status_code
                ),
            )
            refused(
                "foreign instance",
                lambda: (
                    healer.post(
                        notification(alert(fingerprint="cccc", starts_at=time.time(), instance="other-host:9405"))
                    ).status_code
                ),
            )
            refused(
                "foreign job",
                lambda: (
                    healer.post(notification(alert(fingerprint="dddd", starts_at=time.time(), job="node"))).status_code
                ),
            )
            # Issue 32 N6: the native stack has no dcgm job, so no dcgm alert is about its vLLM.
            refused(
                "dcgm alert from any instance",
                lambda: (
                    healer.post(
                        notification(
                            alert(
                                name="GPUMemoryLeakSuspected",
                                fingerprint="dddf",
                                starts_at=time.time(),
                                job="dcgm",
                                instance="other-host:9400",
                            )
                        )
                    ).status_code
                ),
            )
            import json

            data = json.dumps(body).encode()
            refused(
                "duplicate Authorization",
                lambda: raw(
                    f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nAuthorization: Bearer "
                    f"{healer.token}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                    + data
                ),
            )
            refused(
                "Content-Length 1_0",
                lambda: raw(
                    f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {healer.token}\r\n"
                    f"Content-Length: 1_0\r\n\r\n{{}}".encode()
                ),
            )

            # Faults, each followed by a genuine episode that must restart the target exactly once.
            state.with_suffix(".tmp").mkdir(parents=True)
            before = len(target.starts())
            status = healer.post(episode()).status_code
            state.with_suffix(".tmp").rmdir()
            faults["state write fails"] = status == 503 and len(target.starts()) == before and genuine(healer)

            pid = int(target.layout.supervisord_pid.read_text())
            os.kill(pid, signal.SIGSTOP)
            try:
                healer.post(episode())
                time.sleep(15)  # beyond the healer's 10 s RPC timeout
            finally:
                os.kill(pid, signal.SIGCONT)
            faults["supervisord hung 15 s"] = genuine(healer)

            socks = []
            for _ in range(400):
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                s.sendall(b"POST /alerts HTTP/1.1\r\n")
                socks.append(s)
            faults["400 slow connections"] = genuine(healer)
            for s in socks:
                s.close()

            def fat():
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                        s.sendall(b"POST /alerts HTTP/1.1\r\n" + (b"X-Fat: " + b"a" * 65000 + b"\r\n") * 98)
                except OSError:
                    pass

            threads = [threading.Thread(target=fat) for _ in range(40)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            faults["40 fat-header connections"] = genuine(healer)

            # The storm: 100 identical notifications within a second.
            # After the last episode's restart has finished: an alert during a restart is `in_progress`
            # (decided anew on Alertmanager's repeat), which the storm, sent once, would never get.
            wait_for(lambda: target.rpc().getProcessInfo("vllm")["statename"] == "RUNNING", timeout=60)
            wait_for(lambda: metric(healer.url, "leakwatch_healer_remediation_in_progress") == 0, timeout=120)
            before = len(target.starts())
            finished_before = finished_restarts(healer)
            storm = episode()
            senders = [threading.Thread(target=lambda: healer.post(storm)) for _ in range(100)]
            for t in senders:
                t.start()
            for t in senders:
                t.join(timeout=60)
            # The event: the healer has finished the storm's one restart (success or not), then a
            # quiet moment in which no second one may begin.
            wait_for(lambda: finished_restarts(healer) >= finished_before + 1, timeout=300)
            wait_for(lambda: metric(healer.url, "leakwatch_healer_remediation_in_progress") == 0, timeout=120)
            time.sleep(3)
            storm_restarts = len(target.starts()) - before
            lost += 0 if storm_restarts >= 1 else 1

        # Issue 32 N7: a state file whose restart time is infinite once silently turned healing off
        # (every later alert "handled"); the healer must refuse to start and keep the file.
        poisoned = folder / "poisoned.json"
        poisoned.write_text('{"restarts": [1e999], "seen": {}}')
        bad = start_healer_process(target, folder, state_file=poisoned, wait=False)
        faults["poisoned state file refused, kept"] = (
            bad.proc.wait(timeout=60) == 2
            and "restarts[0] is inf" in bad.log_text()
            and poisoned.read_text() == '{"restarts": [1e999], "seen": {}}'
        )

        # The healer restarts, its cap holds: with max 1/h the restarted healer must refuse a new episode.
        capped = folder / "capped.json"
        first = start_healer_process(target, folder, state_file=capped, cooldown="0s", max_restarts_per_hour=1)
        ok_first = genuine(first)
        stop_healer(first)
        with healer_process(target, folder, state_file=capped, cooldown="0s", max_restarts_per_hour=1) as second:
            before = len(target.starts())
            resp = second.post(episode())
            time.sleep(2)
            faults["healer restart keeps its cap"] = (
                ok_first
                and resp.status_code == 200
                and resp.json()["alerts"][0]["decision"] == "rate_limited"
                and len(target.starts()) == before
            )

        # Through a real Alertmanager with our credentials and routing.
        with (
            healer_process(target, folder, "--target", TARGET, cooldown="0s") as healer,
            real_alertmanager(folder, healer.url, folder / "token") as (am, auth),
        ):
            refused(
                "unauthenticated Alertmanager alert",
                lambda: requests.post(f"{am}/api/v2/alerts", json=remediation_alert(), timeout=10).status_code,
            )
            refused(
                "unauthenticated Alertmanager silence",
                lambda: (
                    requests.post(
                        f"{am}/api/v2/silences",
                        json={
                            "matchers": [{"name": "alertname", "value": ".+", "isRegex": True}],
                            "createdBy": "x",
                            "comment": "x",
                            "startsAt": "2026-01-01T00:00:00Z",
                            "endsAt": "2099-01-01T00:00:00Z",
                        },
                        timeout=10,
                    ).status_code
                ),
            )
            before = len(target.starts())
            requests.post(f"{am}/api/v2/alerts", json=remediation_alert(), auth=auth, timeout=10)
            if not restarted_once(before, timeout=60):
                lost += 1

    for name, ok in {**attacks, **faults}.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(
        f"faults: attacks_refused={sum(attacks.values())}/{len(attacks)} "
        f"faults_recovered={sum(faults.values())}/{len(faults)} storm_restarts={storm_restarts} lost_alerts={lost}"
    )
    return 0 if all(attacks.values()) and all(faults.values()) and storm_restarts == 1 and lost == 0 else 1


def finished_restarts(healer) -> float:
    """Restarts the healer has finished, whatever their result (its own count, not the clock)."""
    total = 0.0
    for result in ("success", "failed"):
        try:
            total += metric(healer.url, "leakwatch_healer_restarts_total", result=result)
        except KeyError:
            pass  # no restart with this result yet
    return total


if __name__ == "__main__":
    raise SystemExit(main())
