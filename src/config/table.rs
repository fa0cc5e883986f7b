//! The macro that turns the settings table (the rows in `settings.rs`) into code.
//!
//! Why a `macro_rules!` table: each setting used to be spelled about six times (documentation row,
//! builder field, typed setter, `.properties` arm, default, `to_properties` entry) and its default
//! twice, kept equal only by a test. Here a setting is one row, and everything else is generated
//! from it, so adding a setting is adding a row, and the documented default *is* the default.
//!
//! A row reads
//!
//! ```text
//! field: Type {
//!     name: "kafka.property.name",
//!     default: <default>,
//!     rule: path::to::rule,
//!     set: |arg: ArgType| conversion,
//!     doc: "what it does and why the default is what it is",
//! }
//! ```
//!
//! - `Type` is how the value is held; it implements [`SettingValue`](super::values::SettingValue),
//!   which reads it from `.properties` text and writes it back.
//! - `<default>` is one of: a string literal, the value as a `.properties` file would write it
//!   (parsed by the same code as a user's value, so it cannot disagree with the table); `required`
//!   (no default: [`ConfigError::Missing`](super::ConfigError::Missing) when unset); `none` (the
//!   setting is optional and held as `Option<Type>`); or
//!   `{ "(formula)" => expression }`, a default derived from settings of earlier rows (the
//!   expression may name their fields), documented by the formula.
//! - `rule` is `fn(&'static str, Type) -> Result<Type, ConfigError>`: the setting's own range
//!   check, applied to typed, parsed and default values alike (rules between settings live in
//!   [`super::cross`]).
//! - `set` is the typed builder method, named after the field.
//!
//! Generated: [`SETTINGS`](super::SETTINGS) (the documentation table, in row order), the
//! `ConsumerConfig` and `ConsumerConfigBuilder` structs, every typed setter, the builder's
//! by-name `apply` (the `.properties` arms), `is_set`, `resolve` (each value or its default,
//! checked by its rule, in row order) and `ConsumerConfig::all_properties` (the
//! `to_properties` entries).

/// The documented default of a row, as [`SettingDoc::default`](super::SettingDoc::default) shows
/// it.
macro_rules! default_text {
    (required) => {
        "(required)"
    };
    (none) => {
        "(none)"
    };
    ({ $text:literal => $derive:expr }) => {
        $text
    };
    ($text:literal) => {
        $text
    };
}

/// The type a validated configuration holds for a row: optional settings stay optional.
macro_rules! config_field {
    (none, $ty:ty) => {
        Option<$ty>
    };
    ($default:tt, $ty:ty) => {
        $ty
    };
}

/// Resolves one row: the value given (typed or parsed) or the default, then the row's rule.
macro_rules! resolve_setting {
    (required, $name:literal, $ty:ty, $rule:path, $value:expr) => {
        $rule(
            $name,
            $value.ok_or($crate::config::ConfigError::Missing { name: $name })?,
        )?
    };
    (none, $name:literal, $ty:ty, $rule:path, $value:expr) => {
        match $value {
            Some(value) => Some($rule($name, value)?),
            None => None,
        }
    };
    ({ $text:literal => $derive:expr }, $name:literal, $ty:ty, $rule:path, $value:expr) => {
        match $value {
            Some(value) => $rule($name, value)?,
            None => $derive,
        }
    };
    ($text:literal, $name:literal, $ty:ty, $rule:path, $value:expr) => {
        $rule(
            $name,
            match $value {
                Some(value) => value,
                None => <$ty as $crate::config::values::SettingValue>::parse($name, $text)?,
            },
        )?
    };
}

/// Appends one row's `to_properties` entry; an unset optional setting has none.
macro_rules! push_setting {
    (none, $out:ident, $name:literal, $value:expr) => {
        if let Some(value) = $value {
            $out.push(($name, $crate::config::values::SettingValue::text(value)));
        }
    };
    ($default:tt, $out:ident, $name:literal, $value:expr) => {
        $out.push(($name, $crate::config::values::SettingValue::text($value)))
    };
}

/// Generates everything a setting needs from its row; see the module documentation.
macro_rules! settings {
    (
        $(#[$table_meta:meta])*
        pub const SETTINGS;
        $(#[$config_meta:meta])*
        pub struct ConsumerConfig;
        $(#[$builder_meta:meta])*
        pub struct ConsumerConfigBuilder;
        $(
            $field:ident: $ty:ty {
                name: $name:literal,
                default: $default:tt,
                rule: $rule:path,
                set: |$arg:ident: $argty:ty| $conv:expr,
                doc: $doc:literal $(,)?
            }
        )*
    ) => {
        $(#[$table_meta])*
        pub const SETTINGS: &[SettingDoc] = &[
            $(
                SettingDoc {
                    name: $name,
                    default: default_text!($default),
                    description: $doc,
                },
            )*
        ];

        $(#[$config_meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct ConsumerConfig {
            $(
                #[doc = concat!("`", $name, "`.")]
                pub(super) $field: config_field!($default, $ty),
            )*
        }

        $(#[$builder_meta])*
        #[derive(Debug, Clone, Default)]
        pub struct ConsumerConfigBuilder {
            $(
                #[doc = concat!("`", $name, "`, when given.")]
                pub(super) $field: Option<$ty>,
            )*
            /// The first error met by `set`, reported by `build`.
            pub(super) error: Option<ConfigError>,
        }

        impl ConsumerConfigBuilder {
            $(
                #[doc = concat!("`", $name, "`: ", $doc)]
                pub fn $field(mut self, $arg: $argty) -> Self {
                    self.$field = Some($conv);
                    self
                }
            )*

            /// Sets a setting by its property name from its text form; the `.properties` arm of
            /// every row.
            pub(super) fn apply(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
                match name {
                    $(
                        $name => {
                            self.$field = Some(
                                <$ty as $crate::config::values::SettingValue>::parse(
                                    $name, value,
                                )?,
                            )
                        }
                    )*
                    other => return Err(unknown_setting(other)),
                }
                Ok(())
            }

            /// Whether the setting was given explicitly (typed or by name).
            pub(super) fn is_set(&self, name: &str) -> bool {
                match name {
                    $($name => self.$field.is_some(),)*
                    _ => false,
                }
            }

            /// Every setting's value or default, checked by its own rule, in table order; the
            /// first refusal is returned. Rules between settings are not checked here.
            pub(super) fn resolve(self) -> Result<ConsumerConfig, ConfigError> {
                $(
                    let $field = resolve_setting!($default, $name, $ty, $rule, self.$field);
                )*
                Ok(ConsumerConfig { $($field,)* })
            }
        }

        impl ConsumerConfig {
            /// Every setting with its value, in table order (optional settings only when set).
            pub(super) fn all_properties(&self) -> Vec<(&'static str, String)> {
                let mut out = Vec::with_capacity(SETTINGS.len());
                $(
                    push_setting!($default, out, $name, &self.$field);
                )*
                out
            }
        }
    };
}
