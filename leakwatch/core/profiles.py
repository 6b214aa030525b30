"""Model profiles: one YAML file per model and card in serving/profiles/, rendered into vLLM arguments.

Both runners (compose and native) and the capacity planner read the same profile, so a setting such
as max_model_len is written once. Every section is checked against SCHEMA below: an unknown or
misspelt key, a wrong type or an impossible value is a LeakwatchError naming the file and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config_schema import (
    BOOL,
    DICT,
    INT,
    LIST,
    NUM,
    STR,
    Key,
    check_section,
    duration,
    fraction,
    list_of,
    non_negative,
    one_of,
    positive,
    read_yaml,
)
from .durations import parse_duration
from .errors import LeakwatchError
from .paths import PROFILES_DIR

DEFAULT_PROFILE = "demo"
MODEL_SOURCES = ("demo", "huggingface", "converted")
DEVICES = ("cpu", "cuda")
# Checkpoint converters a `converted` profile may name: tool -> the module that runs it.
CONVERTERS = {"xglm-to-opt": "leakwatch.convert_xglm"}
# Bytes per element of each dtype a profile may name (vLLM's --dtype values, plus the checkpoint's).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Weight quantizations the planner can size: name -> bytes per quantized weight element.
QUANTIZATION_BYTES = {"fp8": 1}
KV_CACHE_DTYPES = ("auto", "fp8")
# The only generation-config keys vLLM applies as server-side defaults
# (vllm.config.model.ModelConfig.get_diff_sampling_param); any other key would be silently ignored.
GENERATION_KEYS = (
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "max_new_tokens",
)
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _version(value) -> str | None:
    return None if VERSION.match(value) else "must look like 0.14.0"


def _folder(value) -> str | None:
    return None if FOLDER_NAME.match(value) else "must be a plain folder name (letters, digits, . _ -)"


SCHEMA: dict[str, dict[str, Key]] = {
    "model": {
        "source": Key(STR, check=one_of(*MODEL_SOURCES)),
        "id": Key(STR, required=False),  # required unless source is demo
        "revision": Key(STR, required=False),  # required unless source is demo
        "served_name": Key(STR),
        "convert": Key(DICT, required=False),  # required when source is converted
    },
    "hardware": {
        "device": Key(STR, check=one_of(*DEVICES)),
        "gpu": Key(STR, required=False, nullable=True),
        "gpu_count": Key(INT, check=non_negative),
        "gpu_memory_gib": Key(NUM, required=False, nullable=True, check=positive),
        "compute_capability": Key(STR, required=False),
    },
    "architecture": {
        "num_layers": Key(INT, check=positive),
        "hidden_size": Key(INT, check=positive),
        "num_attention_heads": Key(INT, check=positive),
        "num_kv_heads": Key(INT, check=positive),
        "head_dim": Key(INT, check=positive),
        "intermediate_size": Key(INT, check=positive),
        "mlp_gated": Key(BOOL),
        "vocab_size": Key(INT, check=positive),
        "max_position_embeddings": Key(INT, check=positive),
        "parameters": Key(INT, check=positive),
        "quantizable_parameters": Key(INT, check=non_negative),
        "dtype": Key(STR, check=one_of(*DTYPE_BYTES)),
    },
    "vllm": {
        "min_version": Key(STR, check=_version),
        "dtype": Key(STR, check=one_of("auto", *DTYPE_BYTES)),
        "quantization": Key(STR, nullable=True, check=one_of(*QUANTIZATION_BYTES)),
        "kv_cache_dtype": Key(STR, required=False, check=one_of(*KV_CACHE_DTYPES)),
        "tensor_parallel_size": Key(INT, check=positive),
        "gpu_memory_utilization": Key(NUM, nullable=True, check=fraction),
        "max_model_len": Key(INT, check=positive),
        "max_num_seqs": Key(INT, check=positive),
        "max_num_batched_tokens": Key(INT, check=positive),
        "enable_chunked_prefill": Key(BOOL),
        "enable_prefix_caching": Key(BOOL),
        "trust_remote_code": Key(BOOL),
        "block_size": Key(INT, required=False, check=positive),
        "cpu_kv_cache_space_gib": Key(NUM, required=False, check=positive),
        "cpu_onednn_primitive_cache_capacity": Key(INT, required=False, check=non_negative),
        "extra_args": Key(LIST, required=False, check=list_of(str)),
    },
    "generation": {key: Key(NUM, required=False) for key in GENERATION_KEYS},
    "client": {
        "newline_token": Key(STR, required=False, nullable=True),
        "ignore_eos": Key(BOOL, required=False),
        "skip_special_tokens": Key(BOOL, required=False),
        "stop": Key(LIST, required=False, check=list_of(str)),
        "stop_token_ids": Key(LIST, required=False, check=list_of(int)),
    },
    "capacity": {
        "cuda_graph_gib": Key(NUM, required=False, check=non_negative),
        "non_torch_gib": Key(NUM, required=False, check=non_negative),
    },
    # What the fast-leak rules (HostMemoryRunningOut, GPUMemoryRunningOut) need to know about the
    # server: how long it keeps allocating after it answers (first requests' buffers, heaps settling).
    "monitoring": {
        "warmup_after_ready": Key(STR, required=False, check=duration),
    },
}
CONVERT_SCHEMA = {
    "tool": Key(STR, check=one_of(*CONVERTERS)),
    "service": Key(STR, check=_folder),  # the compose one-shot service that runs it
    "output": Key(STR, check=_folder),  # folder in the models volume that vLLM serves
}
OPTIONAL_SECTIONS = ("generation", "client", "capacity", "monitoring")
# monitoring.warmup_after_ready of a profile that sets none.
DEFAULT_WARMUP_AFTER_READY = "2m"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    model: dict
    hardware: dict
    architecture: dict
    vllm: dict
    generation: dict
    client: dict
    capacity: dict
    monitoring: dict
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

    @property
    def min_vllm_version(self) -> str:
        return self.vllm["min_version"]

    @property
    def convert(self) -> dict | None:
        return self.model.get("convert")

    @property
    def warmup_after_ready_s(self) -> float:
        return parse_duration(self.monitoring.get("warmup_after_ready") or DEFAULT_WARMUP_AFTER_READY)


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load(name: str, overrides: list[str] | None = None) -> Profile:
    """Loads a profile by name; an unknown name lists the valid ones.

    overrides: "section.key=value" strings (value parsed as YAML: 3, 0.95, null, true) applied
    before validation, so a "what if" gets the same checks as a profile file.
    """
    path = PROFILES_DIR / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        raise LeakwatchError(f"unknown model profile {name!r}; valid profiles: {', '.join(available())}")
    raw = read_yaml(path, "the model profile")
    if not overrides:
        return validate(raw, path)
    try:
        return validate(apply_overrides(raw, overrides), path)
    except LeakwatchError as exc:
        if str(exc).startswith("--set"):
            raise
        raise LeakwatchError(f"{exc} (with --set {' '.join(overrides)})") from None


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    raw = json.loads(json.dumps(raw))  # a deep copy; profiles are plain YAML data
    for item in overrides:
        target, sep, text = item.partition("=")
        section, dot, key = target.strip().partition(".")
        if not sep or not dot or not key:
            raise LeakwatchError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. vllm.tensor_parallel_size=2")
        if section not in SCHEMA:
            raise LeakwatchError(f"--set {item!r}: unknown section {section!r}; sections: {', '.join(SCHEMA)}")
        if key not in SCHEMA[section]:
            raise LeakwatchError(f"--set {item!r}: unknown key {section}.{key}; keys: {', '.join(SCHEMA[section])}")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise LeakwatchError(f"--set {item!r}: value is not valid YAML: {exc}") from None
        if not isinstance(raw.get(section), dict):
            raw[section] = {}
        raw[section][key] = value
    return raw


def validate(raw, path: Path) -> Profile:
    if not isinstance(raw, dict):
        raise LeakwatchError(f"{path}: a profile must be a mapping")
    top = {"name", "description", *SCHEMA}
    unknown = sorted(set(raw) - top)
    if unknown:
        raise LeakwatchError(f"{path}: unknown top-level key {unknown[0]!r}; valid: {', '.join(sorted(top))}")
    name = raw.get("name")
    if not isinstance(name, str):
        raise LeakwatchError(f"{path}: missing required key 'name'")
    if name != path.stem:
        raise LeakwatchError(f"{path}: name {name!r} must match the file name {path.stem!r}")
    sections: dict[str, Any] = {}
    for section, schema in SCHEMA.items():
        if section not in raw:
            if section in OPTIONAL_SECTIONS:
                sections[section] = {}
                continue
            raise LeakwatchError(f"{path}: missing required key {section!r}")
        sections[section] = check_section(raw[section] or {}, schema, section, path)
    _check_cross_fields(sections, path)
    return Profile(name=name, description=str(raw.get("description", "")), path=path, **sections)


def _check_cross_fields(s: dict, path: Path) -> None:
    model, hardware, arch, vllm = s["model"], s["hardware"], s["architecture"], s["vllm"]
    if model["source"] != "demo":
        for key in ("id", "revision"):
            if not model.get(key):
                raise LeakwatchError(f"{path}: model.{key} is required for a {model['source']} model")
    if model["source"] == "converted":
        if "convert" not in model:
            raise LeakwatchError(f"{path}: model.convert (tool, service, output) is required for a converted model")
        check_section(model["convert"], CONVERT_SCHEMA, "model.convert", path)
    elif "convert" in model:
        raise LeakwatchError(f"{path}: model.convert only applies to source: converted")
    if hardware["device"] == "cuda":
        for section, key in (("hardware", "gpu"), ("hardware", "gpu_memory_gib"), ("vllm", "gpu_memory_utilization")):
            if s[section].get(key) is None:
                raise LeakwatchError(f"{path}: {section}.{key} is required for a GPU (cuda) profile")
        if hardware["gpu_count"] < 1:
            raise LeakwatchError(f"{path}: hardware.gpu_count must be >= 1 for a GPU (cuda) profile")
        for key in ("cpu_kv_cache_space_gib", "cpu_onednn_primitive_cache_capacity"):
            if key in vllm:
                raise LeakwatchError(f"{path}: vllm.{key} only applies to a CPU profile (hardware.device: cpu)")
    elif "cpu_kv_cache_space_gib" not in vllm:
        raise LeakwatchError(f"{path}: vllm.cpu_kv_cache_space_gib is required for a CPU profile")
    if arch["quantizable_parameters"] > arch["parameters"]:
        raise LeakwatchError(f"{path}: architecture.quantizable_parameters exceeds architecture.parameters")
    if arch["num_attention_heads"] * arch["head_dim"] != arch["hidden_size"]:
        raise LeakwatchError(
            f"{path}: architecture.num_attention_heads x head_dim "
            f"({arch['num_attention_heads']} x {arch['head_dim']}) must equal hidden_size ({arch['hidden_size']})"
        )


def model_path(profile: Profile, models_dir: str) -> str:
    """What vLLM's --model gets: a Hugging Face id, or a folder under models_dir."""
    if profile.source == "huggingface":
        return profile.model["id"]
    if profile.source == "converted":
        return f"{models_dir}/{profile.convert['output']}"
    return f"{models_dir}/demo"


def vllm_engine_args(profile: Profile, model_path: str) -> list[str]:
    """The engine arguments for `vllm serve` / the OpenAI API server, without host and port."""
    v = profile.vllm
    args = [
        "--model",
        model_path,
        "--served-model-name",
        profile.served_name,
        "--dtype",
        str(v["dtype"]),
        "--max-model-len",
        str(v["max_model_len"]),
        "--max-num-seqs",
        str(v["max_num_seqs"]),
        "--max-num-batched-tokens",
        str(v["max_num_batched_tokens"]),
        "--tensor-parallel-size",
        str(v["tensor_parallel_size"]),
    ]
    # A converted model's revision is its source's; vLLM serves the local conversion.
    if profile.source == "huggingface":
        args += ["--revision", str(profile.model["revision"])]
    args.append("--enable-chunked-prefill" if v.get("enable_chunked_prefill", True) else "--no-enable-chunked-prefill")
    args.append("--enable-prefix-caching" if v.get("enable_prefix_caching", True) else "--no-enable-prefix-caching")
    if v.get("trust_remote_code"):
        args.append("--trust-remote-code")
    if v.get("quantization"):
        args += ["--quantization", str(v["quantization"])]
    if v.get("kv_cache_dtype"):
        args += ["--kv-cache-dtype", str(v["kv_cache_dtype"])]
    if v.get("block_size"):
        args += ["--block-size", str(v["block_size"])]
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
        if "cpu_onednn_primitive_cache_capacity" in profile.vllm:
            # oneDNN keeps every GEMM primitive it compiled, one per (layer, batch size) up to 1024 by
            # default: a CPU worker's memory climbs for hours of traffic and reads as a leak.
            env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(profile.vllm["cpu_onednn_primitive_cache_capacity"])
    return env
