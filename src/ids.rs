//! Identifier newtypes, so that a step id is never confused with a run id or a prompt ref.

use std::fmt;

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a string as this identifier; checking its shape is the caller's job.
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// The id of a step inside a workflow (`implement`, `validate`, `STOP`).
    StepId
);
string_id!(
    /// The id of a workflow document (`workflow_id`).
    WorkflowId
);
string_id!(
    /// The id of one run: `YYYYMMDDTHHMMSSZ-xxxxxx`, sorting by start time.
    RunId
);
string_id!(
    /// A prompt reference `family.name.vN`.
    PromptRef
);

impl StepId {
    /// The reserved terminal target.
    pub const STOP: &'static str = "STOP";

    /// True for the reserved `STOP` target.
    pub fn is_stop(&self) -> bool {
        self.0 == Self::STOP
    }
}
