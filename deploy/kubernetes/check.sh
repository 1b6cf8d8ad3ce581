#!/usr/bin/env bash
# Checks the manifests against Kubernetes' own schemas, offline: kubernetes-validate (PyPI)
# ships the OpenAPI schemas of every release, so no cluster and no network is needed once
# it is installed. Strict: a misspelt field fails. Run by .ci/run.
#
#   deploy/kubernetes/check.sh [KUBERNETES_VERSION]     (default 1.30.0)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${WIREBENCH_K8S_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/wirebench-kubernetes-validate}
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate==1.37.0'
fi
"$venv/bin/kubernetes-validate" --strict -k "${1:-1.30.0}" \
    "$here/server.yaml" "$here/sweep-job.yaml" "$here/lab-job.yaml"
