"""The load generator's Locust listeners, one job each, opted into from a locustfile with
`leakwatch.loadgen.locust_plugin.use(...)` (the way locust-plugins' listeners are):

- `CorpusPreparation`: the server probe, the model, its client conventions, the prompts
- `Sender`: the schedule and the requests (needs CorpusPreparation)
- `StatsMerge`: workers' shares, stats, rows and notes to the master (for --processes / distributed runs)
- `PrometheusExporter`: /metrics for Prometheus and its file_sd target
- `Reports`: request log, CSV, JSON summary, HTML section, web UI tab

Each is created once per Locust process when Locust initialises, in the order given, and wires its own events.
"""

from .corpus import CorpusPreparation
from .distributed import StatsMerge
from .prometheus import PrometheusExporter
from .reports import Reports
from .sender import Sender

ALL = (CorpusPreparation, Sender, StatsMerge, PrometheusExporter, Reports)

__all__ = ["ALL", "CorpusPreparation", "PrometheusExporter", "Reports", "Sender", "StatsMerge"]
