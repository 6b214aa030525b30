"""Shared by the chart tests: rendering the chart for each values file, and the prometheus-operator
CRD validator (npm's @kubernetes-models/prometheus-operator, installed from the registry into
.cache/ on first use; its schemas are generated from the operator's CRDs)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

from leakwatch.core.paths import REPO_ROOT

CRD_MODELS_PACKAGE = "@kubernetes-models/prometheus-operator"
CRD_MODELS_VERSION = "6.0.0"
CRD_MODELS_DIR = REPO_ROOT / ".cache" / "kubernetes-models"
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"),
}

# Reads [{apiVersion, kind, ...}] on stdin; prints one JSON list of "kind/name: error" strings.
VALIDATOR = """
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const root = process.argv[2];
const objects = JSON.parse(readFileSync(0, "utf8"));
const errors = [];
for (const obj of objects) {
  const version = obj.apiVersion.split("/")[1];
  const file = `${root}/node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/${version}/${obj.kind}.js`;
  const mod = await import(pathToFileURL(file).href);
  try { new mod[obj.kind](obj).validate(); }
  catch (e) { errors.push(`${obj.kind}/${obj.metadata.name}: ${e.message}`); }
}
console.log(JSON.stringify(errors));
"""


def crd_models() -> Path:
    """The installed package's prefix (npm install on first use, pinned).

    Test workers share the prefix: a file lock makes one of them install while the others wait, and a
    marker written after npm succeeds (not npm's own package.json, which lands mid-install) says it is whole.
    """
    CRD_MODELS_DIR.mkdir(parents=True, exist_ok=True)
    installed = CRD_MODELS_DIR / f"installed-{CRD_MODELS_VERSION}"
    with open(CRD_MODELS_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed.exists():
            return CRD_MODELS_DIR
        if shutil.which("npm") is None:
            raise RuntimeError("npm is missing: scripts/bootstrap.sh --dev installs it (Debian's npm)")
        done = subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(CRD_MODELS_DIR),
                "--no-audit",
                "--no-fund",
                "--no-save",
                f"{CRD_MODELS_PACKAGE}@{CRD_MODELS_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"npm install of {CRD_MODELS_PACKAGE}@{CRD_MODELS_VERSION} failed: {done.stderr[-2000:]}"
            )
        installed.touch()
    return CRD_MODELS_DIR


def validate_crd_objects(objects: list[dict]) -> list[str]:
    root = crd_models()
    script = root / f"validate-{os.getpid()}.mjs"  # one per test worker: a shared file could be read mid-write
    script.write_text(VALIDATOR)
    done = subprocess.run(
        ["node", str(script), str(root)], input=json.dumps(objects), capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"validator failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)
