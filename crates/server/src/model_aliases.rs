//! [`Aliases`]: other names of the models of a multi-model server (`--model-alias
//! ALIAS=NAME`). A request naming an alias is served by the model it stands for, exactly as if
//! it had named the model.

use std::collections::BTreeMap;

/// Why an alias is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    #[error("--model-alias {alias}={model}: no model is named `{model}`")]
    UnknownModel { alias: String, model: String },
    #[error("--model-alias {0}: that name is already a model's name or another alias")]
    Taken(String),
    #[error("--model-alias: an alias cannot be empty")]
    Empty,
}

/// Alias to model name.
#[derive(Debug, Clone, Default)]
pub struct Aliases(BTreeMap<String, String>);

impl Aliases {
    /// The aliases `(alias, model)`, each naming one of `models` and none taking a model's
    /// name or another alias.
    pub fn new(pairs: &[(String, String)], models: &[String]) -> Result<Aliases, AliasError> {
        let mut map = BTreeMap::new();
        for (alias, model) in pairs {
            if alias.is_empty() {
                return Err(AliasError::Empty);
            }
            if !models.contains(model) {
                return Err(AliasError::UnknownModel {
                    alias: alias.clone(),
                    model: model.clone(),
                });
            }
            if models.contains(alias) || map.insert(alias.clone(), model.clone()).is_some() {
                return Err(AliasError::Taken(alias.clone()));
            }
        }
        Ok(Aliases(map))
    }

    /// The model `alias` stands for, if it is an alias.
    pub fn model_of(&self, alias: &str) -> Option<&str> {
        self.0.get(alias).map(String::as_str)
    }

    /// The aliases of `model`, in name order.
    pub fn of(&self, model: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, m)| *m == model)
            .map(|(a, _)| a.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, m)| (a.to_string(), m.to_string()))
            .collect()
    }

    #[test]
    fn aliases_resolve_and_collisions_are_refused() {
        let models = vec!["a".to_string(), "b".to_string()];
        let aliases = Aliases::new(&pairs(&[("x", "a"), ("y", "a")]), &models).unwrap();
        assert_eq!(aliases.model_of("x"), Some("a"));
        assert_eq!(aliases.model_of("a"), None);
        assert_eq!(aliases.of("a"), ["x", "y"]);
        assert!(aliases.of("b").is_empty());
        let taken = |p: &[(&str, &str)]| Aliases::new(&pairs(p), &models).unwrap_err();
        assert_eq!(taken(&[("b", "a")]), AliasError::Taken("b".into()));
        assert_eq!(
            taken(&[("x", "a"), ("x", "b")]),
            AliasError::Taken("x".into())
        );
        assert!(matches!(
            taken(&[("x", "c")]),
            AliasError::UnknownModel { .. }
        ));
        assert_eq!(taken(&[("", "a")]), AliasError::Empty);
    }
}
