"""GPUs (DCGM): utilisation, framebuffer, temperature, power and health per card, from NVIDIA's
dcgm-exporter default counters (config/metrics/dcgm-exporter.csv). GPU hosts only."""

from __future__ import annotations

from . import levels
from .board import Board, Panel, Query, Row, Variable
from .common import FIRING_ALERTS
from .levels import BAD, NEUTRAL, WARN
from .queries import MIB

DCGM_INSTANCE = Variable(
    name="instance",
    label="DCGM exporter",
    selector="DCGM_FI_DEV_GPU_UTIL",
    label_name="instance",
    description="The dcgm-exporter (one per GPU host).",
)
CARD = Variable(
    name="gpu",
    label="GPU",
    selector='DCGM_FI_DEV_GPU_UTIL{instance=~"$instance"}',
    label_name="gpu",
    description="GPU index on the selected hosts.",
)
SEL = 'instance=~"$instance", gpu=~"$gpu"'
PER_CARD = "GPU {{gpu}} {{modelName}}"
USED_SHARE = f"DCGM_FI_DEV_FB_USED{{{SEL}}} / (DCGM_FI_DEV_FB_USED{{{SEL}}} + DCGM_FI_DEV_FB_FREE{{{SEL}}})"

now = Row(
    "All cards now",
    (
        Panel(
            title="GPUs reporting",
            kind="stat",
            unit="none",
            width=4,
            height=5,
            gpu=True,
            decimals=0,
            queries=(Query(f"count(DCGM_FI_DEV_GPU_UTIL{{{SEL}}})", "GPUs"),),
            base_colour=NEUTRAL,
            description="Cards DCGM reports. Healthy: every card of the host (e.g. 4 for IQuest-Coder at "
            "tensor parallel 4); fewer means a card fell off the bus or the exporter lost it.",
        ),
        Panel(
            title="Mean GPU utilisation",
            kind="stat",
            unit="percent",
            width=4,
            height=5,
            gpu=True,
            min=0,
            max=100,
            queries=(Query(f"avg(DCGM_FI_DEV_GPU_UTIL{{{SEL}}})", "utilisation"),),
            base_colour=NEUTRAL,
            description="Share of time a kernel ran, averaged over cards. Healthy: follows traffic; it says "
            "nothing about how full the card's compute is.",
        ),
        Panel(
            title="Fullest card's memory",
            kind="stat",
            unit="percentunit",
            width=4,
            height=5,
            gpu=True,
            min=0,
            max=1,
            queries=(Query(f"max({USED_SHARE})", "used"),),
            thresholds=levels.GPU_MEMORY_USED,
            description="Framebuffer used on the fullest card. Healthy under vLLM: ~90 % from start-up (its KV "
            "cache is preallocated); leaks show on the memory-leak dashboard as growth.",
        ),
        Panel(
            title="Hottest card",
            kind="stat",
            unit="celsius",
            width=4,
            height=5,
            gpu=True,
            queries=(Query(f"max(DCGM_FI_DEV_GPU_TEMP{{{SEL}}})", "temperature"),),
            thresholds=levels.GPU_TEMP,
            description="Highest GPU die temperature. Healthy: below 80 °C; cards throttle clocks when hot.",
        ),
        Panel(
            title="Total power draw",
            kind="stat",
            unit="watt",
            width=4,
            height=5,
            gpu=True,
            queries=(Query(f"sum(DCGM_FI_DEV_POWER_USAGE{{{SEL}}})", "power"),),
            base_colour=NEUTRAL,
            description="Power drawn by the selected cards together. Healthy: follows load, below the cards' "
            "power limits.",
        ),
        Panel(
            title="Last XID error",
            kind="stat",
            unit="none",
            width=4,
            height=5,
            gpu=True,
            decimals=0,
            queries=(Query(f"max(DCGM_FI_DEV_XID_ERRORS{{{SEL}}})", "XID"),),
            thresholds=((1, BAD),),
            description="The most recent XID (driver-reported GPU error) code on any card. Healthy: 0; "
            "anything else, look the code up in NVIDIA's XID catalogue.",
        ),
    ),
)

per_card = Row(
    "Per card",
    (
        Panel(
            title="GPU utilisation",
            unit="percent",
            width=12,
            gpu=True,
            min=0,
            max=100,
            queries=(
                Query(f"DCGM_FI_DEV_GPU_UTIL{{{SEL}}}", PER_CARD + " compute"),
                Query(f"DCGM_FI_DEV_MEM_COPY_UTIL{{{SEL}}}", PER_CARD + " memory bandwidth"),
            ),
            base_colour=NEUTRAL,
            description="Time a kernel ran and memory-interface activity per card. Healthy: follows traffic "
            "and is even across tensor-parallel ranks.",
        ),
        Panel(
            title="Framebuffer used and free",
            unit="bytes",
            width=12,
            gpu=True,
            stacked=True,
            queries=(
                Query(f"DCGM_FI_DEV_FB_USED{{{SEL}}} * {MIB}", PER_CARD + " used"),
                Query(f"DCGM_FI_DEV_FB_FREE{{{SEL}}} * {MIB}", PER_CARD + " free"),
            ),
            base_colour=NEUTRAL,
            description="GPU memory per card (DCGM reports MiB; shown in bytes). Healthy: flat after "
            "vLLM's start-up allocation.",
        ),
        Panel(
            title="Framebuffer used share",
            unit="percentunit",
            width=8,
            gpu=True,
            min=0,
            max=1,
            queries=(Query(USED_SHARE, PER_CARD),),
            thresholds=levels.GPU_MEMORY_USED,
            description="Used / (used + free) per card. vLLM takes --gpu-memory-utilization (e.g. 90 %) at "
            "start. Healthy: flat at that level.",
        ),
        Panel(
            title="Temperature",
            unit="celsius",
            width=8,
            gpu=True,
            queries=(
                Query(f"DCGM_FI_DEV_GPU_TEMP{{{SEL}}}", PER_CARD + " die"),
                Query(f"DCGM_FI_DEV_MEMORY_TEMP{{{SEL}}}", PER_CARD + " memory"),
            ),
            thresholds=levels.GPU_TEMP,
            description="Die and memory temperature per card. Healthy: die below 80 °C.",
        ),
        Panel(
            title="Power draw",
            unit="watt",
            width=8,
            gpu=True,
            queries=(Query(f"DCGM_FI_DEV_POWER_USAGE{{{SEL}}}", PER_CARD),),
            base_colour=NEUTRAL,
            description="Watts per card. Healthy: follows load; a card pinned at its power limit runs at lower clocks.",
        ),
        Panel(
            title="SM clock",
            unit="hertz",
            width=12,
            gpu=True,
            queries=(Query(f"DCGM_FI_DEV_SM_CLOCK{{{SEL}}} * 1e6", PER_CARD),),
            base_colour=NEUTRAL,
            description="Streaming-multiprocessor clock (DCGM reports MHz). Healthy: steady under load; a drop "
            "with high temperature or power means throttling.",
        ),
        Panel(
            title="Memory row remapping",
            unit="none",
            width=12,
            gpu=True,
            decimals=0,
            queries=(
                Query(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{SEL}}}", PER_CARD + " uncorrectable"),
                Query(f"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{{{SEL}}}", PER_CARD + " correctable"),
                Query(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{SEL}}}", PER_CARD + " remap failed"),
            ),
            thresholds=((1, WARN),),
            description="HBM rows the card retired after memory errors. Healthy: 0; uncorrectable rows or a "
            "remap failure call for a GPU reset or replacement.",
        ),
    ),
)

BOARD = Board(
    uid="leakwatch-gpu",
    title="leakwatch / GPUs (DCGM)",
    description="Per-card utilisation, memory, temperature, power and health from NVIDIA's DCGM "
    "exporter. Empty on hosts without a GPU.",
    source="leakwatch/dashboards/gpu.py",
    time_from="now-6h",
    refresh="30s",
    variables=(DCGM_INSTANCE, CARD),
    rows=(now, per_card),
    annotations=(FIRING_ALERTS,),
)
