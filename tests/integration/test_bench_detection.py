"""`make bench-detection`, shortened: the detection targets hold and the summary line keeps its form."""

from __future__ import annotations

import re

import pytest

from benchmarks import detection as bench

pytestmark = [pytest.mark.slow]


def test_quick_bench_meets_the_detection_targets(capsys):
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(
        r"detection: article_a_vllm_min=(\d+|none) slow_leak_min=(\d+|none) worker_rss_min=(\d+|none) "
        r"healthy_false_alerts=(\d+) healthy_warning_episodes=(\d+) leak_requests_p90=(\d+|none) "
        r"fast_leak_lead_min=(-?\d+|none) fast_leak_healthy_pages=(\d+)",
        last,
    )
    assert match, last
    article_a, slow, worker, false_alerts, warnings, leak_requests, fast_lead, fast_pages = match.groups()
    assert article_a != "none" and int(article_a) <= 60, out
    assert slow != "none" and int(slow) <= 6 * 60, out
    assert worker != "none" and int(worker) <= 3 * 60, out
    assert int(false_alerts) == 0 and int(warnings) == 0, out
    # GPU leaks of 2 MB per request, at night and at the afternoon peak: within 150 leaking requests.
    assert leak_requests != "none" and int(leak_requests) <= 150, out
    worst = re.search(r"GPU leaks at any hour: .* max=(\d+)", out)
    assert worst and int(worst.group(1)) <= 150, out
    # Article A under vLLM: caught before a quarter of the headroom above the preallocation is gone.
    used = re.search(r"article_a_vllm .*\n  ours: .*\((\d+)% of the GPU headroom used\)", out)
    assert used and int(used.group(1)) < 25, out
    # The articles' own leak rule never catches article A's leak (~4 MB/min against 50 MB/min).
    article_a_block = out.split("article_a_vllm (", 1)[1].split("\n", 3)[2]
    assert "ArticleB_GPUMemoryLeakSuspected" not in article_a_block, article_a_block
    # Fast leaks (30 min to 3 h to the OOM, from a start or right after the healer's restart): each
    # paged before its memory runs out, the worst (the 30-minute leak, out of memory 33 minutes after
    # the start; the rule's window, warm-up and `for` take the first 10 after the exporter's
    # baseline) at least 20 minutes before (issue 31's goal); the healthy histories get no fast-leak
    # episode at all.
    assert fast_lead != "none" and int(fast_lead) >= 20, out
    assert int(fast_pages) == 0, out
    leads = dict(re.findall(r"\n(fast_\w+) \(.*(?:\n  .*)*?\n  first page before the memory runs out: (\d+) min", out))
    assert set(leads) == {
        "fast_host_leak",
        "fast_host_leak_30min",
        "fast_host_leak_3h",
        "fast_host_leak_after_heal",
        "fast_gpu_leak",
        "fast_gpu_leak_after_heal",
    }, out
    # After the healer's restart the leak is paged again within minutes, not HostMemoryLeak's hours.
    assert int(leads["fast_host_leak_after_heal"]) >= 45 and int(leads["fast_gpu_leak_after_heal"]) >= 45, leads
