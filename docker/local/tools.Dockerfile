# Local image set, layer 1: every Debian package the look-alike images need, in one apt run (one
# download, one layer shared by all of them). FROM the debootstrap base (leakwatch/stack/local_images.py).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
# The machine's CA bundle: PyPI through this machine's TLS setup (pip reads PIP_CERT).
COPY ca.pem /usr/local/share/leakwatch/ca.pem
ENV PIP_CERT=/usr/local/share/leakwatch/ca.pem PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1
# No init system here: keep the packages' maintainer scripts from starting their daemons.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      prometheus prometheus-alertmanager prometheus-node-exporter haproxy wget ca-certificates \
      python3 python3-pip python3-venv \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
