//! A subscription by regular expression ([`TopicPattern`]): which topic names it selects, with
//! Java's rules, and why a pattern is refused.
//!
//! Java's `KafkaConsumer::subscribe(Pattern)` (rust-rdkafka: a topic name starting with `^`)
//! selects every topic whose *whole* name matches, and leaves Kafka's internal topics
//! (`__consumer_offsets`, `__transaction_state`, ...) out while `exclude.internal.topics` is true,
//! its default. Under the classic protocol the member matches the names itself, against the
//! cluster's metadata (`classic/watch.rs` decides what a refresh changes); under the consumer
//! group protocol (KIP-848) the broker does, with the pattern sent in the heartbeat.

use std::fmt;

use regex_lite::Regex;

/// A regular expression over topic names, checked when it is made.
///
/// The syntax is the `regex-lite` crate's, which matches Java's `java.util.regex` on the patterns
/// topic subscriptions use (literals, `.`, classes such as `[a-z0-9_-]`, `\d`, `\w`, alternation,
/// repetition, groups, `(?i)`), and always matches the whole name, as Java's `matches()` does
/// (`orders-.*` does not select `eu-orders-1`). Differences with Java: no look-around, no
/// back-references, no possessive or atomic groups, no `\Q...\E`, and no Unicode classes
/// (`\p{L}`); topic names are ASCII (letters, digits, `.`, `_`, `-`), so the last cannot select a
/// topic anyway. Under `group.protocol=consumer` the broker evaluates the pattern with RE2/J,
/// whose syntax is the same family as this one (no look-around, no back-references either).
#[derive(Clone, Debug)]
pub struct TopicPattern {
    /// As the caller wrote it: what the KIP-848 heartbeat sends and the logs show.
    source: String,
    /// `^(?:source)$`: the whole name must match.
    whole: Regex,
}

impl TopicPattern {
    /// Compiles `pattern`, refusing an empty one and one that is not a valid regular expression.
    pub fn new(pattern: &str) -> Result<TopicPattern, PatternError> {
        if pattern.trim().is_empty() {
            return Err(PatternError {
                pattern: pattern.to_string(),
                reason: "the pattern is empty".to_string(),
            });
        }
        let whole = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| PatternError {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })?;
        Ok(TopicPattern {
            source: pattern.to_string(),
            whole,
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the whole of `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        self.whole.is_match(topic)
    }

    /// Whether a topic of the cluster belongs to the subscription: its name matches and, with
    /// `exclude_internal` (Java's `exclude.internal.topics`, true by default), it is not one of
    /// Kafka's internal topics.
    pub fn selects(&self, topic: &str, internal: bool, exclude_internal: bool) -> bool {
        !(internal && exclude_internal) && self.matches(topic)
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Why a subscription pattern was refused at subscribe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it (the regular-expression parser's message).
    pub reason: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid topic pattern {:?}: {}",
            self.pattern, self.reason
        )
    }
}

/// A leaf: the pattern and the parser's message are the whole story.
impl std::error::Error for PatternError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_name_must_match_as_with_java_matches() {
        let p = TopicPattern::new("orders-.*").unwrap();
        assert!(p.matches("orders-eu"));
        assert!(p.matches("orders-"));
        assert!(
            !p.matches("eu-orders-1"),
            "a match inside the name is not enough"
        );
        assert!(!p.matches("orders"));
        // Alternation is anchored as a whole, not only its first branch.
        let p = TopicPattern::new("a|ab").unwrap();
        assert!(p.matches("ab"));
        assert!(!p.matches("abc"));
        // Anchors the caller wrote (rust-rdkafka's `^` prefix) are harmless.
        let p = TopicPattern::new("^fills\\.[0-9]+$").unwrap();
        assert!(p.matches("fills.42"));
        assert!(!p.matches("fills.x"));
    }

    #[test]
    fn internal_topics_are_left_out_unless_asked_for() {
        let p = TopicPattern::new("__.*|orders").unwrap();
        assert!(!p.selects("__consumer_offsets", true, true));
        assert!(p.selects("__consumer_offsets", true, false));
        assert!(
            p.selects("__mine", false, true),
            "only the broker's flag counts"
        );
        assert!(p.selects("orders", false, true));
    }

    #[test]
    fn invalid_and_empty_patterns_are_refused_with_the_reason() {
        let e = TopicPattern::new("orders-(").unwrap_err();
        assert_eq!(e.pattern, "orders-(");
        assert!(e
            .to_string()
            .starts_with("invalid topic pattern \"orders-(\": "));
        assert!(!e.reason.is_empty());
        // Java syntax this engine does not have is refused, not misread.
        assert!(TopicPattern::new("(?=x)orders").is_err());
        assert!(TopicPattern::new(r"(a)\1").is_err());
        let e = TopicPattern::new("  ").unwrap_err();
        assert_eq!(e.reason, "the pattern is empty");
    }

    #[test]
    fn the_source_is_kept_as_written() {
        let p = TopicPattern::new("(?i)Orders.*").unwrap();
        assert_eq!(p.as_str(), "(?i)Orders.*");
        assert_eq!(p.to_string(), "(?i)Orders.*");
        assert!(p.matches("ORDERS-1"));
    }
}
