//! A value of a document paired with the position it was written at, so a diagnostic about
//! the value can point at it.

use super::yaml::Pos;

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct At<T> {
    /// The value.
    pub value: T,
    /// Its position in the workflow file.
    pub pos: Pos,
}

impl<T> At<T> {
    /// Pairs a value with its position.
    pub fn new(value: T, pos: Pos) -> Self {
        Self { value, pos }
    }
}
