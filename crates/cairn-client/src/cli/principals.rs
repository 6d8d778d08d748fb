//! `cairn principal …`: who may call, with which rights; tokens shown once.

// Each subcommand reads best as one match over its variants.
#![allow(clippy::too_many_lines)]

use std::fmt::Write as _;

use cairn_api as pb;
use serde_json::{Value, json};

use super::args::{ClientArgs, Output, PrincipalCmd};
use super::io::{CliResult, emit_json, emit_plain};
use crate::view;

fn principal_json(p: &pb::Principal) -> Value {
    json!({
        "principal_id": p.principal_id,
        "roles": p.roles().map(view::role_name).collect::<Vec<_>>(),
        "agent_ids": p.agent_ids,
        "session_roots": p.session_roots,
        "create_time": view::timestamp_json(p.create_time.as_ref()),
        "revision": p.revision,
    })
}

fn principal_line(p: &pb::Principal) -> String {
    let roles: Vec<&str> = p.roles().map(view::role_name).collect();
    let mut line = format!("{}  {}", p.principal_id, roles.join(","));
    if !p.agent_ids.is_empty() {
        let _ = write!(line, "  agents {}", p.agent_ids.join(","));
    }
    if p.session_roots.is_empty() {
        line.push_str("  roots (all)");
    } else {
        let _ = write!(line, "  roots {}", p.session_roots.join(","));
    }
    line.push('\n');
    line
}

/// `cairn principal …`
pub async fn principal(client: &ClientArgs, cmd: PrincipalCmd) -> CliResult {
    let mut auth = pb::auth_service_client::AuthServiceClient::new(client.server.connect().await?);
    match cmd {
        PrincipalCmd::Create {
            id,
            roles,
            agents,
            roots,
        } => {
            let roles = roles
                .iter()
                .map(|r| view::parse_role("--role", r).map(i32::from))
                .collect::<Result<Vec<_>, _>>()?;
            let r = auth
                .create_principal(pb::CreatePrincipalRequest {
                    principal: Some(pb::Principal {
                        principal_id: id,
                        roles,
                        agent_ids: agents,
                        session_roots: roots,
                        ..pb::Principal::default()
                    }),
                })
                .await?
                .into_inner();
            let p = r.principal.unwrap_or_default();
            match client.output {
                Output::Json => {
                    emit_json(&json!({ "principal": principal_json(&p), "token": r.token }));
                }
                Output::Text => emit_plain(&format!(
                    "created {}\ntoken (shown once): {}\n",
                    p.principal_id, r.token
                )),
            }
        }
        PrincipalCmd::List => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = auth
                    .list_principals(pb::ListPrincipalsRequest {
                        page_size: 1000,
                        page_token,
                    })
                    .await?
                    .into_inner();
                all.extend(page.principals);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match client.output {
                Output::Json => emit_json(&Value::Array(all.iter().map(principal_json).collect())),
                Output::Text => {
                    let text: String = all.iter().map(principal_line).collect();
                    emit_plain(if text.is_empty() {
                        "(no principals)\n"
                    } else {
                        &text
                    });
                }
            }
        }
        PrincipalCmd::Delete { id } => {
            let r = auth
                .delete_principal(pb::DeletePrincipalRequest {
                    principal_id: id.clone(),
                    expected_revision: None,
                })
                .await?
                .into_inner();
            match client.output {
                Output::Json => emit_json(&json!({ "deleted": id, "revision": r.revision })),
                Output::Text => emit_plain(&format!("deleted {id}\n")),
            }
        }
        PrincipalCmd::Rotate { id } => {
            let r = auth
                .rotate_token(pb::RotateTokenRequest {
                    principal_id: id.clone(),
                })
                .await?
                .into_inner();
            match client.output {
                Output::Json => emit_json(&json!({ "principal_id": id, "token": r.token })),
                Output::Text => {
                    emit_plain(&format!("new token of {id} (shown once): {}\n", r.token));
                }
            }
        }
        PrincipalCmd::Whoami => {
            let p = auth
                .who_am_i(pb::WhoAmIRequest {})
                .await?
                .into_inner()
                .principal
                .unwrap_or_default();
            match client.output {
                Output::Json => emit_json(&principal_json(&p)),
                Output::Text => emit_plain(&principal_line(&p)),
            }
        }
    }
    Ok(())
}
