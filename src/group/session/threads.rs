//! The member's own threads, and what their death does: the membership thread (the classic
//! heartbeat thread, or the consumer group protocol's) keeps the session and follows the group;
//! the commit thread (`group/commit.rs`) sends every offset commit. Either one dying leaves a
//! poll loop that must not go on: nothing would renew the session, or nothing could be committed
//! and every effect applied from then on would be redone by the next owner. So a death fences
//! everything owned at once, as lost, and every later poll fails with it
//! ([`ThreadDeath::error`]), until the application closes the consumer.
//!
//! Tests make a thread panic through [`Shared::request_panic`], checked by the thread at each of
//! its turns ([`Shared::panic_if_requested`]).

use std::sync::atomic::Ordering;

use super::{SessionState, Shared};
use crate::basics::panic::panic_message;
use crate::group::error::GroupError;
use crate::group::outcome::LostReason;

/// A thread of a group member whose death ends the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupThread {
    /// The heartbeat thread (classic), or the consumer group protocol's thread.
    Membership,
    /// The thread that sends the offset commits.
    Commit,
}

impl GroupThread {
    /// Its bit in `Shared::panic_requested`.
    fn bit(self) -> u8 {
        match self {
            GroupThread::Membership => 1,
            GroupThread::Commit => 2,
        }
    }

    /// Why its partitions were lost.
    fn lost_reason(self) -> LostReason {
        match self {
            GroupThread::Membership => LostReason::MembershipThreadDied,
            GroupThread::Commit => LostReason::CommitThreadDied,
        }
    }
}

/// Which thread died, with its panic message.
#[derive(Clone, Debug)]
pub(crate) struct ThreadDeath {
    thread: GroupThread,
    message: String,
}

impl ThreadDeath {
    /// What every poll returns from the death on.
    pub(crate) fn error(&self) -> GroupError {
        match self.thread {
            GroupThread::Membership => GroupError::MembershipThreadDied(self.message.clone()),
            GroupThread::Commit => GroupError::CommitThreadDied(self.message.clone()),
        }
    }
}

impl SessionState {
    /// `thread` died (panicked with `message`): everything owned is fenced as lost at once,
    /// under this lock, and the first death is kept for every later poll.
    pub(crate) fn thread_died(&mut self, thread: GroupThread, message: String) {
        log::error!("the {thread:?} thread of the group member died: {message}");
        self.lose(thread.lost_reason(), false);
        self.died.get_or_insert(ThreadDeath { thread, message });
    }

    /// The death of a thread of this member, if one died.
    pub(crate) fn died(&self) -> Option<&ThreadDeath> {
        self.died.as_ref()
    }
}

impl Shared {
    /// Runs `body`, the loop of `thread`, and turns its panic into the member's death
    /// ([`SessionState::thread_died`]): the partitions are fenced at once instead of staying in
    /// the hands of a poll loop whose session nobody maintains, or whose work nobody commits.
    pub(crate) fn run_thread(&self, thread: GroupThread, body: impl FnOnce()) {
        let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) else {
            return;
        };
        let message = panic_message(panic.as_ref())
            .unwrap_or_else(|| "a panic without a message".to_string());
        self.lock().thread_died(thread, message);
        self.wake.notify_all();
    }

    /// Tests only: asks `thread` to panic (see [`Self::panic_if_requested`]).
    pub(crate) fn request_panic(&self, thread: GroupThread) {
        self.panic_requested
            .fetch_or(thread.bit(), Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Called by `thread` at each of its turns: panics when a test asked for it, and does
    /// nothing otherwise.
    pub(crate) fn panic_if_requested(&self, thread: GroupThread) {
        if self.panic_requested.load(Ordering::SeqCst) & thread.bit() != 0 {
            panic!("{thread:?} thread panic requested by a test");
        }
    }
}
