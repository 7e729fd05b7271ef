//! The operator's binary: everything lives in `tnh_conductor::cli`.

/// The stack the command runs on. Workflow scripts can build deeply nested values, which the
/// script engine clones and drops recursively; a large stack (reserved, touched only as used)
/// keeps that an ordinary slow evaluation instead of a stack overflow that aborts the kernel.
const STACK_BYTES: usize = 256 * 1024 * 1024;

fn main() -> std::process::ExitCode {
    let command = std::thread::Builder::new()
        .name("tnh-conductor".into())
        .stack_size(STACK_BYTES)
        .spawn(tnh_conductor::cli::main);
    match command.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        // A panic was already reported by the panic hook; a failed spawn runs in place.
        Ok(Err(_)) => std::process::ExitCode::from(101),
        Err(_) => tnh_conductor::cli::main(),
    }
}
