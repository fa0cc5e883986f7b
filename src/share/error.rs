//! What the share consumer reports to its caller.

use std::error::Error;
use std::fmt;

use crate::basics::error_kind::ErrorKind;
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

impl ShareError {
    /// The situation this error reports, named as every error of the crate names it: a refused
    /// configuration (the consumer's settings or the lock guard's) is [`ErrorKind::Config`], the
    /// membership's and the wire's errors are their own kind, a panicked handler is
    /// [`ErrorKind::Handler`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            ShareError::Config(e) => e.kind(),
            ShareError::Locks(_) => ErrorKind::Config,
            ShareError::Group(e) => e.kind(),
            ShareError::Wire(e) => e.kind(),
            ShareError::HandlerPanicked { .. } => ErrorKind::Handler,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_kind() {
        let config = ConfigError::Missing { name: "group.id" };
        assert_eq!(ShareError::from(config).kind(), ErrorKind::Config);
        let wire = WireError::Timeout {
            what: "ShareFetch".to_string(),
        };
        assert_eq!(wire.kind(), ErrorKind::Network);
        assert_eq!(ShareError::from(wire).kind(), ErrorKind::Network);
        let group = GroupError::Closed;
        let expected = group.kind();
        assert_eq!(ShareError::from(group).kind(), expected);
        let locks = GuardConfigError {
            setting: "margin",
            rule: "must be positive",
        };
        assert_eq!(ShareError::from(locks).kind(), ErrorKind::Config);
        let panicked = ShareError::HandlerPanicked {
            message: "boom".to_string(),
        };
        assert_eq!(panicked.kind(), ErrorKind::Handler);
    }
}
