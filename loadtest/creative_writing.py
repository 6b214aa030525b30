"""Creative writing (Janeway-like models): story continuations, input ~200-800 tokens, output ~200-500.

    locust -f loadtest/creative_writing.py --headless --load-shape high-concurrency ...

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


class CreativeWritingUser(StreamingUser):
    workload = "creative"
