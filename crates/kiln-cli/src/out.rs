//! Standard output and standard error of every command. A reader that goes away (`kiln info | head
//! -2`) ends the command quietly with exit status 0, as Unix tools do, where `println!` would panic;
//! any other write error is reported once and ends the command with status 1. Diagnostics to a
//! standard error that cannot be written (`2>&-`, a reader gone) are dropped, where `eprintln!` would
//! panic: the command goes on and ends with its own status.

use std::io::Write;

/// Writes `args` to the locked stdout and flushes (tokens stream as they come).
pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        drop(out);
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            crate::exit(0);
        }
        write_err(format_args!("kiln: cannot write to stdout: {e}\n"));
        crate::exit(1);
    }
}

/// Writes `args` to the locked stderr; a failure is ignored (see the module's comment).
pub fn write_err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

// The macros reach every module declared after `mod out` in main.rs (`#[macro_use]`).

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` through [`write`].
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` through [`write_err`].
macro_rules! errs {
    ($($arg:tt)*) => { $crate::out::write_err(format_args!($($arg)*)) };
}

/// `eprintln!` through [`write_err`].
macro_rules! errln {
    () => { $crate::out::write_err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}
