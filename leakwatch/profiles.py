"""Model profiles: one YAML file per model and card in serving/profiles/, rendered into vLLM arguments.

Both runners (compose and native) and the capacity planner read the same profile, so a setting such
as max_model_len is written once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import LeakwatchError
from .paths import PROFILES_DIR

DEFAULT_PROFILE = "demo"
MODEL_SOURCES = ("demo", "huggingface", "converted")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    model: dict
    hardware: dict
    vllm: dict
    generation: dict
    path: Path

    @property
    def served_name(self) -> str:
        return self.model["served_name"]

    @property
    def source(self) -> str:
        return self.model["source"]

    @property
    def device(self) -> str:
        return self.hardware["device"]

    @property
    def gpu_count(self) -> int:
        return int(self.hardware.get("gpu_count") or 0)

    @property
    def needs_gpu(self) -> bool:
        return self.device == "cuda"


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load(name: str) -> Profile:
    """Loads a profile by name; an unknown name lists the valid ones."""
    path = PROFILES_DIR / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        raise LeakwatchError(
            f"unknown model profile {name!r}; valid profiles: {', '.join(available())}"
        )
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise LeakwatchError(f"{path}: not valid YAML: {exc}") from None
    return _validate(raw, path)


def _require(raw: dict, key: str, path: Path, kind=dict):
    if not isinstance(raw, dict) or key not in raw:
        raise LeakwatchError(f"{path}: missing required key {key!r}")
    value = raw[key]
    if kind is not None and not isinstance(value, kind):
        raise LeakwatchError(f"{path}: {key!r} must be a {kind.__name__}")
    return value


def _validate(raw: dict, path: Path) -> Profile:
    if not isinstance(raw, dict):
        raise LeakwatchError(f"{path}: a profile must be a mapping")
    name = _require(raw, "name", path, str)
    if name != path.stem:
        raise LeakwatchError(f"{path}: name {name!r} must match the file name {path.stem!r}")
    model = _require(raw, "model", path)
    hardware = _require(raw, "hardware", path)
    vllm = _require(raw, "vllm", path)
    source = _require(model, "source", path, str)
    if source not in MODEL_SOURCES:
        raise LeakwatchError(f"{path}: model.source {source!r} is not one of {MODEL_SOURCES}")
    if source != "demo":
        _require(model, "id", path, str)
    _require(model, "served_name", path, str)
    device = _require(hardware, "device", path, str)
    if device not in DEVICES:
        raise LeakwatchError(f"{path}: hardware.device {device!r} is not one of {DEVICES}")
    for key in ("dtype", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size"):
        _require(vllm, key, path, None)
    return Profile(
        name=name,
        description=str(raw.get("description", "")),
        model=model,
        hardware=hardware,
        vllm=vllm,
        generation=dict(raw.get("generation") or {}),
        path=path,
    )


def vllm_engine_args(profile: Profile, model_path: str) -> list[str]:
    """The engine arguments for `vllm serve` / the OpenAI API server, without host and port."""
    v = profile.vllm
    args = [
        "--model", model_path,
        "--served-model-name", profile.served_name,
        "--dtype", str(v["dtype"]),
        "--max-model-len", str(v["max_model_len"]),
        "--max-num-seqs", str(v["max_num_seqs"]),
        "--max-num-batched-tokens", str(v["max_num_batched_tokens"]),
        "--tensor-parallel-size", str(v["tensor_parallel_size"]),
    ]
    if profile.model.get("revision"):
        args += ["--revision", str(profile.model["revision"])]
    args.append("--enable-chunked-prefill" if v.get("enable_chunked_prefill", True) else "--no-enable-chunked-prefill")
    args.append("--enable-prefix-caching" if v.get("enable_prefix_caching", True) else "--no-enable-prefix-caching")
    if v.get("trust_remote_code"):
        args.append("--trust-remote-code")
    if v.get("quantization"):
        args += ["--quantization", str(v["quantization"])]
    if v.get("gpu_memory_utilization") is not None:
        args += ["--gpu-memory-utilization", str(v["gpu_memory_utilization"])]
    if profile.generation:
        args += ["--override-generation-config", json.dumps(profile.generation, sort_keys=True)]
    args += [str(a) for a in v.get("extra_args", [])]
    return args


def vllm_environment(profile: Profile) -> dict[str, str]:
    """Environment the vLLM process needs for this profile (same in compose and native)."""
    env = {"HF_HUB_OFFLINE": "1"} if profile.source == "demo" else {}
    if profile.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(profile.vllm.get("cpu_kv_cache_space_gib", 1))
    return env
