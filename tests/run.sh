#!/usr/bin/env bash
# The test suite: installs what is missing, builds, runs every Rust test (unit and
# end-to-end on the bundled subjects), then carves GNU coreutils cut (downloaded and
# built at run time) and checks its carving figures.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup.sh
cargo test --workspace --release
if [ "${TRESTLE_SKIP_COREUTILS:-0}" != 1 ]; then
  bash tests/coreutils/carve-cut.sh
fi
