//! The [`SessionScope`]: the share session (and partition in it) that acquired a record.
//!
//! Why leases need it besides their deadline: a broker releases every record a share session
//! acquired at once when that session ends (its connection closes, it is closed with epoch -1,
//! the broker forgets it, or the partition's leader changes), whatever time the locks had left.
//! A lease that only read its deadline would stay current while another member applies the
//! same record. So each lease holds the scope it was acquired under, and the layer that owns
//! the session (the wire layer's fetch thread, the share session's bookkeeping) ends the scope
//! the moment the session can have ended; from then on every lease of that scope reads not
//! current, lock-free, and the acknowledgements decided for it are never sent.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One share session incarnation (or one partition inside one): ended once, never revived.
/// Cheap to clone (one reference count) and to read (one atomic load per level); a partition's
/// scope is a child of its session's, so ending the session ends the partition's too.
#[derive(Clone, Default)]
pub struct SessionScope(Arc<ScopeCell>);

#[derive(Default)]
struct ScopeCell {
    ended: AtomicBool,
    parent: Option<SessionScope>,
}

impl SessionScope {
    /// A live scope of its own (a session incarnation).
    pub fn new() -> Self {
        Self::default()
    }

    /// A live scope inside this one (a partition of a session): it ends with this one, or
    /// alone.
    pub fn child(&self) -> Self {
        SessionScope(Arc::new(ScopeCell {
            ended: AtomicBool::new(false),
            parent: Some(self.clone()),
        }))
    }

    /// Ends the scope for good: every lease acquired under it (or under a scope inside it) reads
    /// not current from now on. True when this call ended it.
    pub fn end(&self) -> bool {
        let ended = !self.0.ended.swap(true, Ordering::AcqRel);
        if ended {
            log::debug!("share session scope ended");
        }
        ended
    }

    /// Whether this scope, or one it is inside, has ended.
    pub fn has_ended(&self) -> bool {
        let mut scope = Some(self);
        while let Some(s) = scope {
            if s.0.ended.load(Ordering::Acquire) {
                return true;
            }
            scope = s.0.parent.as_ref();
        }
        false
    }

    /// Whether this scope is `other` or inside it.
    pub fn is_within(&self, other: &SessionScope) -> bool {
        let mut scope = Some(self);
        while let Some(s) = scope {
            if s == other {
                return true;
            }
            scope = s.0.parent.as_ref();
        }
        false
    }
}

/// Scopes are equal when they are the same scope (not two scopes in the same state).
impl PartialEq for SessionScope {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SessionScope {}

impl fmt::Debug for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionScope")
            .field("at", &Arc::as_ptr(&self.0))
            .field("ended", &self.has_ended())
            .finish()
    }
}
