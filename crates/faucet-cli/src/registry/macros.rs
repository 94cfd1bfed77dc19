//! [`registry!`]: declares one registry enum (sources, sinks or state stores) from its list
//! of connectors, one line each:
//!
//! ```text
//! /// `type: csv`.
//! Csv = "csv" => faucet_connectors::files::CsvSourceConfig, if "files";
//! /// `type: redis`.
//! Redis = "redis" => RedisStateConfig, needs "state-redis";
//! /// `type: memory`.
//! Memory = "memory" => MemoryStateConfig;
//! ```
//!
//! * no feature: always compiled;
//! * `if "f"`: the config type exists only with the faucet-cli feature `f` (a connector of
//!   faucet-connectors); without it the variant holds [`NotCompiled`](super::NotCompiled)
//!   (any YAML, kept as written);
//! * `needs "f"`: the config type is always compiled (the CLI's own struct, still parsed and
//!   described), only building/opening it needs `f`.
//!
//! From that list it generates:
//!
//! * the config enum (`SourceConfig`), one variant per line, with `Deserialize` through
//!   [`tagged`](super::tagged) (`{type: <name>, config: {...}}`);
//! * the kind enum (`SourceType`), the type names, with `ALL`, `name()`, `feature()`, serde's
//!   "unknown variant `x`, expected one of ..." message;
//! * `kind()`, `type_name()`, `not_compiled()` (the one "is not compiled into this binary;
//!   rebuild with --features f" error, at `<field>.type`), `about()` (the entry that
//!   describes the connector without I/O; `None` for a compiled-out `if` connector) and
//!   `compiled()` (the entry that builds or opens it, or `not_compiled()`).
//!
//! Every match is generated, so a line is all a new connector adds here; the compiler then
//! asks for its entry `impl`s (the traits named in the header).

/// See the [module documentation](self).
macro_rules! registry {
    (
        $(#[$meta:meta])*
        enum $Config:ident, kinds $Kind:ident, what $what:literal, at $field:literal,
        about dyn $About:path, compiled dyn $Compiled:path {
            $(
                $(#[$vmeta:meta])*
                $V:ident = $name:literal => $ty:ty $(, if $feature:literal)? $(, needs $needs:literal)?;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub(crate) enum $Config {
            $(
                $(#[$vmeta])*
                $(#[cfg(feature = $feature)])?
                $V($ty),
                $(
                    #[cfg(not(feature = $feature))]
                    $V($crate::registry::NotCompiled),
                )?
            )+
        }

        #[doc = concat!("The type names of [`", stringify!($Config), "`], as written after `type:`.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
        pub(crate) enum $Kind {
            $(
                #[doc = concat!("`type: ", $name, "`.")]
                #[serde(rename = $name)]
                $V,
            )+
        }

        impl $Kind {
            /// Every type, in the order the registry lists them (and messages show them).
            pub(crate) const ALL: &'static [Self] = &[$(Self::$V),+];

            /// The type name, as written in the file.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Self::$V => $name,)+
                }
            }

            /// The faucet-cli Cargo feature that compiles it in; `None`: always compiled.
            pub(crate) fn feature(self) -> Option<&'static str> {
                match self {
                    $(Self::$V => registry!(@some $($feature)? $($needs)?),)+
                }
            }
        }

        impl $crate::registry::tagged::Tagged for $Config {
            const WHAT: &'static str = $what;
            type Kind = $Kind;

            fn from_config<'de, D: serde::Deserializer<'de>>(
                kind: $Kind,
                d: D,
            ) -> Result<Self, D::Error> {
                Ok(match kind {
                    $($Kind::$V => Self::$V(serde::Deserialize::deserialize(d)?),)+
                })
            }
        }

        impl<'de> serde::Deserialize<'de> for $Config {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::registry::tagged::deserialize(d)
            }
        }

        impl $Config {
            /// Its type.
            pub(crate) fn kind(&self) -> $Kind {
                match self {
                    $(Self::$V(_) => $Kind::$V,)+
                }
            }

            /// The type name, as written in the file.
            pub(crate) fn type_name(&self) -> &'static str {
                self.kind().name()
            }

            #[doc = concat!("The error for a type whose feature is compiled out, at `", $field, ".type`.")]
            fn not_compiled(&self) -> faucet_core::FaucetError {
                $crate::registry::not_compiled(
                    concat!($field, ".type"),
                    self.type_name(),
                    self.kind().feature().unwrap_or_default(),
                )
            }

            /// The entry describing the connector (no I/O); `None` when its config type is
            /// compiled out.
            fn about(&self) -> Option<&dyn $About> {
                match self {
                    $(
                        $(#[cfg(feature = $feature)])?
                        Self::$V(c) => Some(c),
                        $(
                            #[cfg(not(feature = $feature))]
                            Self::$V(_) => None,
                        )?
                    )+
                }
            }

            /// As [`Self::about`], to change the config (resolve its paths).
            fn about_mut(&mut self) -> Option<&mut dyn $About> {
                match self {
                    $(
                        $(#[cfg(feature = $feature)])?
                        Self::$V(c) => Some(c),
                        $(
                            #[cfg(not(feature = $feature))]
                            Self::$V(_) => None,
                        )?
                    )+
                }
            }

            /// The entry that builds or opens the connector.
            ///
            /// # Errors
            /// [`Self::not_compiled`] when its feature is compiled out.
            fn compiled(&self) -> Result<&dyn $Compiled, faucet_core::FaucetError> {
                let entry: Option<&dyn $Compiled> = match self {
                    $(
                        $(#[cfg(feature = $feature)])?
                        $(#[cfg(feature = $needs)])?
                        Self::$V(c) => Some(c),
                        $(
                            #[cfg(not(feature = $feature))]
                            Self::$V(_) => None,
                        )?
                        $(
                            #[cfg(not(feature = $needs))]
                            Self::$V(_) => None,
                        )?
                    )+
                };
                entry.ok_or_else(|| self.not_compiled())
            }
        }
    };
    (@some) => { None };
    (@some $feature:literal) => { Some($feature) };
}
