"""Generated files: everything committed that is derived from config/ and serving/profiles/.

`leakwatch generate` writes them; `leakwatch generate --check` fails when a committed file differs
from what the sources produce (run by the tests, like kube-prometheus's `git diff --exit-code`).
"""
