# leakwatch: `make up` starts the stack, `make test` runs the test suite. Both set themselves up.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
LEAKWATCH := $(VENV)/bin/leakwatch
MODEL ?= demo
STACK ?= auto
# IMAGES=local: compose on images built here from Debian and PyPI (hosts that cannot pull; README).
IMAGES ?=
export MODEL STACK VENV IMAGES

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
up: setup  ## start the stack (MODEL=<profile>, STACK=auto|compose|native)
	@$(LEAKWATCH) stack up

down:  ## stop the stack and everything it started
	@if [ -x $(LEAKWATCH) ]; then $(LEAKWATCH) stack down; else echo "nothing to stop (no $(VENV))"; fi

status:  ## show each service's state and health
	@$(LEAKWATCH) stack status

logs:  ## follow the stack's logs
	@$(LEAKWATCH) stack logs

.PHONY: test test-fast
test: setup-dev  ## run the whole test suite (starts and stops every server it needs)
	@$(PY) -m pytest

test-fast: setup-dev  ## unit and contract tests only, no real vLLM stack
	@$(PY) -m pytest -m "not stack"

.PHONY: drill
drill: setup-dev  ## inject a known leak into a private native stack: alert, heal, estimate (minutes)
	@$(LEAKWATCH) drill

.PHONY: generate lint
generate: setup-dev  ## rewrite the generated files (compose.yaml, prometheus.yml, rules, dashboards)
	@$(LEAKWATCH) generate

lint: setup-dev  ## check generated files are fresh and the configs are valid
	@$(LEAKWATCH) generate --check
	@$(LEAKWATCH) dashboards validate
	@promtool check config prometheus/prometheus.yml
	@promtool check rules prometheus/rules/*.yml prometheus/reference/*.yml
	@promtool test rules prometheus/tests/*.test.yml
	@amtool check-config alertmanager/alertmanager.yml

# Each benchmark prints one summary line; `make bench` runs them all.
BENCHES :=
BENCHES += bench-convert
BENCHES += bench-drill
BENCHES += bench-exporter
BENCHES += bench-detection
BENCHES += bench-loadgen
.PHONY: bench
bench: setup-dev  ## run every benchmark and print their summary lines
	@set -e; for b in $(BENCHES); do $(MAKE) --no-print-directory $$b | tee /tmp/leakwatch-$$b.log; done; \
	echo "== summary"; for b in $(BENCHES); do tail -n 1 /tmp/leakwatch-$$b.log; done

.PHONY: bench-convert
bench-convert: setup-dev  ## XGLM converter peak memory vs checkpoint size, beside loading it whole
	@$(PY) benchmarks/convert_xglm.py

.PHONY: bench-drill
bench-drill: setup-dev  ## one accelerated drill: leak start -> alert, alert -> recovered baseline, estimate error
	@$(LEAKWATCH) drill

.PHONY: bench-exporter
bench-exporter: setup-dev  ## exporter scrape latency and CPU against a real vLLM, beside node exporter
	@$(PY) benchmarks/exporter.py

.PHONY: bench-detection
bench-detection: setup-dev  ## time to first alert per leak scenario (ours vs the articles' rules), false alerts in 30 healthy days
	@$(PY) benchmarks/detection.py

.PHONY: bench-loadgen
bench-loadgen: setup-dev  ## this load generator vs vLLM's benchmark client: TTFT error and streams per process
	@$(PY) -m leakwatch.loadgen.bench
