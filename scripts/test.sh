#!/usr/bin/env bash
# Runs every test of laneway, on a developer's machine and in CI alike.
#
#   1. cargo fmt --check
#   2. cargo build --release (workspace, all targets): one release build that
#      the unit/integration tests, clippy and the conformance suite share
#   3. cargo clippy --release -D warnings
#   4. cargo nextest run --release (Rust unit and integration tests)
#   5. the conformance suite (pytest + boto3 + aws CLI, conformance/) against
#      target/release/laneway, from a venv at .venv built from
#      conformance/requirements.txt
#
# Needs: a Rust toolchain with rustfmt, clippy and cargo-nextest; python3
# (>= 3.9) with the venv module; network access to crates.io and PyPI the
# first time. Nothing else.
#
# fmt and clippy findings do not stop the run (the tests still run, so one
# CI run reports everything), but they make it fail at the end. A build
# failure stops it at once. Exit status: 0 only if every step passed and
# pytest ran at least one test.
#
# Environment knobs:
#   LANEWAY_SKIP_LINT=1     skip fmt and clippy (quick local iterations)
#   PYTEST_ARGS="-k list"   extra pytest arguments
#   NEXTEST_ARGS="..."      extra nextest arguments
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}"

START=$SECONDS
FAILED=()

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "error: cargo-nextest is not installed (cargo install cargo-nextest --locked)" >&2
    exit 1
fi

step() {
    printf '\n==> [%4ds] %s\n' "$((SECONDS - START))" "$*"
}

# --- 1. formatting -----------------------------------------------------------
if [[ "${LANEWAY_SKIP_LINT:-0}" != 1 ]]; then
    step "cargo fmt --all -- --check"
    if ! cargo fmt --all -- --check; then
        FAILED+=("cargo fmt (run: cargo fmt --all)")
    fi
fi

# --- 2. build ------------------------------------------------------------------
step "cargo build --release --workspace --all-targets"
cargo build --release --workspace --all-targets

LANEWAY_BIN="target/release/laneway"
if [[ ! -x "$LANEWAY_BIN" ]]; then
    echo "error: $LANEWAY_BIN was not built" >&2
    exit 1
fi

# --- 3. lints ------------------------------------------------------------------
if [[ "${LANEWAY_SKIP_LINT:-0}" != 1 ]]; then
    step "cargo clippy --workspace --all-targets --release -- -D warnings"
    if ! cargo clippy --workspace --all-targets --release -- -D warnings; then
        FAILED+=("cargo clippy")
    fi
fi

# --- 4. Rust tests ---------------------------------------------------------------
step "cargo nextest run --workspace --release"
# shellcheck disable=SC2086  # NEXTEST_ARGS is meant to split into words
if ! cargo nextest run --workspace --release ${NEXTEST_ARGS:-}; then
    FAILED+=("cargo nextest")
fi

# --- 5. conformance suite ------------------------------------------------------
step "python venv (.venv) from conformance/requirements.txt"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
    echo "error: $PYTHON is older than 3.9" >&2
    exit 1
fi
VENV="$ROOT/.venv"
# Recreate a venv that no longer runs (moved checkout, removed interpreter).
if [[ -d "$VENV" ]] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "recreating broken venv at $VENV"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
# Reinstall only when requirements.txt changed since the last install.
REQ="conformance/requirements.txt"
STAMP="$VENV/.requirements.sha256"
REQ_HASH="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$REQ_HASH" ]]; then
    # pip uses its cache (~/.cache/pip, or PIP_CACHE_DIR) when there is one.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ"
    echo "$REQ_HASH" >"$STAMP"
else
    echo "venv up to date"
fi

step "python venv (.venv-readers) from conformance/readers/requirements.txt"
# s3fs (aiobotocore) pins an older botocore than the main venv's boto3 and
# aws CLI, so the readers get their own venv; test_readers.py runs its
# reader scripts with this interpreter.
RVENV="$ROOT/.venv-readers"
if [[ -d "$RVENV" ]] && ! "$RVENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$RVENV"
fi
if [[ ! -x "$RVENV/bin/python" ]]; then
    "$PYTHON" -m venv "$RVENV"
fi
RREQ="conformance/readers/requirements.txt"
RSTAMP="$RVENV/.requirements.sha256"
RREQ_HASH="$(sha256sum "$RREQ" | cut -d' ' -f1)"
if [[ ! -f "$RSTAMP" || "$(cat "$RSTAMP")" != "$RREQ_HASH" ]]; then
    "$RVENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$RREQ"
    echo "$RREQ_HASH" >"$RSTAMP"
else
    echo "readers venv up to date"
fi
export LANEWAY_READERS_PYTHON="$RVENV/bin/python"

step "pytest conformance/ (LANEWAY_BIN=$LANEWAY_BIN)"
set +e
# shellcheck disable=SC2086  # PYTEST_ARGS is meant to split into words
LANEWAY_BIN="$LANEWAY_BIN" "$VENV/bin/python" -m pytest conformance ${PYTEST_ARGS:-}
PYTEST_RC=$?
set -e
case "$PYTEST_RC" in
    0) ;;
    5) FAILED+=("pytest collected no tests") ;;
    *) FAILED+=("pytest (exit $PYTEST_RC)") ;;
esac

# --- summary -------------------------------------------------------------------
step "done"
if ((${#FAILED[@]})); then
    echo "FAILED steps:"
    printf '  - %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all steps passed"
