//! Per-agent todo lists over gRPC (docs/rules.md, Todo lists).

use cairn_api as pb;
use cairn_api::TodoStatus::{Completed, InProgress, Pending};
use tonic::Code;

use cairn_testkit::{TestServer, assert_status, bad_field, todo};

fn write(agent: &str, todos: Vec<pb::TodoItem>) -> pb::WriteTodosRequest {
    pb::WriteTodosRequest {
        agent_id: agent.into(),
        todos,
        expected_revision: None,
    }
}

fn summary(list: &pb::TodoList) -> Vec<(String, pb::TodoStatus)> {
    list.todos
        .iter()
        .map(|t| (t.id.clone(), t.status()))
        .collect()
}

#[tokio::test]
async fn the_merge_rules() {
    let server = TestServer::start().await;
    let mut todos = server.todos().await;
    let empty = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "a1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert!(empty.todos.is_empty());
    assert_eq!(empty.revision, 0);

    let first = todos
        .write_todos(write(
            "a1",
            vec![
                todo("t1", InProgress),
                todo("t2", Pending),
                todo("t3", Pending),
            ],
        ))
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(first.todos.len(), 3);
    assert_eq!(first.todos[0].priority(), pb::Priority::Medium);
    let created = first.todos[0].create_time;
    assert!(created.is_some());

    // Omitted items are kept, completed, before the written ones.
    let second = todos
        .write_todos(write(
            "a1",
            vec![todo("t3", InProgress), todo("t4", Pending)],
        ))
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(
        summary(&second),
        vec![
            ("t1".into(), Completed),
            ("t2".into(), Completed),
            ("t3".into(), InProgress),
            ("t4".into(), Pending),
        ]
    );
    assert_eq!(second.todos[2].create_time, first.todos[2].create_time);
    assert_ne!(second.todos[2].update_time, first.todos[2].update_time);

    // Unchanged items keep update_time.
    let third = todos
        .write_todos(write(
            "a1",
            vec![todo("t3", InProgress), todo("t4", Pending)],
        ))
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(third.todos[3].update_time, second.todos[3].update_time);
    assert_eq!(third.todos[0].create_time, created);

    // All completed: a clean start.
    let clean = todos
        .write_todos(write("a1", vec![todo("t4", Completed)]))
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(summary(&clean), vec![("t4".into(), Completed)]);

    // Lists are per agent.
    let other = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "a2".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert!(other.todos.is_empty());

    // An empty write clears.
    let cleared = todos
        .write_todos(write("a1", vec![]))
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert!(cleared.todos.is_empty());
    assert!(cleared.revision > clean.revision);
    let read = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "a1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(read, cleared);
}

#[tokio::test]
async fn bad_items_are_rejected_with_field_errors() {
    let server = TestServer::start().await;
    let mut todos = server.todos().await;
    todos
        .write_todos(write("a1", vec![todo("keep", Pending)]))
        .await
        .unwrap();

    let err = todos
        .write_todos(write(
            "a1",
            vec![todo("x", InProgress), todo("y", InProgress)],
        ))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "At most one todo can be in_progress at a time",
        "MULTIPLE_IN_PROGRESS",
    );
    let err = todos
        .write_todos(write("a1", vec![todo("", Pending)]))
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "todos[0].id: must not be empty",
        "INVALID_FIELD",
    );
    let err = todos
        .write_todos(write("a1", vec![todo("x", Pending), todo("x", Pending)]))
        .await
        .unwrap_err();
    assert_eq!(bad_field(&err), "todos[1].id");
    let mut no_content = todo("x", Pending);
    no_content.content = String::new();
    let err = todos
        .write_todos(write("a1", vec![no_content]))
        .await
        .unwrap_err();
    assert_eq!(bad_field(&err), "todos[0].content");
    let mut unknown = todo("x", Pending);
    unknown.status = 17;
    let err = todos
        .write_todos(write("a1", vec![unknown]))
        .await
        .unwrap_err();
    assert_eq!(bad_field(&err), "todos[0].status");
    let too_many: Vec<pb::TodoItem> = (0..501).map(|i| todo(&format!("t{i}"), Pending)).collect();
    let err = todos.write_todos(write("a1", too_many)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);

    // Nothing was lost by the failed writes.
    let list = todos
        .read_todos(pb::ReadTodosRequest {
            agent_id: "a1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .list
        .unwrap();
    assert_eq!(summary(&list), vec![("keep".into(), Pending)]);
}

#[tokio::test]
async fn expected_revision_on_todos() {
    let server = TestServer::start().await;
    let mut todos = server.todos().await;
    let mut req = write("a1", vec![todo("t1", Pending)]);
    req.expected_revision = Some(0);
    let rev = todos
        .write_todos(req.clone())
        .await
        .unwrap()
        .into_inner()
        .revision;
    let err = todos.write_todos(req).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let mut next = write("a1", vec![todo("t1", Completed)]);
    next.expected_revision = Some(rev);
    todos.write_todos(next).await.unwrap();
}
