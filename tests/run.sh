#!/usr/bin/env bash
# The test suite: installs what is missing, builds, runs every Rust test (unit and
# end-to-end on the bundled subjects), the benchmark scripts' tests and the shell
# examples of README.md and docs/ as written, then carves GNU coreutils cut (downloaded and
# built at run time) and checks its carving figures, and captures seeds from cut's
# and GNU sed's own test suites (`trestle capture`). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup.sh
# The campaign test renders its HTML report in headless Chromium.
if ! command -v chromium >/dev/null 2>&1; then
  echo "run: installing chromium (report screenshot test)" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null 2>&1 \
    || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; } \
    || echo "run: chromium could not be installed; the report screenshot test will try again, and fail without it" >&2
fi
log="$(mktemp /tmp/trestle-test.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
# Formatting (rustfmt.toml): a difference fails the suite, and says where.
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt >/dev/null 2>&1 \
  || echo "run: rustfmt is missing and rustup could not add it" >&2
fmt=pass
if ! cargo fmt --all -- --check >/dev/null 2>&1; then
  echo "run: cargo fmt --all -- --check failed; not formatted (cargo fmt --all fixes them):" >&2
  cargo fmt --all -- --check 2>&1 | grep '^Diff in' | sed 's/ at line.*//' | sort -u | head -20 >&2
  fmt=fail
fi
# Lints (the workspace's [lints], clippy::all): a warning fails the suite, and says where.
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy >/dev/null 2>&1 \
  || echo "run: clippy is missing and rustup could not add it" >&2
lint=pass
if ! cargo clippy --workspace --all-targets --release --quiet -- -D warnings 2>"$log.clippy"; then
  echo "run: cargo clippy --workspace --all-targets --release -- -D warnings failed:" >&2
  grep -E '^(warning|error)' -A3 "$log.clippy" | head -40 >&2
  lint=fail
fi
rm -f "$log.clippy"
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log" || status=1
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
if [ "$fmt" = pass ]; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
if [ "$lint" = pass ]; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
# The workspace's structure: no cycle between modules, no bridge stage that prints.
if python3 tests/structure.py; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
# The benchmark scripts' figures (statistics, bug assignment, tables): their tests,
# with the Python packages bench/pyproject.toml names.
if ! python3 -c 'import scipy, matplotlib, pytest' 2>/dev/null; then
  echo "run: installing the benchmark's Python packages (bench/pyproject.toml)" >&2
  python3 -c 'import tomllib; print("\n".join(tomllib.load(open("bench/pyproject.toml", "rb"))["project"]["dependencies"]))' \
    | xargs python3 -m pip install --quiet --root-user-action=ignore \
    || echo "run: the benchmark's Python packages could not be installed; their tests will fail" >&2
fi
if (cd bench && python3 -m pytest -q); then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
# The shell examples of README.md and docs/, run as written (those it skips, it names).
if python3 tests/doc-commands.py; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
if [ "${TRESTLE_SKIP_COREUTILS:-0}" != 1 ]; then
  cut_work="$(mktemp -d /tmp/trestle-cut.XXXXXX)"
  if bash tests/coreutils/carve-cut.sh "$cut_work"; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
  # Seeds captured from cut's own tests, on the same build.
  if bash tests/coreutils/capture-cut.sh "$cut_work"; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
  rm -rf "$cut_work"
fi
if [ "${TRESTLE_SKIP_SED:-0}" != 1 ]; then
  # Seeds captured from GNU sed's own testsuite.
  sed_work="$(mktemp -d /tmp/trestle-sed.XXXXXX)"
  if bash tests/sed/capture-sed.sh "$sed_work"; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
  rm -rf "$sed_work"
fi
[ "$failed" -eq 0 ] || status=1
echo "trestle tests: $passed passed, $failed failed"
exit $status
