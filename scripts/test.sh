#!/usr/bin/env bash
# Runs every test of laneway, on a developer's machine and in CI alike.
#
#   1. cargo fmt --check
#   2. cargo build --release (workspace, all targets): one release build that
#      the unit/integration tests, clippy and the conformance suite share
#   3. cargo clippy --release -D warnings
#   4. cargo nextest run --release (Rust unit and integration tests), then
#      scripts/fuzz.sh smoke (every fuzz target briefly; fuzz/, own target dir)
#   5. the conformance suite (pytest + boto3 + aws CLI, conformance/) against
#      target/release/laneway, from a venv at .venv built from
#      conformance/requirements.txt (and .venv-readers from
#      conformance/readers/requirements.txt, for readers whose pins clash;
#      and .venv-spark from conformance/readers/spark-requirements.txt with
#      S3A's jars in .venv-spark/jars, for the Spark reader)
#
# Needs: a Rust toolchain with rustfmt, clippy and cargo-nextest; python3
# (>= 3.9) with the venv module; network access to crates.io and PyPI the
# first time. A Java runtime (17) for the Spark tests: without `java` the
# Spark setup is skipped and test_spark.py skips, saying why. Nothing else.
#
# fmt and clippy findings do not stop the run (the tests still run, so one
# CI run reports everything), but they make it fail at the end. A build
# failure stops it at once. Exit status: 0 only if every step passed and
# pytest ran at least one test.
#
# Environment knobs:
#   LANEWAY_SKIP_LINT=1     skip fmt and clippy (quick local iterations)
#   LANEWAY_SKIP_FUZZ=1     skip the fuzz smoke run
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

# --- 4b. fuzz smoke run ----------------------------------------------------------
# Every parser fuzz target for a few seconds (scripts/fuzz.sh, docs/fuzzing.md).
if [[ "${LANEWAY_SKIP_FUZZ:-0}" != 1 ]]; then
    step "scripts/fuzz.sh smoke"
    if ! bash scripts/fuzz.sh smoke; then
        FAILED+=("fuzz smoke (scripts/fuzz.sh smoke; inputs in fuzz/artifacts/)")
    fi
fi

# --- 5. conformance suite ------------------------------------------------------
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
    echo "error: $PYTHON is older than 3.9" >&2
    exit 1
fi

# ensure_venv DIR REQUIREMENTS: create DIR as a venv (again, if it no longer
# runs: moved checkout, removed interpreter) and install REQUIREMENTS into it,
# only when the file changed since the last install. pip uses its cache
# (~/.cache/pip, or PIP_CACHE_DIR) when there is one.
ensure_venv() {
    local venv="$1" req="$2"
    step "python venv ${venv#"$ROOT"/} from $req"
    if [[ -d "$venv" ]] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        echo "recreating broken venv at $venv"
        rm -rf "$venv"
    fi
    if [[ ! -x "$venv/bin/python" ]]; then
        "$PYTHON" -m venv "$venv"
    fi
    local stamp="$venv/.requirements.sha256" hash
    hash="$(sha256sum "$req" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$hash" ]]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
        echo "$hash" >"$stamp"
    else
        echo "up to date"
    fi
}

VENV="$ROOT/.venv"
ensure_venv "$VENV" conformance/requirements.txt

# s3fs (aiobotocore) pins an older botocore than the main venv's boto3 and
# aws CLI, so the readers get their own venv; test_readers.py runs its
# reader scripts with this interpreter.
RVENV="$ROOT/.venv-readers"
ensure_venv "$RVENV" conformance/readers/requirements.txt
export LANEWAY_READERS_PYTHON="$RVENV/bin/python"

# ensure_spark_jars VENV: hadoop-aws-3.3.1.jar and
# aws-java-sdk-bundle-1.11.901.jar in VENV/jars, taken from the deps/jars/
# folder of the sagemaker-pyspark 1.4.5 source distribution on PyPI (pip
# download only: installing it would pin an old pyspark), and kept while
# they match conformance/readers/spark-jars.sha256.
ensure_spark_jars() {
    local venv="$1"
    local jars="$venv/jars" sums="$ROOT/conformance/readers/spark-jars.sha256"
    local tmp="$venv/.jars-download"
    step "S3A jars in ${jars#"$ROOT"/}"
    if [[ -d "$jars" ]] && (cd "$jars" && sha256sum --quiet --strict -c "$sums") >/dev/null 2>&1; then
        echo "up to date"
        return
    fi
    rm -rf "$tmp" "$jars"
    mkdir -p "$tmp" "$jars"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check \
        --no-deps --no-binary :all: --dest "$tmp" sagemaker-pyspark==1.4.5
    tar -xzf "$tmp"/sagemaker_pyspark-1.4.5.tar.gz -C "$tmp" \
        sagemaker_pyspark-1.4.5/deps/jars/hadoop-aws-3.3.1.jar \
        sagemaker_pyspark-1.4.5/deps/jars/aws-java-sdk-bundle-1.11.901.jar
    mv "$tmp"/sagemaker_pyspark-1.4.5/deps/jars/*.jar "$jars"/
    rm -rf "$tmp"
    if ! (cd "$jars" && sha256sum --strict -c "$sums"); then
        echo "error: the S3A jars in $jars do not match $sums" >&2
        rm -rf "$jars"
        exit 1
    fi
}

# Spark (pyspark and its own py4j) gets its own venv too; test_spark.py
# runs readers/spark_check.py with it. Without Java it would not start.
SVENV="$ROOT/.venv-spark"
if command -v java >/dev/null 2>&1 || [[ -x "${JAVA_HOME:-/nonexistent}/bin/java" ]]; then
    ensure_venv "$SVENV" conformance/readers/spark-requirements.txt
    ensure_spark_jars "$SVENV"
    export LANEWAY_SPARK_PYTHON="$SVENV/bin/python"
else
    step "Spark venv: skipped, no java (test_spark.py skips; Debian: apt-get install openjdk-17-jre-headless)"
fi

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
