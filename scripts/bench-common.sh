# Sourced by the benchmark scripts (not run on its own): what they share.
#   gradus_binary   the Gradus release binary to measure: $GRADUS_BIN if set, else this tree's,
#                   built first (cargo build --release -p gradus-server)
#   ticks PID       the process' CPU time so far (user + system), in clock ticks (getconf CLK_TCK)

gradus_binary() {
    if [ -n "${GRADUS_BIN:-}" ]; then
        echo "$GRADUS_BIN"
    else
        cargo build --release -q -p gradus-server >&2
        echo "${CARGO_TARGET_DIR:-target}/release/gradus"
    fi
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
