"""Code assistance (IQuest-like models): questions about a repository pasted as context. Input
log-normal (median ~5K tokens, p99 ~45K) with repeated repository prefixes, output median ~500.

    locust -f loadtest/code_assistance.py --headless --prompt-scale 0.1 ...   # 2048-token demo model

See the README's "Load testing" section for every option; loadtest/locust.conf holds the defaults.
"""

try:
    from leakwatch.loadgen import listeners
    from leakwatch.loadgen.locust_plugin import LeakwatchShape, StreamingUser, use  # noqa: F401 (Locust finds the shape)
except ImportError as exc:  # Locust without this checkout's package
    raise SystemExit(
        f"loadtest/ needs the leakwatch package: run `make setup-dev` or `pip install -e '.[load]'` ({exc})"
    ) from None

# Corpora, sender, distributed merge, Prometheus exporter and reports (pick fewer for a leaner run).
use(*listeners.ALL)


class CodeAssistanceUser(StreamingUser):
    workload = "code"
