"""GPU memory through NVML (nvidia-ml-py's `pynvml`, imported only when first needed).

No library, no driver or no device is the "no GPU" state (leakwatch_gpu_available 0, no GPU
families), never a failure: the same exporter runs on CPU hosts. A later NVML error on a GPU host is
a failed read, counted like any other.

Per-process figures come from nvmlDeviceGetComputeRunningProcesses. Drivers report those pids in the
caller's PID namespace (recent drivers) or the host's (older ones); the exporter matches them against
the vLLM pids it sees, so on an old driver inside a container the per-process series stay empty while
the per-device ones still work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .process_tree import VllmTree

# Set by the NVIDIA device plugin (and the container toolkit) on a container given GPUs: their UUIDs,
# or their indices with the plugin's deviceIDStrategy=index.
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
NO_ASSIGNMENT = ("", "all", "none", "void")  # the toolkit's words that name no particular card


def assigned_devices(value: str | None) -> frozenset[str]:
    """The cards a NVIDIA_VISIBLE_DEVICES value gives a container (UUIDs or indices); empty when it
    names none in particular."""
    if value is None or value.strip().lower() in NO_ASSIGNMENT:
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())


class GpuReadError(Exception):
    """An NVML call failed on a host where NVML works: a failed read for this scrape."""


def import_pynvml():
    import pynvml  # nvidia-ml-py: the optional `gpu` extra

    return pynvml


@dataclass
class GpuReading:
    used: dict[str, int] = field(default_factory=dict)  # gpu index -> bytes in use
    total: dict[str, int] = field(default_factory=dict)
    process: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (gpu, role, rank) -> bytes


class Gpu:
    def __init__(
        self,
        loader: Callable[[], Any] = import_pynvml,  # the pynvml module, or a fake of it
        clock: Callable[[], float] = time.time,
        retry_s: float = 300.0,
        only_vllm_devices: bool = False,
    ):
        self.loader = loader
        # Report only the devices a watched vLLM process runs on: a sidecar that NVML shows every
        # card of a shared node must not report other pods' cards as its own.
        self.only_vllm_devices = only_vllm_devices
        self.clock = clock
        self.retry_s = retry_s  # how often to look for NVML again where it was missing
        self._nvml: Any = None
        self._handles: list = []
        self._last_attempt: float | None = None
        self.unavailable_reason = "not probed yet"

    def _init(self) -> bool:
        if self._nvml is not None:
            return True
        now = self.clock()
        if self._last_attempt is not None and now - self._last_attempt < self.retry_s:
            return False
        self._last_attempt = now
        try:
            nvml = self.loader()
        except ImportError as exc:
            self.unavailable_reason = f"nvidia-ml-py is not installed ({exc})"
            return False
        try:
            nvml.nvmlInit()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except nvml.NVMLError as exc:  # no driver / library (NVMLError_LibraryNotFound), no device
            self.unavailable_reason = f"NVML: {exc}"
            return False
        if not handles:
            self.unavailable_reason = "NVML found no GPU"
            nvml.nvmlShutdown()
            return False
        self._nvml, self._handles = nvml, handles
        self.unavailable_reason = ""
        return True

    @property
    def available(self) -> bool:
        return self._init()

    def read(self, tree: VllmTree | None, assigned: frozenset[str] = frozenset()) -> GpuReading:
        """assigned: the UUIDs or indices of the cards vLLM's container was given (assigned_devices);
        with only_vllm_devices, those are reported even where the driver's pids do not match ours.
        Raises GpuReadError on a failed read (the caller counts it and skips GPU series)."""
        try:
            return self._read(tree, assigned)
        except self._nvml.NVMLError as exc:
            raise GpuReadError(f"NVML: {exc}") from exc

    def _vllms_device(self, handle, index: int, assigned: frozenset[str]) -> bool:
        if not assigned:
            return False
        if str(index) in assigned:
            return True
        uuid = self._nvml.nvmlDeviceGetUUID(handle)
        return (uuid.decode() if isinstance(uuid, bytes) else uuid) in assigned

    def _read(self, tree: VllmTree | None, assigned: frozenset[str]) -> GpuReading:
        nvml = self._nvml
        roles = {p.pid: (p.role, p.rank) for p in tree.processes} if tree else {}
        reading = GpuReading()
        for index, handle in enumerate(self._handles):
            gpu = str(index)
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            # A card is vLLM's when its container was given it, or (a driver reporting pids in our
            # namespace) a vLLM process runs on it.
            if (
                self.only_vllm_devices
                and not any(proc.pid in roles for proc in processes)
                and not self._vllms_device(handle, index, assigned)
            ):
                continue
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            reading.used[gpu] = int(memory.used)
            reading.total[gpu] = int(memory.total)
            for proc in processes:
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid in roles and used is not None:  # None: the driver cannot tell (e.g. MIG)
                    key = (gpu, *roles[proc.pid])
                    reading.process[key] = reading.process.get(key, 0) + int(used)
        return reading
