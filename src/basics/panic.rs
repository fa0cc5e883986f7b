//! The text of a caught panic, for the threads that turn a panic into an error or a death
//! notice (the consumer's and the share consumer's workers, the group's threads).

use std::any::Any;

/// The message a panic carried (`panic!("...")` gives a `&str`, a formatted `panic!` a
/// `String`), or `None` for any other payload: each caller names the missing message its own
/// way.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_kinds_of_message_and_nothing_else() {
        let caught = |f: fn()| std::panic::catch_unwind(f).expect_err("panicked");
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let literal = caught(|| panic!("plain"));
        let formatted = caught(|| panic!("formatted {}", 7));
        let other = caught(|| std::panic::panic_any(42_u8));
        std::panic::set_hook(hook);
        assert_eq!(panic_message(literal.as_ref()).as_deref(), Some("plain"));
        assert_eq!(
            panic_message(formatted.as_ref()).as_deref(),
            Some("formatted 7")
        );
        assert_eq!(panic_message(other.as_ref()), None);
    }
}
