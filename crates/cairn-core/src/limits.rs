//! Size and count limits, and the shape of ids.

use crate::error::{Error, Result};

/// Size and count limits. Every input is checked against them before any
/// rule runs, so oversized input is refused with a clear error instead of
/// growing the database without bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Items of a checklist, steps of an implementation plan, and entries of
    /// each list inside a plan (files, risks, dependencies...).
    pub max_plan_steps: usize,
    /// Items of one agent's todo list, after merging.
    pub max_todos: usize,
    /// Bytes of any one text field.
    pub max_text_bytes: usize,
    /// Characters of any id (session, agent, todo).
    pub max_id_len: usize,
    /// Labels on one session.
    pub max_labels: usize,
    /// Sessions on the path from a root to any session: bounds the work
    /// (ancestry in every event, cycle checks) each tree operation does.
    pub max_tree_depth: usize,
    /// Bytes of one stored plan: the checklist with the plan-mode state
    /// (pending and active plans, modifications). Every change rewrites
    /// and logs the whole record, so this bounds each write's cost.
    pub max_plan_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_plan_steps: 200,
            max_todos: 500,
            max_text_bytes: 8 * 1024,
            max_id_len: 128,
            max_labels: 64,
            max_tree_depth: 64,
            max_plan_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// Refuses text longer than `max_text_bytes`.
    pub fn check_text(&self, field: impl FnOnce() -> String, text: &str) -> Result<()> {
        if text.len() > self.max_text_bytes {
            return Err(Error::LimitExceeded {
                field: field(),
                what: "text size in bytes",
                limit: self.max_text_bytes,
                actual: text.len(),
            });
        }
        Ok(())
    }

    /// Refuses text that is empty (after trimming) or too long.
    pub fn check_required_text(&self, field: impl Fn() -> String, text: &str) -> Result<()> {
        if text.trim().is_empty() {
            return Err(Error::invalid(field(), "must not be empty"));
        }
        self.check_text(field, text)
    }

    /// Refuses a list longer than `max`.
    pub fn check_count(field: &str, what: &'static str, max: usize, actual: usize) -> Result<()> {
        if actual > max {
            return Err(Error::LimitExceeded {
                field: field.to_owned(),
                what,
                limit: max,
                actual,
            });
        }
        Ok(())
    }

    /// Checks a resource id (session or agent): 1..=`max_id_len` characters
    /// of `[A-Za-z0-9._:-]`, so ids are safe in URLs, file names and logs.
    pub fn check_resource_id(&self, field: &str, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if id.len() > self.max_id_len {
            return Err(Error::LimitExceeded {
                field: field.to_owned(),
                what: "id length",
                limit: self.max_id_len,
                actual: id.len(),
            });
        }
        if let Some(bad) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
        {
            return Err(Error::invalid(
                field,
                format!("invalid character {bad:?}: ids use only [A-Za-z0-9._:-]"),
            ));
        }
        // URL paths normalise these two away (`/sessions/../approve`).
        if id == "." || id == ".." {
            return Err(Error::invalid(field, "`.` and `..` are not ids"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_ids() {
        let l = Limits::default();
        assert!(l.check_resource_id("id", "orch-1:sub_2.a").is_ok());
        assert!(matches!(
            l.check_resource_id("id", ""),
            Err(Error::InvalidField { .. })
        ));
        assert!(matches!(
            l.check_resource_id("id", "a b"),
            Err(Error::InvalidField { .. })
        ));
        assert!(matches!(
            l.check_resource_id("id", &"x".repeat(129)),
            Err(Error::LimitExceeded { .. })
        ));
        assert!(l.check_resource_id("id", &"x".repeat(128)).is_ok());
        assert!(l.check_resource_id("id", ".").is_err());
        assert!(l.check_resource_id("id", "..").is_err());
        assert!(l.check_resource_id("id", "...").is_ok());
    }
}
