# Sourced by the other scripts: a virtualenv in .venv with the given requirements file,
# reinstalled only when that file changed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
ensure_venv() {
  local req=$1 stamp
  if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
      { echo "v100site needs Python 3.11 or newer: set PYTHON=python3.11" >&2; exit 1; }
    "$PYTHON" -m venv .venv
  fi
  stamp=.venv/.installed-$(basename "$req")-$(cat requirements*.txt | sha256sum | cut -c1-16)
  if [ ! -f "$stamp" ]; then
    # One installer at a time (run.sh and try-llamacpp.sh may start together).
    exec 9>.venv/.install-lock && flock 9
    if [ ! -f "$stamp" ]; then
      .venv/bin/python -m pip install -q --upgrade pip
      .venv/bin/python -m pip install -q -r "$req"
      touch "$stamp"
    fi
    exec 9>&-
  fi
}
