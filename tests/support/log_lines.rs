//! A process-wide logger that keeps every line the consumer logs at info and above, with the
//! instant it was logged and the name of the thread that logged it.
//!
//! Why not [`super::log_capture`]: that one tells each registering thread of its own lines only,
//! and the lines a fault test needs come from threads the library spawns (the membership
//! threads `heartbeat-GROUP` and `membership-GROUP`), which register nothing. The thread name
//! tells which group a line is about even when the text does not name it (a session's
//! "assignment lost"). Install it before anything logs; lines of warn and above are also printed,
//! and so are the failover lines, so a failed run shows what happened.

use std::sync::{Mutex, Once};
use std::time::Instant;

/// One logged line.
#[derive(Clone, Debug)]
pub struct Line {
    /// When it was logged.
    pub at: Instant,
    /// Its level.
    pub level: log::Level,
    /// The name of the thread that logged it ("" when unnamed).
    pub thread: String,
    /// Its text.
    pub text: String,
}

static LINES: Mutex<Vec<Line>> = Mutex::new(Vec::new());

struct Keep;

impl log::Log for Keep {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = Line {
            at: Instant::now(),
            level: record.level(),
            thread: std::thread::current().name().unwrap_or("").to_string(),
            text: record.args().to_string(),
        };
        if line.level <= log::Level::Warn || line.text.contains("accepted a heartbeat") {
            eprintln!(
                "[{} {} {}] {}",
                line.level,
                line.thread,
                record.target(),
                line.text
            );
        }
        LINES.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }

    fn flush(&self) {}
}

/// Installs the logger (once per process; it must be the first logger of the process).
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_boxed_logger(Box::new(Keep)).expect("the first logger of this process");
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// Every line kept so far for which `keep` holds.
pub fn lines(keep: impl Fn(&Line) -> bool) -> Vec<Line> {
    LINES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| keep(l))
        .cloned()
        .collect()
}
