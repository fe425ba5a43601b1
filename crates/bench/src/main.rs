//! The `gradus-bench` binary: everything lives in the library (`gradus_bench::cli`).

fn main() -> std::process::ExitCode {
    gradus_bench::cli::main_with_args(std::env::args().collect())
}
