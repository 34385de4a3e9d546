//! Standard output of every command. A reader that goes away (`kiln info | head -2`) ends the
//! command quietly with exit status 0, as Unix tools do, where `println!` would panic; any other
//! write error is reported once and ends the command with status 1.

use std::io::Write;

/// Writes `args` to the locked stdout and flushes (tokens stream as they come).
pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        drop(out);
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            crate::exit(0);
        }
        eprintln!("kiln: cannot write to stdout: {e}");
        crate::exit(1);
    }
}

// Both macros reach every module declared after `mod out` in main.rs (`#[macro_use]`).

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` through [`write`].
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}
