//! The agent-facing binary: everything lives in `tnh_conductor::tnh`.

fn main() -> std::process::ExitCode {
    tnh_conductor::tnh::main()
}
