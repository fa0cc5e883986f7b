//! What the share consumer reports to its caller.

use std::error::Error;
use std::fmt;

use crate::config::ConfigError;
use crate::group::GroupError;
use crate::guard::GuardConfigError;
use crate::wire::WireError;

/// Why a share consumer call failed. A failed call acknowledges nothing it was not sure of: the
/// records this member holds are released where it can still say so, and otherwise their locks
/// run out and the broker redelivers them.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShareError {
    /// The configuration was refused (the setting is named).
    Config(ConfigError),
    /// The lock guard's settings are invalid.
    Locks(GuardConfigError),
    /// The share group membership failed for good (authorization, a broker without share
    /// groups, the member removed for good): nothing more is fetched.
    Group(GroupError),
    /// A wire error no retry can fix: a refused authentication or TLS handshake, a broker that
    /// does not speak what share groups need, an invalid setting (and, from `subscribe`, no
    /// broker reachable at the start). A timeout or a lost connection on the way is not one:
    /// the share consumer tries again after its backoff.
    Wire(WireError),
    /// A worker thread panicked on a record (decoupled mode); the record was released. The
    /// message is the panic's, when it had one.
    HandlerPanicked {
        /// The panic's message.
        message: String,
    },
}

impl fmt::Display for ShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShareError::Config(e) => write!(f, "share consumer configuration: {e}"),
            ShareError::Locks(e) => write!(f, "lock guard configuration: {e}"),
            ShareError::Group(e) => write!(f, "share group membership: {e}"),
            ShareError::Wire(e) => write!(f, "share consumer: {e}"),
            ShareError::HandlerPanicked { message } => {
                write!(
                    f,
                    "a worker's handler panicked (record released): {message}"
                )
            }
        }
    }
}

impl Error for ShareError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ShareError::Config(e) => Some(e),
            ShareError::Locks(e) => Some(e),
            ShareError::Group(e) => Some(e),
            ShareError::Wire(e) => Some(e),
            ShareError::HandlerPanicked { .. } => None,
        }
    }
}

impl From<ConfigError> for ShareError {
    fn from(e: ConfigError) -> Self {
        ShareError::Config(e)
    }
}

impl From<GroupError> for ShareError {
    fn from(e: GroupError) -> Self {
        ShareError::Group(e)
    }
}

impl From<WireError> for ShareError {
    fn from(e: WireError) -> Self {
        ShareError::Wire(e)
    }
}

impl From<GuardConfigError> for ShareError {
    fn from(e: GuardConfigError) -> Self {
        ShareError::Locks(e)
    }
}
