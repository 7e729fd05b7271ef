//! The operator's binary: everything lives in `tnh_conductor::cli`.

fn main() -> std::process::ExitCode {
    tnh_conductor::cli::main()
}
