"""Memory-leak watch: is memory leaking, where (GPU or host, which vLLM process), how fast per
request, and how long until it runs out. 24 h by default, the articles' memory trend."""

from __future__ import annotations

from ..core import alert_config
from ..core.metric_catalogue import host_leak_measure
from . import levels
from .board import Annotation, Board, Panel, Query, Row, Variable
from .common import FIRING_ALERTS, HEALER_RESTARTS, INSTANCE, MODEL, VLLM_RESTARTS
from .levels import BAD, NEUTRAL, OK, WARN
from .queries import FORECAST_CAP_S, GPU, MIB, NODE, VLLM, VLLM_PROCESS, per_process, per_side, sides

GPU_VARIABLE = Variable(
    name="gpu",
    label="GPU",
    selector="leakwatch_gpu_memory_total_bytes",
    label_name="gpu",
    description="GPU index (NVML's and DCGM's gpu label). Empty on hosts without a GPU.",
)
BASELINE_TAKEN = Annotation(
    name="Baseline taken",
    expr="changes(leakwatch_baseline_timestamp_seconds[2m]) > 0",
    title_format="post-warm-up baseline taken",
    text_format="growth is measured from here on {{instance}}",
    tag_keys="instance",
    colour="blue",
)

# The exporter computes a retention ratio once a burst has raised memory and vLLM has been idle again.
BURST = "a burst of requests that raised memory, then a quiet spell"
NOT_GROWING = ((FORECAST_CAP_S, FORECAST_CAP_S * 1000, "not growing"),)

HOST_MEMORY = host_leak_measure()
HOST_HEADROOM = f"sum(node_memory_MemAvailable_bytes{{{NODE}}}) + sum(node_memory_SwapFree_bytes{{{NODE}}})"
# Limit of the vLLM container's cgroup, or the host's RAM when the cgroup has none.
MEMORY_LIMIT = f"max(leakwatch_cgroup_memory_limit_bytes) or max(node_memory_MemTotal_bytes{{{NODE}}})"
# The forecasts take the faster of the last hour's and the fast-leak rules' window's growth, so the
# panel agrees with HostMemoryRunningOut / GPUMemoryRunningOut when a fast leak pages.
# Each forecast uses its own rule's window (the GPU rule's is longer: docs in config/alerts.yaml).
FAST_WINDOW = alert_config.load().section("host").dur("runout_window")
GPU_FAST_WINDOW = alert_config.load().section("gpu").dur("runout_window")


def faster_growth(slope: str, fast_window: str = FAST_WINDOW) -> str:
    """The larger of a slope over 1h and over the fast window; `slope` has <window> to fill."""
    hour, fast = slope.replace("<window>", "1h"), slope.replace("<window>", fast_window)
    return f"(({hour}) >= ({fast}) or ({fast}))"


at_a_glance = Row(
    "Is memory leaking?",
    (
        Panel(
            title="Firing alerts",
            kind="stat",
            unit="none",
            width=4,
            height=5,
            queries=(Query('count(ALERTS{alertstate="firing"}) or vector(0)', "firing"),),
            thresholds=((1, BAD),),
            description="Alerts Prometheus is firing now (all rules). Healthy: 0. They are also drawn as "
            "red annotations on every graph.",
        ),
        Panel(
            title="Host memory growth per request (worst vLLM process role)",
            kind="stat",
            unit="bytes",
            width=4,
            height=5,
            queries=(Query("max(leakwatch_host_memory_growth_per_request_bytes)", "worst role"),),
            no_value="no baseline yet",
            thresholds=levels.GROWTH_PER_REQUEST,
            description="Anonymous memory + swap gained since the post-warm-up baseline divided by requests served since "
            "then, for the worst of API server, EngineCore and workers. Healthy: near 0 B once "
            "warm-up is over; article A's leak was ~6 MB per request.",
        ),
        Panel(
            title="GPU memory growth per request (worst GPU)",
            kind="stat",
            unit="bytes",
            width=4,
            height=5,
            gpu=True,
            queries=(Query(f"max(leakwatch_gpu_memory_growth_per_request_bytes{{{GPU}}})", "worst GPU"),),
            thresholds=levels.GROWTH_PER_REQUEST,
            description="GPU memory gained since the post-warm-up baseline divided by requests served. "
            "Healthy: near 0 B; vLLM preallocates its KV cache at start, so real growth after the "
            "baseline is a leak. GPU hosts only.",
        ),
        Panel(
            title="Time until host memory runs out",
            kind="stat",
            unit="s",
            width=4,
            height=5,
            base_colour=BAD,
            queries=(
                Query(
                    f"clamp_max(({HOST_HEADROOM}) / clamp_min({faster_growth(f'deriv(sum({HOST_MEMORY})[<window>:1m])')}, "
                    f"1e-06), {FORECAST_CAP_S})",
                    "forecast",
                ),
            ),
            thresholds=levels.EXHAUSTION,
            ranges=NOT_GROWING,
            description="Available RAM + free swap divided by how fast vLLM's processes (anonymous memory + swap, all roles) "
            f"grew over the last hour or the last {FAST_WINDOW} (the fast-leak alert's window), whichever is faster. "
            "Healthy: 'not growing' (capped at 30 days). Red below 6 h.",
        ),
        Panel(
            title="Time until the fullest GPU runs out of memory",
            kind="stat",
            unit="s",
            width=4,
            height=5,
            base_colour=BAD,
            gpu=True,
            queries=(
                Query(
                    f"min(clamp_max(DCGM_FI_DEV_FB_FREE{{{GPU}}} / clamp_min("
                    f"{faster_growth(f'deriv(DCGM_FI_DEV_FB_USED{{{GPU}}}[<window>])', GPU_FAST_WINDOW)}, 1e-06), {FORECAST_CAP_S}))",
                    "forecast",
                ),
            ),
            thresholds=levels.EXHAUSTION,
            ranges=NOT_GROWING,
            description="Free framebuffer divided by its growth over the last hour or the last "
            f"{GPU_FAST_WINDOW}, whichever is faster, for the card closest to full. Healthy: 'not growing'. With vLLM's preallocation a 6 MB/request leak on a "
            "24 GB card has ~2 GB of headroom: hours, not days. GPU hosts only.",
        ),
        Panel(
            title="Post-warm-up baseline",
            kind="stat",
            unit="none",
            width=4,
            height=5,
            base_colour=WARN,
            queries=(Query("max(leakwatch_baseline_ready)", "baseline"),),
            thresholds=((1, OK),),
            ranges=((-0.5, 0.5, "warming up"), (0.5, 1.5, "taken")),
            description="Whether the exporter has taken its baseline (vLLM healthy and warm-up requests "
            "served). Healthy: 'taken' a few minutes after start; growth figures mean nothing before it, "
            "and it is taken again after a restart.",
        ),
    ),
)

gpu_memory = Row(
    "GPU memory, per card and per vLLM process",
    (
        Panel(
            title="GPU memory used per card, with the post-warm-up baseline",
            unit="bytes",
            width=12,
            gpu=True,
            queries=(
                Query(f"DCGM_FI_DEV_FB_USED{{{GPU}}} * {MIB}", "GPU {{gpu}} used"),
                Query(
                    per_side(f"leakwatch_gpu_memory_baseline_bytes{{{GPU}}}", "GPU", "gpu"),
                    "{{series}} baseline",
                    dashed=True,
                ),
                Query(
                    per_side(f"leakwatch_gpu_memory_total_bytes{{{GPU}}}", "GPU", "gpu"),
                    "{{series}} total",
                    dashed=True,
                ),
            ),
            base_colour=NEUTRAL,
            description="Framebuffer in use (DCGM) against the baseline taken after warm-up and the card's "
            "size. Healthy: flat at the baseline (~90 % of the card under vLLM); a one-time step "
            "that then plateaus is not a leak, a line that keeps climbing under load is.",
        ),
        Panel(
            title="GPU memory per vLLM process",
            unit="bytes",
            width=12,
            gpu=True,
            stacked=True,
            queries=(Query(per_process(f"leakwatch_gpu_process_memory_bytes{{{GPU}}}"), "GPU {{gpu}} {{process}}"),),
            base_colour=NEUTRAL,
            description="GPU memory held by each vLLM process (NVML), stacked per card: tells which process "
            "holds memory that DCGM only reports per card. Healthy: flat after warm-up.",
        ),
        Panel(
            title="GPU memory growth since the baseline",
            unit="bytes",
            width=8,
            gpu=True,
            queries=(Query(per_side(f"leakwatch_gpu_memory_growth_bytes{{{GPU}}}", "GPU", "gpu"), "{{series}}"),),
            base_colour=NEUTRAL,
            description="GPU memory now minus at the post-warm-up baseline. Healthy: around 0 B with small "
            "swings; steady growth with traffic is a leak.",
        ),
        Panel(
            title="GPU memory growth per request",
            unit="bytes",
            width=8,
            gpu=True,
            queries=(
                Query(per_side(f"leakwatch_gpu_memory_growth_per_request_bytes{{{GPU}}}", "GPU", "gpu"), "{{series}}"),
            ),
            thresholds=levels.GROWTH_PER_REQUEST,
            description="Growth since the baseline divided by requests served since then: the leak's size per "
            "request. Healthy: near 0 B and falling as requests accumulate.",
        ),
        Panel(
            title="VRAM retention after bursts",
            unit="percentunit",
            width=8,
            gpu=True,
            min=0,
            max=1,
            queries=(Query(per_side(f"leakwatch_vram_retention_ratio{{{GPU}}}", "GPU", "gpu"), "{{series}}"),),
            thresholds=levels.RETENTION,
            event=BURST,
            description="Share of the GPU memory gained during the last burst of requests still held once vLLM "
            "is idle again (the articles' vram_retention_ratio); measured after a burst that gained "
            "memory. Healthy: below 30 %.",
        ),
    ),
)

host_memory = Row(
    "Host memory, per vLLM process role",
    (
        Panel(
            title="Resident memory (RSS) per vLLM process role",
            unit="bytes",
            width=8,
            queries=(Query(per_process("leakwatch_process_resident_memory_bytes"), "{{process}}"),),
            base_colour=NEUTRAL,
            description="RSS of the API server, EngineCore and each worker (vLLM's own process_* metrics only "
            "cover the API server). Healthy: flat after warm-up; real leaks often grow in "
            "EngineCore or the workers.",
        ),
        Panel(
            title="Swap used per vLLM process role",
            unit="bytes",
            width=8,
            queries=(Query(per_process("leakwatch_process_swap_bytes"), "{{process}}"),),
            base_colour=NEUTRAL,
            description="Pages of vLLM's processes pushed to swap. Healthy: 0 or flat. Swap growing while RSS "
            "looks flat is a leak hiding in swap.",
        ),
        Panel(
            title="vLLM processes per role",
            unit="none",
            width=8,
            decimals=0,
            queries=(Query(per_side("leakwatch_processes", "", "role"), "{{series}}"),),
            base_colour=NEUTRAL,
            description="Live processes per role. Healthy: constant (one API server, one EngineCore, one "
            "worker per GPU rank); a drop is a crash, a change is a restart.",
        ),
        Panel(
            title="Host memory growth since the baseline, per role",
            unit="bytes",
            width=8,
            queries=(Query(per_side("leakwatch_host_memory_growth_bytes", "", "role"), "{{series}}"),),
            base_colour=NEUTRAL,
            description="Anonymous memory + swap now minus at the post-warm-up baseline, per role. Healthy: around 0 B; "
            "linear growth with requests is a leak.",
        ),
        Panel(
            title="Host memory growth per request, per role",
            unit="bytes",
            width=8,
            queries=(Query(per_side("leakwatch_host_memory_growth_per_request_bytes", "", "role"), "{{series}}"),),
            thresholds=levels.GROWTH_PER_REQUEST,
            description="Growth since the baseline divided by requests served: from ~90 B to several MB per "
            "request in real vLLM leaks. Healthy: near 0 B and falling as requests accumulate.",
        ),
        Panel(
            title="Host memory retention after bursts, per role",
            unit="percentunit",
            width=8,
            min=0,
            max=1,
            queries=(Query(per_side("leakwatch_host_memory_retention_ratio", "", "role"), "{{series}}"),),
            thresholds=levels.RETENTION,
            event=BURST,
            description="Share of the host memory gained during the last burst still held once vLLM is idle; "
            "measured once a burst has gained a few MiB and vLLM then stayed idle for a while. "
            "Healthy: below 30 %.",
        ),
        Panel(
            title="vLLM memory against its limit",
            unit="percentunit",
            width=12,
            min=0,
            queries=(
                Query(
                    per_side(
                        f"max by ({sides()}) (process_resident_memory_bytes{{{VLLM_PROCESS}}}) / on () group_left () ({MEMORY_LIMIT})",
                        "API server RSS",
                    ),
                    "{{series}}",
                ),
                Query(
                    per_side(
                        f"max by ({sides()}) (leakwatch_cgroup_memory_usage_bytes) / on () group_left () ({MEMORY_LIMIT})",
                        "cgroup (all vLLM processes)",
                    ),
                    "{{series}}",
                ),
            ),
            thresholds=levels.MEMORY_LIMIT,
            description="Memory as a share of the container's limit (the host's RAM when there is none): the "
            "articles' HighMemoryUsage (> 90 %). Healthy: well below 90 % and flat.",
        ),
        Panel(
            title="Host memory available and swap used",
            unit="bytes",
            width=12,
            queries=(
                Query(f"node_memory_MemAvailable_bytes{{{NODE}}}", "available {{instance}}"),
                Query(
                    f"node_memory_SwapTotal_bytes{{{NODE}}} - node_memory_SwapFree_bytes{{{NODE}}}",
                    "swap used {{instance}}",
                ),
            ),
            base_colour=NEUTRAL,
            description="The whole host (node exporter). Healthy: available memory flat; falling available "
            "memory with flat vLLM RSS points at another process.",
        ),
    ),
)

breakdown = Row(
    "Where the memory goes: expected parts against the measure",
    (
        Panel(
            title="Memory of each model-holding process: weights, KV pool and the unexplained rest",
            unit="bytes",
            width=12,
            stacked=True,
            queries=(
                Query(per_process("leakwatch_memory_expected_bytes"), "{{process}} {{part}}"),
                Query(per_process("leakwatch_memory_unexplained_bytes"), "{{process}} unexplained"),
            ),
            base_colour=NEUTRAL,
            no_value="no breakdown (exporter without --profile)",
            description="Per worker (or EngineCore when it runs the model itself): the weights (the profile's "
            "parameters x dtype / tensor parallel size) and the KV pool (vLLM's blocks x bytes per block) "
            "stacked with what is left of the measure (anonymous memory + swap on the CPU backend, NVML "
            "process memory on a GPU); each process's stack adds up to its measure. On the CPU backend "
            "the pool is resident from the start (vLLM zeroes it). Healthy: flat stacks; a growing top "
            "layer is memory nothing by design accounts for.",
        ),
        Panel(
            title="Unexplained memory per model-holding process",
            unit="bytes",
            width=12,
            queries=(Query(per_process("leakwatch_memory_unexplained_bytes"), "{{process}}"),),
            base_colour=NEUTRAL,
            no_value="no breakdown (exporter without --profile)",
            description="The measure minus the weights and the KV pool. Its size is the runtime (Python and "
            "allocator heaps, oneDNN's primitives; on a GPU also the CUDA context, graphs and activation "
            "reserve: one to a few GiB); it can be negative when less is resident than expected. Healthy: "
            "flat after warm-up; steady growth with traffic is a leak.",
        ),
    ),
)

traffic = Row(
    "Traffic against memory",
    (
        Panel(
            title="Requests per second against vLLM host memory",
            unit="reqps",
            width=12,
            queries=(
                Query(
                    per_side(
                        f"sum by ({sides()}) (rate(vllm:request_success_total{{{VLLM}}}[$__rate_interval]))",
                        "requests/s",
                    ),
                    "{{series}}",
                ),
                Query(
                    per_side(f"sum by ({sides()}) ({HOST_MEMORY})", "vLLM anonymous memory + swap (all roles)"),
                    "{{series}}",
                    unit="bytes",
                    right_axis=True,
                ),
            ),
            base_colour=NEUTRAL,
            description="Article A's correlation: memory that follows the request rate up and never comes "
            "back down is a per-request leak. Healthy: memory flat whatever the traffic.",
        ),
        Panel(
            title="Python garbage collections per second (API server)",
            unit="ops",
            width=6,
            queries=(
                Query(
                    f"sum by ({sides('generation')}) (rate(python_gc_collections_total{{{VLLM_PROCESS}}}[$__rate_interval]))",
                    "generation {{generation}}",
                ),
            ),
            base_colour=NEUTRAL,
            description="Collections per generation in vLLM's API-server process. Healthy: steady with "
            "traffic; a rising generation-2 rate means objects survive and pile up.",
        ),
        Panel(
            title="Series in vLLM's /metrics",
            unit="none",
            width=6,
            queries=(Query(f"scrape_samples_scraped{{{VLLM_PROCESS}}}", "{{instance}}"),),
            base_colour=NEUTRAL,
            description="Samples Prometheus reads from vLLM per scrape (label cardinality). Healthy: flat; "
            "steady growth means label values churn (e.g. per-adapter labels) and leak memory in "
            "vLLM and Prometheus alike.",
        ),
    ),
)

exporter_health = Row(
    "Memory exporter",
    (
        Panel(
            title="Requests served since the baseline",
            unit="short",
            width=8,
            queries=(Query(per_side("leakwatch_requests_since_baseline", "requests"), "{{series}}"),),
            base_colour=NEUTRAL,
            description="The divisor of every per-request figure above. Healthy: climbing with traffic; it "
            "starts again from 0 after a restart.",
        ),
        Panel(
            title="Exporter collection time per collector",
            unit="s",
            width=8,
            queries=(Query(per_side("leakwatch_collector_duration_seconds", "", "collector"), "{{series}}"),),
            thresholds=((1, WARN),),
            description="How long each collector of `leakwatch exporter` took in its last scrape. Healthy: "
            "milliseconds; near the scrape interval the figures lag.",
        ),
        Panel(
            title="vLLM /metrics reachable from the exporter",
            unit="none",
            width=8,
            min=0,
            max=1,
            base_colour=BAD,
            queries=(Query(per_side("leakwatch_vllm_up", "vLLM up"), "{{series}}"),),
            thresholds=((1, OK),),
            ranges=((-0.5, 0.5, "down"), (0.5, 1.5, "up")),
            description="1 when the exporter could read vLLM's request counter this scrape; per-request "
            "figures need it. Healthy: 1.",
        ),
    ),
)

BOARD = Board(
    uid="leakwatch-memory",
    title="leakwatch / Memory-leak watch",
    description="Is vLLM leaking GPU or host memory, in which process, how much per request, and how "
    "long until it runs out. Growth is measured from a baseline taken after warm-up, so "
    "vLLM's preallocated KV cache never looks like a leak.",
    source="leakwatch/dashboards/memory.py",
    time_from="now-24h",
    refresh="1m",
    variables=(MODEL, INSTANCE, GPU_VARIABLE),
    rows=(at_a_glance, breakdown, gpu_memory, host_memory, traffic, exporter_health),
    annotations=(FIRING_ALERTS, VLLM_RESTARTS, HEALER_RESTARTS, BASELINE_TAKEN),
)
