"""The import structure: no cycle anywhere in the package, and a core layer under everything that
imports nothing of ours above it (docs/architecture.md, "Layers"). Read from the source with `ast`,
imports inside functions included, so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import leakwatch

PACKAGE = Path(leakwatch.__file__).parent

# The core layer is a folder: leakwatch/core/ (errors, repo paths, durations, the config-file loader,
# the alert vocabulary, stack settings and topology, model profiles, the state layout and its secrets,
# ports, the Prometheus client, the metric catalogues, the YAML formatter), plus the package roots
# it sits in. Nothing else counts as core, so a new core module goes in the folder.
CORE_DIR = PACKAGE / "core"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Our modules that `name` imports (`from .x import y` counts as x.y when y is a module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in MODULES else target)
    found = {m for m in found if m in MODULES and m != name}
    # Importing a.b.c runs a/__init__ and a/b/__init__ first: those count too, except the packages
    # `name` itself lives in (already importing).
    return found | {parent for m in found for parent in parents(m) if parent not in parents(name)} - {name}


def parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


GRAPH = {name: imports_of(name) for name in MODULES}
CORE = {"leakwatch", "leakwatch.core"} | {name for name, path in MODULES.items() if CORE_DIR in path.parents}


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return found


def test_the_reader_sees_relative_and_lazy_imports():
    assert "leakwatch.core.errors" in GRAPH["leakwatch.core.durations"]  # from .errors import LeakwatchError
    assert "leakwatch.core.state_layout" in GRAPH["leakwatch.core.webauth"]  # from .state_layout import ...
    assert "leakwatch.heal.kubernetes_restarter" in GRAPH["leakwatch.heal.command"]  # inside a function


def test_no_module_imports_itself_back():
    assert cycles() == []


def test_the_core_is_the_core_folder_and_imports_nothing_of_ours_above_it():
    assert {"leakwatch.core.errors", "leakwatch.core.settings", "leakwatch.core.alert_config"} <= CORE
    assert all(name.startswith("leakwatch.core.") for name in CORE - {"leakwatch", "leakwatch.core"})
    above = {name: sorted(GRAPH[name] - CORE) for name in sorted(CORE) if GRAPH[name] - CORE}
    assert above == {}


def test_the_cli_imports_only_the_core_and_is_imported_only_by_main():
    """leakwatch/cli/ imports a command's module by name from its table when that command runs
    (importlib), so no import of its own reaches past the core; and only `python -m leakwatch`
    imports it, so the console script and -m stay the only ways in."""
    cli = {name for name in GRAPH if name == "leakwatch.cli" or name.startswith("leakwatch.cli.")}
    assert {"leakwatch.cli", "leakwatch.cli.registry"} <= cli
    beyond = {name: sorted(GRAPH[name] - CORE - cli) for name in sorted(cli) if GRAPH[name] - CORE - cli}
    assert beyond == {}
    assert sorted(name for name in GRAPH if GRAPH[name] & cli and name not in cli) == ["leakwatch.__main__"]


def test_what_runs_in_production_imports_no_generator():
    """The healer, exporter, load generator, check and report read facts from the core, never from
    the code that writes config files (the socket proxy's query once came from its generator)."""
    services = ("heal", "exporter", "loadgen", "leakcheck", "report")
    generators = ("leakwatch.generate", "leakwatch.rules", "leakwatch.dashboards", "leakwatch.helm")
    wrong = {
        name: sorted(m for m in GRAPH[name] if m.startswith(generators) and m not in CORE)
        for name in GRAPH
        if name.startswith(tuple(f"leakwatch.{s}" for s in services))
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_ports_jobs_and_health_paths_are_written_only_in_the_core():
    """config/stack.yaml's ports and health paths, the healer's webhook path and config/alerts.yaml's job selectors appear,
    as literals, nowhere in the package outside the core layer (generated files are not Python)."""
    from leakwatch.core import alert_config, topology
    from leakwatch.core.settings import load as load_settings

    services = load_settings().services.values()
    ports = {str(s.default_port) for s in services}
    paths = {s.health_path for s in services if s.health_path} - {"/metrics"}  # every exporter's, not a fact of ours
    selectors = {alert_config.load().selector(e) for e in ("vllm", "node")} - {""}
    webhook = topology.HEALER_WEBHOOK_PATH  # a path of its own (Alertmanager's API also ends in /alerts)
    port_in_url = re.compile(r"(?::|port )(\d{2,5})\b")
    found = []
    for name, path in sorted(MODULES.items()):
        if name in CORE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            text = node.value
            hits = {p for p in port_in_url.findall(text) if p in ports}
            hits |= {p for p in paths if text == p or f'{p}"' in text or text.endswith(p)}
            hits |= {s for s in selectors if s in text}
            hits |= {webhook} if text == webhook else set()
            found += [f"{name}:{node.lineno}: {hit}" for hit in sorted(hits)]
    assert found == [], "\n".join(found)


def test_no_two_modules_share_a_name():
    """A module's name says what it is, so two modules doing different things never share one:
    only the package conventions repeat (__init__, __main__, and each command's command.py)."""
    by_name: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        by_name.setdefault(path.name, []).append(name)
    shared = {base: sorted(names) for base, names in by_name.items() if len(names) > 1}
    assert set(shared) <= {"__init__.py", "__main__.py", "command.py"}, shared


def _literal_parts(tree: ast.AST):
    """(string literal, whether an f-string's placeholder follows it) for every string in `tree`."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for part, after in zip(node.values, [*node.values[1:], None], strict=True):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    inside.add(id(part))
                    yield part, isinstance(after, ast.FormattedValue)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside:
            yield node, False


def hand_built(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every compose address, profile service or state folder `source` writes itself:
    a compose host before a `:` or `-` that an f-string fills in (f"http://vllm:{port}",
    f"vllm-{profile}"), a host's URL with its port or a host's prefix as a literal ("http://vllm:8000",
    "vllm-canary-"), and the state folder's name (".stack") as a path."""
    from leakwatch.core.topology import COMPOSE_HOSTS

    hosts = "|".join(sorted(map(re.escape, set(COMPOSE_HOSTS.values()) - {"localhost"}), key=len, reverse=True))
    built = re.compile(rf"(?:^|[^\w.-])(?:{hosts})[:-]$")
    spelled = re.compile(rf"//(?:{hosts}):(?:\d|$)|^(?:{hosts})-$")
    state_folder = re.compile(r"(?:^|[\s/:-])\.stack(?:/|}|$)")
    return [
        (node.lineno, node.value)
        for node, filled in _literal_parts(ast.parse(source))
        if (filled and built.search(node.value)) or spelled.search(node.value) or state_folder.search(node.value)
    ]


def test_compose_addresses_service_names_and_the_state_folder_are_written_only_in_the_core():
    """A service's address on the compose network (`http://vllm:8000`, `alertmanager:9093`) comes from
    core/topology.py (compose_url, compose_address), and so does the compose service of a profile
    (`vllm-<profile>`, `leakwatch-exporter-<profile>`: profile_service). The state folder (`.stack`)
    is named only in core/paths.py; what lives in it, in core/state_layout.py."""
    found = [
        f"{name}:{line}: {text!r}"
        for name, path in sorted(MODULES.items())
        if name not in CORE
        for line, text in hand_built(path.read_text())
    ]
    assert found == [], "\n".join(found)


def test_the_hand_built_check_sees_what_it_is_for():
    """The leaks the check above was written for (compose.py, compose_healer.py, the compose drill,
    the local image build), and what it leaves alone (vLLM's metric names, prose about a URL)."""
    leaks = (
        'x = f"http://vllm:{p}", f"vllm-{profile}", f"leakwatch-exporter-{profile}", f"alertmanager:{p}", '
        '"http://vllm:8000", "vllm-canary-", REPO_ROOT / ".stack" / "docker", "${STATE:-./.stack}/router"'
    )
    assert sorted(text for _, text in hand_built(leaks)) == sorted(
        [
            "http://vllm:",
            "vllm-",
            "leakwatch-exporter-",
            "alertmanager:",
            "http://vllm:8000",
            "vllm-canary-",
            ".stack",
            "${STATE:-./.stack}/router",
        ]
    )
    fine = 'x = f"vllm:kv_cache_usage_perc{{{s}}}", "vllm:", "the healer (http://healer:<port>)", "vllm-cpu"'
    assert hand_built(fine) == []
