//! The backend a planner profile names, from its definition in the configuration
//! ([`crate::config::planners`] reads and checks it).

use super::{Backend, External};
use crate::config::Config;
use crate::config::planners::{DefinitionError, ExternalPlanner, PlannerDefinition};

impl Backend {
    /// The backend a planner profile names (`rules`/`default` exist without configuration).
    pub fn from_config(name: &str, config: &Config) -> Result<Self, DefinitionError> {
        Ok(match config.planner(name)? {
            PlannerDefinition::Rules => Backend::Rules,
            PlannerDefinition::External(ExternalPlanner {
                name,
                kind,
                timeout,
                attempts,
                pass_env,
            }) => Backend::External(External {
                name,
                kind,
                timeout,
                attempts,
                pass_env,
                root: config.root.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_planner_is_named() {
        let error = Backend::from_config("judge", &Config::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "planner `judge` is not defined under `planners:`"
        );
        assert_eq!(
            Backend::from_config("default", &Config::default()),
            Ok(Backend::Rules)
        );
    }
}
