//! Where the stages' progress lines and warnings go. A stage never prints: it says
//! what it is doing through the `log` facade (`log::info!`, one line each), and the
//! command line, which owns the terminal, writes trestle's own lines to stderr as they
//! are, without a level or a prefix. Lines of the libraries trestle uses (LibAFL logs
//! too) are not shown. Used as a library, the stages are silent unless the caller
//! installs a logger of its own.

/// The stderr logger of the `trestle` command.
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.target().starts_with("trestle")
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            eprintln!("{}", record.args());
        }
    }

    fn flush(&self) {}
}

static STDERR: Stderr = Stderr;

/// Send the stages' lines to stderr for the rest of the process.
pub fn install() {
    // A logger set already (a second call) stays.
    if log::set_logger(&STDERR).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}
