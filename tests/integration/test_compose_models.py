"""The production model services in compose.yaml, as the real Compose v2 binary resolves them."""

from __future__ import annotations

from leakwatch.core import profiles
from tests.support.compose_support import resolved


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_janeway_converts_before_vllm_starts():
    janeway = profiles.load("janeway-13b-4090d")
    services = resolved(janeway.name)["services"]
    convert, vllm = services["janeway-convert"], services["vllm-janeway-13b-4090d"]
    served = "/models/janeway-13b-opt"
    assert convert["entrypoint"][:3] == ["python3", "-m", "leakwatch.convert_xglm"]
    assert convert["entrypoint"][3:] == [janeway.model["id"], served, "--revision", janeway.model["revision"]]
    assert convert["restart"] == "no" and "deploy" not in convert, "conversion runs on the CPU"
    assert convert["environment"]["PYTHONPATH"] == "/opt/leakwatch"
    mounts = {m["target"]: m for m in convert["volumes"]}
    assert mounts["/models"]["source"] == "models" and mounts["/root/.cache/huggingface"]["source"] == "hf-cache"
    assert mounts["/opt/leakwatch"]["read_only"] is True
    assert vllm["depends_on"]["janeway-convert"]["condition"] == "service_completed_successfully"
    assert flag(vllm["command"], "--model") == served
    assert flag(vllm["command"], "--quantization") == "fp8" and flag(vllm["command"], "--max-model-len") == "2048"
    assert {m["target"]: m["source"] for m in vllm["volumes"]}["/models"] == "models"
    assert convert["image"] == vllm["image"], "the converter needs the GPU image's torch and transformers"


def test_iquest_reserves_four_gpus_for_tp4():
    services = resolved("iquest-coder-40b-4xa100")["services"]
    vllm = services["vllm-iquest-coder-40b-4xa100"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}]
    assert flag(vllm["command"], "--tensor-parallel-size") == "4"
    assert flag(vllm["command"], "--max-model-len") == "131072"
    assert "--trust-remote-code" in vllm["command"]
    assert "depends_on" not in vllm, "vLLM downloads the Hub model itself"


def test_demo_stays_the_default_and_needs_no_gpu():
    assert profiles.DEFAULT_PROFILE == "demo"
    vllm = resolved("demo")["services"]["vllm-demo"]
    assert "deploy" not in vllm and flag(vllm["command"], "--model") == "/models/demo"
