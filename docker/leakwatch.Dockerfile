# The `leakwatch` image: the project's own services (the memory exporter) for compose.
# compose.yaml builds it with BASE_IMAGE from config/stack.yaml (services.leakwatch_exporter.base_image).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/leakwatch
# The package reads config/ (stack.yaml, the metric contract) next to itself: install in place.
COPY pyproject.toml README.md ./
COPY config ./config
# The model profiles: the Helm chart runs leakwatch.demo_model.command from this copy.
COPY serving/profiles ./serving/profiles
COPY leakwatch ./leakwatch
# gpu: NVML for the exporter; k8s: the Kubernetes client for the healer on Kubernetes.
RUN pip install -e ".[gpu,k8s]"

# Root, like vLLM in its container: reading another process's smaps_rollup needs the same user and
# no fewer capabilities (the kernel's ptrace-read check). compose runs it read-only.
ENTRYPOINT ["leakwatch", "exporter"]
