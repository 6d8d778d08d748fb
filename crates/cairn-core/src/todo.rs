//! Per-agent todo lists (docs/rules.md, Todo lists: `todo_write`).
//!
//! A write replaces the whole list, but unfinished work is never lost by
//! omission: stored items the write leaves out are kept, marked completed,
//! ahead of the written ones. Only a write whose items are all completed
//! starts clean. The server owns both timestamps.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, excerpt};
use crate::limits::Limits;
use crate::time::Micros;

/// Status of a todo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// Priority of a todo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    High,
    #[default]
    Medium,
    Low,
}

/// One stored todo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    pub id: String,
    pub content: String,
    pub status: TodoStatus,
    pub priority: Priority,
    /// When this id was first written.
    pub create_time: Micros,
    /// When content, status or priority last changed.
    pub update_time: Micros,
}

/// One todo as a client writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TodoInput {
    pub id: String,
    pub content: String,
    /// `None` when the client sent no (or an unknown) status.
    pub status: Option<TodoStatus>,
    /// `None` means the default, medium.
    pub priority: Option<Priority>,
}

/// Checks every written item; the first bad one is named by its index.
pub fn validate(items: &[TodoInput], limits: &Limits) -> Result<()> {
    Limits::check_count("todos", "number of todos", limits.max_todos, items.len())?;
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        if item.id.is_empty() {
            return Err(Error::invalid(
                format!("todos[{i}].id"),
                "must not be empty",
            ));
        }
        if item.id.chars().count() > limits.max_id_len {
            return Err(Error::LimitExceeded {
                field: format!("todos[{i}].id"),
                what: "id length",
                limit: limits.max_id_len,
                actual: item.id.chars().count(),
            });
        }
        if item.id.chars().any(char::is_control) {
            return Err(Error::invalid(
                format!("todos[{i}].id"),
                "must not contain control characters",
            ));
        }
        if !seen.insert(item.id.as_str()) {
            return Err(Error::invalid(
                format!("todos[{i}].id"),
                format!("duplicate id {:?}", excerpt(&item.id)),
            ));
        }
        limits.check_required_text(|| format!("todos[{i}].content"), &item.content)?;
        if item.status.is_none() {
            return Err(Error::invalid(
                format!("todos[{i}].status"),
                "must be pending, in_progress or completed",
            ));
        }
    }
    if items
        .iter()
        .filter(|i| i.status == Some(TodoStatus::InProgress))
        .count()
        > 1
    {
        return Err(Error::MultipleTodosInProgress);
    }
    Ok(())
}

/// Validates a write and merges it into the stored list (see the module
/// doc). The merged list must still fit `max_todos`.
pub fn write(
    prev: &[TodoItem],
    items: Vec<TodoInput>,
    now: Micros,
    limits: &Limits,
) -> Result<Vec<TodoItem>> {
    validate(&items, limits)?;
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let clean_start = items
        .iter()
        .all(|i| i.status == Some(TodoStatus::Completed));
    let written_ids: HashSet<&str> = items.iter().map(|i| i.id.as_str()).collect();
    let old: HashMap<&str, &TodoItem> = prev.iter().map(|i| (i.id.as_str(), i)).collect();

    let mut merged = Vec::with_capacity(prev.len() + items.len());
    if !clean_start {
        merged.extend(
            prev.iter()
                .filter(|i| !written_ids.contains(i.id.as_str()))
                .map(|i| {
                    let mut kept = i.clone();
                    if kept.status != TodoStatus::Completed {
                        kept.status = TodoStatus::Completed;
                        kept.update_time = now;
                    }
                    kept
                }),
        );
    }
    for input in items {
        let status = input.status.unwrap_or_default();
        let priority = input.priority.unwrap_or_default();
        let item = match old.get(input.id.as_str()) {
            Some(o) => {
                let changed =
                    o.content != input.content || o.status != status || o.priority != priority;
                TodoItem {
                    create_time: o.create_time,
                    update_time: if changed { now } else { o.update_time },
                    id: input.id,
                    content: input.content,
                    status,
                    priority,
                }
            }
            None => TodoItem {
                id: input.id,
                content: input.content,
                status,
                priority,
                create_time: now,
                update_time: now,
            },
        };
        merged.push(item);
    }
    Limits::check_count(
        "todos",
        "number of todos after merging",
        limits.max_todos,
        merged.len(),
    )?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TodoStatus::{Completed, InProgress, Pending};
    use proptest::prelude::*;

    fn input(id: &str, status: TodoStatus) -> TodoInput {
        TodoInput {
            id: id.into(),
            content: format!("do {id}"),
            status: Some(status),
            priority: None,
        }
    }

    fn ids(list: &[TodoItem]) -> Vec<(&str, TodoStatus)> {
        list.iter().map(|i| (i.id.as_str(), i.status)).collect()
    }

    #[test]
    fn omitted_items_are_kept_as_completed_before_the_written_ones() {
        let l = Limits::default();
        let first = write(
            &[],
            vec![input("a", InProgress), input("b", Pending)],
            10,
            &l,
        )
        .unwrap();
        let second = write(&first, vec![input("c", InProgress)], 20, &l).unwrap();
        assert_eq!(
            ids(&second),
            vec![("a", Completed), ("b", Completed), ("c", InProgress)]
        );
        assert_eq!(second[0].create_time, 10);
        assert_eq!(second[0].update_time, 20);
    }

    #[test]
    fn all_completed_is_a_clean_start() {
        let l = Limits::default();
        let first = write(&[], vec![input("a", Pending), input("b", Pending)], 10, &l).unwrap();
        let second = write(&first, vec![input("b", Completed)], 20, &l).unwrap();
        assert_eq!(ids(&second), vec![("b", Completed)]);
    }

    #[test]
    fn empty_write_clears() {
        let l = Limits::default();
        let first = write(&[], vec![input("a", Pending)], 10, &l).unwrap();
        assert_eq!(write(&first, vec![], 20, &l).unwrap(), vec![]);
    }

    #[test]
    fn timestamps_are_the_servers() {
        let l = Limits::default();
        let first = write(&[], vec![input("a", Pending), input("b", Pending)], 10, &l).unwrap();
        let second = write(
            &first,
            vec![input("a", Pending), input("b", InProgress)],
            20,
            &l,
        )
        .unwrap();
        assert_eq!((second[0].create_time, second[0].update_time), (10, 10));
        assert_eq!((second[1].create_time, second[1].update_time), (10, 20));
        let mut reprioritised = input("a", Pending);
        reprioritised.priority = Some(Priority::High);
        let third = write(&second, vec![reprioritised, input("b", InProgress)], 30, &l).unwrap();
        assert_eq!((third[0].create_time, third[0].update_time), (10, 30));
        assert_eq!(third[1].update_time, 20);
    }

    #[test]
    fn bad_items_are_rejected_never_dropped() {
        let l = Limits::default();
        let err = |items: Vec<TodoInput>| write(&[], items, 1, &l).unwrap_err().to_string();
        assert_eq!(
            err(vec![input("a", InProgress), input("b", InProgress)]),
            "At most one todo can be in_progress at a time"
        );
        assert_eq!(
            err(vec![input("", Pending)]),
            "todos[0].id: must not be empty"
        );
        assert_eq!(
            err(vec![input("a", Pending), input("a", Pending)]),
            "todos[1].id: duplicate id \"a\""
        );
        let mut empty = input("a", Pending);
        empty.content.clear();
        assert_eq!(err(vec![empty]), "todos[0].content: must not be empty");
        let mut unknown = input("a", Pending);
        unknown.status = None;
        assert_eq!(
            err(vec![unknown]),
            "todos[0].status: must be pending, in_progress or completed"
        );
    }

    #[test]
    fn the_merged_list_must_fit_the_limit() {
        let l = Limits {
            max_todos: 2,
            ..Limits::default()
        };
        let first = write(&[], vec![input("a", Pending), input("b", Pending)], 1, &l).unwrap();
        assert!(matches!(
            write(&first, vec![input("c", Pending)], 2, &l),
            Err(Error::LimitExceeded { .. })
        ));
    }

    fn arb_write() -> impl Strategy<Value = Vec<TodoInput>> {
        prop::collection::vec(
            (
                "[a-e]",
                prop_oneof![Just(Pending), Just(InProgress), Just(Completed)],
            ),
            0..6,
        )
        .prop_map(|v| {
            let mut seen = HashSet::new();
            v.into_iter()
                .filter(|(id, _)| seen.insert(id.clone()))
                .map(|(id, s)| input(&id, s))
                .collect()
        })
    }

    proptest! {
        /// No stored list ever has two items in progress; an unfinished item
        /// is never lost unless the write was a clean start or a clear; ids
        /// stay unique; create times never change for a known id.
        #[test]
        fn merges_never_lose_unfinished_work(writes in prop::collection::vec(arb_write(), 1..12)) {
            let l = Limits::default();
            let mut list: Vec<TodoItem> = Vec::new();
            for (t, w) in writes.into_iter().enumerate() {
                let now = i64::try_from(t).unwrap() * 10;
                let clean = w.iter().all(|i| i.status == Some(Completed));
                let Ok(next) = write(&list, w.clone(), now, &l) else { continue };
                prop_assert!(next.iter().filter(|i| i.status == InProgress).count() <= 1);
                let mut seen = HashSet::new();
                prop_assert!(next.iter().all(|i| seen.insert(i.id.clone())));
                if !clean {
                    for old in &list {
                        let kept = next.iter().find(|n| n.id == old.id);
                        prop_assert!(kept.is_some(), "lost {}", old.id);
                        prop_assert_eq!(kept.unwrap().create_time, old.create_time);
                    }
                }
                for item in &w {
                    prop_assert!(next.iter().any(|n| n.id == item.id && Some(n.status) == item.status));
                }
                list = next;
            }
        }
    }
}
