"""Model profiles: the schema catches mistakes with a clear message, the stated facts agree with
each other and with config/stack.yaml, and runners treat GPU profiles correctly."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from leakwatch.core import model_text, profiles
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.settings import load as load_settings
from tests.support.native_stack import short_state_dir, stack_port_env

from .test_stack_errors import leakwatch

GPU_PROFILES = [name for name in profiles.available() if profiles.load(name).needs_gpu]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def raw(name: str) -> dict:
    return yaml.safe_load((profiles.PROFILES_DIR / f"{name}.yaml").read_text())


def test_the_production_profiles_exist():
    assert {"demo", "janeway-13b-4090d", "iquest-coder-40b-4xa100"} <= set(profiles.available())
    assert GPU_PROFILES == ["iquest-coder-40b-4xa100", "janeway-13b-4090d"]


@pytest.mark.parametrize("name", profiles.available())
def test_stack_vllm_is_new_enough_for_every_profile(name):
    needed = profiles.load(name).min_vllm_version
    pinned = load_settings().vllm_version
    assert version(pinned) >= version(needed), f"{name} needs vLLM >= {needed}; config/stack.yaml pins {pinned}"


def test_iquest_card_settings():
    iquest = profiles.load("iquest-coder-40b-4xa100")
    assert version(iquest.min_vllm_version) >= (0, 14)
    assert iquest.generation == {"temperature": 0.6, "top_p": 0.85, "top_k": 20}
    assert iquest.vllm["trust_remote_code"] and iquest.vllm["max_model_len"] == 131072
    assert iquest.vllm["tensor_parallel_size"] == iquest.gpu_count == 4


def test_janeway_is_served_converted_in_fp8_with_2048_tokens():
    janeway = profiles.load("janeway-13b-4090d")
    args = profiles.vllm_engine_args(janeway, profiles.model_path(janeway, "/models"))
    assert args[:2] == ["--model", "/models/janeway-13b-opt"]
    assert "--revision" not in args, "the revision is the source's; vLLM serves the local conversion"
    assert args[args.index("--quantization") + 1] == "fp8"
    assert args[args.index("--max-model-len") + 1] == "2048"


def _params_opt(a: dict) -> tuple[int, int]:
    """OPT/XGLM layout: biases everywhere, LayerNorms with bias, learned positions, tied head."""
    h, i, layers = a["hidden_size"], a["intermediate_size"], a["num_layers"]
    projections = 4 * h * h + 2 * h * i
    per_layer = projections + (4 * h + i + h) + 4 * h
    total = layers * per_layer + a["vocab_size"] * h + (a["max_position_embeddings"] + 2) * h + 2 * h
    return total, layers * projections


def _params_llama(a: dict) -> tuple[int, int]:
    """Llama layout: no biases, RMSNorm weights only, GQA, gated MLP, untied head."""
    h, i, layers, d = a["hidden_size"], a["intermediate_size"], a["num_layers"], a["head_dim"]
    projections = 2 * h * a["num_attention_heads"] * d + 2 * h * a["num_kv_heads"] * d + 3 * h * i
    total = layers * (projections + 2 * h) + 2 * a["vocab_size"] * h + h
    return total, layers * projections


@pytest.mark.parametrize(
    "name, count", [("janeway-13b-4090d", _params_opt), ("iquest-coder-40b-4xa100", _params_llama)]
)
def test_stated_parameter_counts_follow_from_the_shapes(name, count):
    arch = profiles.load(name).architecture
    assert (arch["parameters"], arch["quantizable_parameters"]) == count(arch)


def test_demo_architecture_is_the_built_model(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from leakwatch.demo_model.command import build

    build(tmp_path / "demo")
    arch = profiles.load("demo").architecture
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "demo")
    config = AutoConfig.from_pretrained(tmp_path / "demo")
    assert sum(p.numel() for p in model.parameters()) == arch["parameters"]
    linear = sum(
        m.weight.numel() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"
    )
    assert linear == arch["quantizable_parameters"]
    assert (config.num_hidden_layers, config.num_key_value_heads, config.head_dim, config.vocab_size) == (
        arch["num_layers"],
        arch["num_kv_heads"],
        arch["head_dim"],
        arch["vocab_size"],
    )
    assert _params_llama(arch) == (arch["parameters"], arch["quantizable_parameters"])


def _broken(name: str, change) -> str:
    data = copy.deepcopy(raw(name))
    change(data)
    with pytest.raises(LeakwatchError) as info:
        profiles.validate(data, profiles.PROFILES_DIR / f"{name}.yaml")
    return str(info.value)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["vllm"].update(max_model_length=4096), "unknown key vllm.max_model_length"),
        (lambda d: d["vllm"].update(max_num_seqs="16"), "vllm.max_num_seqs must be of type int, not '16'"),
        (lambda d: d["vllm"].update(enable_prefix_caching=1), "vllm.enable_prefix_caching must be of type bool"),
        (lambda d: d["vllm"].update(gpu_memory_utilization=1.5), "vllm.gpu_memory_utilization must be in (0, 1]"),
        (lambda d: d["vllm"].update(quantization="awq"), "vllm.quantization must be one of fp8"),
        (lambda d: d["vllm"].update(min_version="latest"), "vllm.min_version must look like 0.14.0"),
        (
            lambda d: d["monitoring"].update(warmup_after_ready="two minutes"),
            "monitoring.warmup_after_ready must be a positive duration",
        ),
        (lambda d: d["monitoring"].update(warmup_after="2m"), "unknown key monitoring.warmup_after"),
        (lambda d: d.pop("architecture"), "missing required key 'architecture'"),
        (lambda d: d["architecture"].pop("num_kv_heads"), "missing required key architecture.num_kv_heads"),
        (lambda d: d["hardware"].pop("gpu_memory_gib"), "hardware.gpu_memory_gib is required for a GPU (cuda) profile"),
        (lambda d: d["model"].pop("convert"), "model.convert (tool, service, output) is required"),
        (
            lambda d: d["model"]["convert"].update(output="../escape"),
            "model.convert.output must be a plain folder name",
        ),
        (lambda d: d["model"]["convert"].update(tool="gguf"), "model.convert.tool must be one of xglm-to-opt"),
        (lambda d: d["generation"].update(max_tokens=200), "unknown key generation.max_tokens"),
        (lambda d: d["client"].update(stop_token_ids=["</s>"]), "client.stop_token_ids must be a list of int"),
        (lambda d: d.update(vllm_args={}), "unknown top-level key 'vllm_args'"),
        (lambda d: d.update(name="janeway"), "name 'janeway' must match the file name"),
        (
            lambda d: d["vllm"].update(cpu_onednn_primitive_cache_capacity=64),
            "vllm.cpu_onednn_primitive_cache_capacity only applies to a CPU profile",
        ),
    ],
)
def test_schema_mistakes_are_named(change, message):
    assert message in _broken("janeway-13b-4090d", change)


def test_a_negative_onednn_cache_capacity_is_named():
    message = _broken("demo", lambda d: d["vllm"].update(cpu_onednn_primitive_cache_capacity=-1))
    assert "vllm.cpu_onednn_primitive_cache_capacity must be >= 0" in message


def test_the_cpu_profile_bounds_onednns_primitive_cache_in_every_runner():
    """compose, the native runner and the chart all take vLLM's environment from this one function."""
    env = profiles.vllm_environment(profiles.load("demo"))
    assert env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(raw("demo")["vllm"]["cpu_onednn_primitive_cache_capacity"])
    assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in profiles.vllm_environment(profiles.load("janeway-13b-4090d"))


def test_engine_args_pin_the_revision_of_hub_models():
    iquest = profiles.load("iquest-coder-40b-4xa100")
    args = profiles.vllm_engine_args(iquest, profiles.model_path(iquest, "/models"))
    assert args[:2] == ["--model", "IQuestLab/IQuest-Coder-V1-40B-Instruct"]
    assert args[args.index("--revision") + 1] == iquest.model["revision"]
    assert "--trust-remote-code" in args


def test_client_settings():
    janeway, iquest, demo = (profiles.load(n) for n in ("janeway-13b-4090d", "iquest-coder-40b-4xa100", "demo"))
    assert model_text.to_model_text(janeway, "one\ntwo\n") == "one</s>two</s>"
    assert model_text.from_model_text(janeway, "three</s>four") == "three\nfour"
    assert model_text.request_fields(janeway) == {"ignore_eos": True, "skip_special_tokens": False}
    assert model_text.request_fields(iquest) == {"stop_token_ids": [2, 75864, 75869]}
    assert model_text.to_model_text(demo, "a\nb") == "a\nb" and model_text.request_fields(demo) == {}


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_native_runner_refuses_gpu_profiles(name):
    prof = profiles.load(name)
    state = short_state_dir("lw-gpu-")
    result = leakwatch(
        "stack",
        "up",
        "--model",
        name,
        "--runner",
        "native",
        env={**stack_port_env(), "LEAKWATCH_STATE_DIR": str(state)},
    )
    assert result.returncode == 2
    assert f"profile {name!r} needs {prof.gpu_count}x {prof.hardware['gpu']} GPUs" in result.stderr
    assert f"make up MODEL={name} STACK=compose" in result.stderr
    assert not os.path.exists(state / "supervisord.pid"), "nothing may start"


def test_a_profile_without_monitoring_gets_the_default_warmup_after_ready():
    """The fast-leak rules read the longest warmup_after_ready of the profiles; one that sets none
    (a user's own profile) gets the documented default."""
    data = copy.deepcopy(raw("demo"))
    data.pop("monitoring")
    profile = profiles.validate(data, profiles.PROFILES_DIR / "demo.yaml")
    assert profile.warmup_after_ready_s == 120.0
    assert profiles.load("iquest-coder-40b-4xa100").warmup_after_ready_s == 180.0
