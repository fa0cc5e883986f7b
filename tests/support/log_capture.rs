//! A logger for the tests that count what the consumer logs: each thread that registers an
//! observer is told every line it logs (level and text), so concurrent tests of one binary
//! never see each other's lines. Installed once per process, before anything else logs, so that
//! `env_logger` stays out; lines of level warn and above are printed unless the observer took
//! them (a spin's refusals come by the thousand).

use std::cell::RefCell;
use std::sync::{Arc, Once};

/// Told of each line the registering thread logs at info or above; returns true when it took
/// the line (it is then not printed).
pub type Observer = Arc<dyn Fn(log::Level, &str) -> bool + Send + Sync>;

thread_local! {
    static OBSERVER: RefCell<Option<Observer>> = const { RefCell::new(None) };
}

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = record.args().to_string();
        let taken = OBSERVER.with(|observer| {
            observer
                .borrow()
                .as_ref()
                .is_some_and(|observe| observe(record.level(), &text))
        });
        if !taken && record.level() <= log::Level::Warn {
            eprintln!("[{} {}] {text}", record.level(), record.target());
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once per process) and makes `observer` the calling thread's (`None`
/// stops observing it).
pub fn observe_this_thread(observer: Option<Observer>) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_boxed_logger(Box::new(Capture)).expect("the first logger of this process");
        log::set_max_level(log::LevelFilter::Info);
    });
    OBSERVER.with(|o| *o.borrow_mut() = observer);
}
