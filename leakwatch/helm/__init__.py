"""The Kubernetes Helm chart (deploy/helm/leakwatch/): the parts `leakwatch generate` writes from the
same sources as compose and the native runner, and the real Helm engine that renders it."""
