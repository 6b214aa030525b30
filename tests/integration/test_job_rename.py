"""A renamed scrape job is renamed once: with config/alerts.yaml's selectors naming other jobs
(`job="inference"` for vLLM, `job="hosts"` for the node exporter, as a Kubernetes or fleet install
would), the rules, the dashboards, `leakwatch check`'s queries and the drill's all select the new
jobs and none the old. Run in a fresh interpreter that reads the renamed file (the modules build
their queries when imported)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from leakwatch.core.alert_config import ALERTS_FILE

PROBE = """
import json, sys
from leakwatch.core import alert_config as config
read = config.load
config.load = lambda time_scale=1.0, path=sys.argv[1]: read(time_scale, path)
from leakwatch.dashboards.files import generated_files
from leakwatch.drill import orchestrator as drill
from leakwatch.leakcheck import collect
from leakwatch.rules.render import render_rules
out = {
    "rules": json.dumps(render_rules(config=sys.argv[1])),
    "dashboards": json.dumps([render() for path, render in generated_files().items() if path.suffix == ".json"]),
    "check": json.dumps([collect.START_TIME, *(q.expr for group in collect.MEMORY_GROUPS for q in group)]),
    "drill": drill.API_MEMORY,
}
print(json.dumps(out))
"""


def test_renamed_jobs_reach_rules_dashboards_check_and_drill(tmp_path):
    doc = yaml.safe_load(ALERTS_FILE.read_text())
    assert doc["selectors"]["vllm"] == 'job="vllm"' and doc["selectors"]["node"] == 'job="node"'
    doc["selectors"].update(vllm='job="inference"', node='job="hosts"')
    renamed = tmp_path / "alerts.yaml"
    renamed.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = subprocess.run([sys.executable, "-c", PROBE, str(renamed)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    for consumer, text in found.items():
        text = text.replace('\\\\"', '"').replace('\\"', '"')  # queries inside JSON strings
        assert 'job="vllm"' not in text and 'job="node"' not in text, consumer
        assert 'job="inference"' in text, consumer
    for consumer in ("rules", "dashboards"):
        assert 'job="hosts"' in found[consumer].replace('\\\\"', '"').replace('\\"', '"'), consumer
