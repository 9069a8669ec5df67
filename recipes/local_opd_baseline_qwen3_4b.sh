#!/usr/bin/env bash
# Local-guided OPD without Global ("Paired Local-only"): Local skills teach through OPD, nothing is consolidated
# into rollouts. ENV=alfworld|webshop (default webshop). Paper (WebShop): 87.50% success.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ENV=${ENV:-webshop}
run_recipe "$ENV" "local_opd_${ENV}_qwen3_4b" skillduet.use_global=false "$@"
