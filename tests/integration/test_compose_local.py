"""compose.local.yaml (the local image set) as the real Compose v2 binary resolves it on top of
compose.yaml: it swaps images and leaves Grafana out, nothing else; the image builder's cache key."""

from __future__ import annotations

import json

from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.stack import local_images
from tests.support.compose_support import compose, resolved

# Runs the Compose v2 binary on compose.yaml and compose.local.yaml.

SWAPPED = {"image", "pull_policy"}


def resolved_local(profile: str = "demo") -> dict:
    result = compose(
        "-f",
        str(REPO_ROOT / "compose.local.yaml"),
        "--profile",
        profile,
        "config",
        "--format",
        "json",
        env={"GRAFANA_ADMIN_PASSWORD": "test-only"},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_local_set_swaps_images_only_and_leaves_grafana_out():
    official, local = resolved("demo")["services"], resolved_local()["services"]
    assert set(official) - set(local) == {"grafana"}, "only Grafana (no local build) stays out"
    wanted = {svc.tag for svc in local_images.images().values()}
    for name, service in local.items():
        assert service["image"] in wanted, (name, service["image"])
        assert service.get("pull_policy") == "never", name
        same = {k: v for k, v in service.items() if k not in SWAPPED}
        assert same == {k: v for k, v in official[name].items() if k not in SWAPPED}, name


def test_each_look_alike_stands_for_an_official_image_of_the_stack():
    settings = load_settings()
    official = resolved("demo")["services"]
    local = resolved_local()["services"]
    for look_alike, service in local_images.STANDS_FOR.items():
        users = [n for n, s in official.items() if s["image"] == settings.service(service).image]
        assert users, look_alike
        assert all(local[n]["image"] == local_images.images()[look_alike].tag for n in users)


def test_image_inputs_change_the_cache_key(tmp_path, monkeypatch):
    settings = load_settings()
    images = local_images.images(settings)
    key = local_images.input_hash(images["prometheus"], images, settings)
    assert key == local_images.input_hash(images["prometheus"], images, settings)
    changed = tmp_path / "prometheus.Dockerfile"
    changed.write_text(images["prometheus"].dockerfile.read_text() + "\nLABEL x=y\n")
    images["prometheus"].dockerfile = changed
    assert local_images.input_hash(images["prometheus"], images, settings) != key
    # A parent's change reaches its children.
    images = local_images.images(settings)
    before = local_images.input_hash(images["vllm-cpu"], images, settings)
    images["tools"].build_args = {**images["tools"].build_args, "EXTRA": "1"}
    assert local_images.input_hash(images["vllm-cpu"], images, settings) != before


def test_the_debian_mirror_comes_from_apts_sources(tmp_path, monkeypatch):
    sources = tmp_path / "debian.sources"
    sources.write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    monkeypatch.setattr(local_images.glob, "glob", lambda pattern: [str(sources)])
    monkeypatch.setattr(
        local_images,
        "Path",
        lambda p: tmp_path / "missing" if p == "/etc/apt/sources.list" else __import__("pathlib").Path(p),
    )
    assert local_images.debian_mirror("bookworm") == "http://mirror.example/debian"
