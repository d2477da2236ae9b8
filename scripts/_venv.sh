# Sourced by the other scripts: a virtualenv in .venv with the given requirements file,
# reinstalled only when that file changed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ensure_venv() {
  local req=$1 stamp
  [ -x .venv/bin/python ] || python3 -m venv .venv
  stamp=.venv/.installed-$(basename "$req")-$(cat requirements*.txt | sha256sum | cut -c1-16)
  if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r "$req"
    touch "$stamp"
  fi
}
