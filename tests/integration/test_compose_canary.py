"""compose.canary.yaml as the real Docker Compose v2 binary resolves it on top of compose.yaml (and
on the local image set): the canary's services, pinned images and loopback ports, the ports and the
canary's image from the environment. tests/unit/test_compose_canary.py checks the files' content."""

from __future__ import annotations

import pytest

from leakwatch.core.topology import exporter_canary_service, vllm_canary_service, vllm_service
from leakwatch.generate.compose_canary import ROUTER_SERVICE
from leakwatch.stack import compose_runner, local_images
from tests.support.compose_support import policy_violations, resolved

CANARY = (compose_runner.CANARY_OVERRIDE,)
LOCAL_CANARY = (compose_runner.LOCAL_OVERRIDE, compose_runner.CANARY_OVERRIDE, compose_runner.CANARY_LOCAL_OVERRIDE)
CANARY_SERVICES = {vllm_canary_service("demo"), exporter_canary_service("demo"), ROUTER_SERVICE}


def test_the_override_adds_the_canary_side_and_the_router_to_the_profile():
    plain, canary = resolved("demo")["services"], resolved("demo", overrides=CANARY)["services"]
    assert set(canary) == set(plain) | CANARY_SERVICES
    assert canary["prometheus"]["command"][0] == "--config.file=/etc/prometheus/prometheus-canary.yml"
    assert canary["healer"]["command"][-2:] == ["--target", "leakwatch=leakwatch-exporter:9405"]


def test_images_pinned_and_ports_on_loopback_by_default():
    assert policy_violations(resolved("demo", overrides=CANARY)) == []


def test_ports_and_bind_address_come_from_the_environment():
    env = {"BIND_ADDRESS": "0.0.0.0", "VLLM_CANARY_PORT": "18001", "CANARY_ROUTER_PORT": "18010"}
    services = resolved("demo", env=env, overrides=CANARY)["services"]
    assert {p["host_ip"] for s in services.values() for p in s.get("ports", [])} == {"0.0.0.0"}
    published = {name: [(p["published"], p["target"]) for p in services[name]["ports"]] for name in CANARY_SERVICES}
    assert published[vllm_canary_service("demo")] == [("18001", 8001)]
    assert published[ROUTER_SERVICE] == [("18010", 8010)]
    assert published[exporter_canary_service("demo")] == [("9407", 9407)]


def test_the_canary_image_is_the_stable_ones_unless_vllm_canary_image_names_another():
    services = resolved("demo", overrides=CANARY)["services"]
    assert services[vllm_canary_service("demo")]["image"] == services[vllm_service("demo")]["image"]
    candidate = "registry.example/vllm-cpu:candidate"
    services = resolved("demo", env={"VLLM_CANARY_IMAGE": candidate}, overrides=CANARY)["services"]
    assert services[vllm_canary_service("demo")]["image"] == candidate
    assert services[vllm_service("demo")]["image"] != candidate


def test_the_local_image_set_runs_the_canary_on_local_images_too():
    services = resolved("demo", overrides=LOCAL_CANARY)["services"]
    wanted = {image.tag for image in local_images.images().values()}
    assert set(services) >= CANARY_SERVICES
    for name, service in services.items():
        assert service["image"] in wanted and service.get("pull_policy") == "never", (name, service["image"])


@pytest.mark.parametrize("user", [None, "1000:1000"])
def test_the_router_runs_as_the_user_the_runner_names(user):
    env = {"CANARY_ROUTER_USER": user} if user else {}
    router = resolved("demo", env=env, overrides=CANARY)["services"][ROUTER_SERVICE]
    assert router["user"] == (user or "0:0")
    assert router["read_only"] is True and router["cap_drop"] == ["ALL"]
