//! Config errors: every problem found, each with the key an operator should
//! look at and the reason it is wrong.

use std::fmt;

/// One problem in a config: where (`key`) and what (`reason`).
///
/// Keys name things by name where possible, e.g. `port "p0".mac`,
/// `router "red".interface "red0".vlan`, `router "red".route[2].via`,
/// `router "red".routes_file "table.txt" line 17`, and fall back to a
/// 0-based index when the name itself is missing, invalid or duplicated
/// (`port[3].name`). TOML syntax errors use the key `config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The path of the offending key.
    pub key: String,
    /// Why it is wrong, and where it helps, what to write instead.
    pub reason: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One error, one line: a multi-line reason would break the
        // one-per-line listing of `ConfigErrors`.
        write!(f, "{}: ", self.key.replace('\n', " "))?;
        for (i, part) in self.reason.lines().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(part.trim())?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a config, in roughly document order. Never empty
/// when returned by the parser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// A single error.
    pub fn one(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self(vec![ConfigError::new(key, reason)])
    }

    /// Appends an error.
    pub fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.0.push(ConfigError::new(key, reason));
    }

    /// True if no error was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The errors, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// One error per line, `key: reason`, no trailing newline.
impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
