//! `SendMessage` to a task: an A2A message read as a person's answer to
//! what the task awaits (`docs/a2a.md`). A task is `input-required` while
//! its plan or a modification awaits approval; the message approves or
//! rejects it, as the caller's principal, under the same rules as
//! `ApprovePlan` and `RejectPlan` (the no-self-approval rule among them).
//!
//! The answer is a data part `{"decision": "approve" | "reject",
//! "reason": "…", "modification_id": N}` or a text part that starts with
//! `approve` or `reject` (the rest, after an optional `:`, the reason).

use prost_types::value::Kind;

use cairn_api::a2a;
use cairn_core::command::{Decision, PlanCommand};
use cairn_core::error::{Error, Result};
use cairn_core::plan_mode::PlanModeState;

/// What a message answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approve: bool,
    pub reason: String,
    /// Which modification, when several await a decision.
    pub modification_id: Option<u32>,
}

const PARTS: &str = "message.parts";
const HOW: &str = "answer with a data part {\"decision\": \"approve\" or \"reject\", \"reason\": ...} or a text part starting with approve or reject";

fn decision(word: &str) -> Option<bool> {
    match word.to_ascii_lowercase().as_str() {
        "approve" | "approved" => Some(true),
        "reject" | "rejected" => Some(false),
        _ => None,
    }
}

/// The answer of one part, if it gives one.
fn of_part(part: &a2a::Part) -> Result<Option<Answer>> {
    match &part.content {
        Some(a2a::part::Content::Text(text)) => {
            let text = text.trim();
            let end = text
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(text.len());
            let Some(approve) = decision(&text[..end]) else {
                return Ok(None);
            };
            let rest = text[end..].trim_start();
            let reason = rest.strip_prefix(':').unwrap_or(rest).trim();
            Ok(Some(Answer {
                approve,
                reason: reason.to_owned(),
                modification_id: None,
            }))
        }
        Some(a2a::part::Content::Data(prost_types::Value {
            kind: Some(Kind::StructValue(data)),
        })) => {
            let Some(d) = data.fields.get("decision") else {
                return Ok(None);
            };
            let approve = match &d.kind {
                Some(Kind::StringValue(s)) => decision(s),
                _ => None,
            }
            .ok_or_else(|| {
                Error::invalid(
                    format!("{PARTS}.decision"),
                    "must be \"approve\" or \"reject\"",
                )
            })?;
            let reason = match data.fields.get("reason").and_then(|v| v.kind.as_ref()) {
                None | Some(Kind::NullValue(_)) => String::new(),
                Some(Kind::StringValue(s)) => s.clone(),
                Some(_) => {
                    return Err(Error::invalid(
                        format!("{PARTS}.reason"),
                        "must be a string",
                    ));
                }
            };
            let modification_id = match data
                .fields
                .get("modification_id")
                .and_then(|v| v.kind.as_ref())
            {
                None | Some(Kind::NullValue(_)) => None,
                Some(Kind::NumberValue(n))
                    if n.fract() == 0.0 && *n >= 1.0 && *n <= f64::from(u32::MAX) =>
                {
                    // Whole and in range, checked just above.
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    Some(*n as u32)
                }
                Some(_) => {
                    return Err(Error::invalid(
                        format!("{PARTS}.modification_id"),
                        "must be the id of a modification (a whole number from 1)",
                    ));
                }
            };
            Ok(Some(Answer {
                approve,
                reason,
                modification_id,
            }))
        }
        _ => Ok(None),
    }
}

/// The one answer a message gives.
pub fn answer(message: &a2a::Message) -> Result<Answer> {
    let mut found = None;
    for part in &message.parts {
        if let Some(a) = of_part(part)? {
            if found.is_some() {
                return Err(Error::invalid(PARTS, format!("give one answer: {HOW}")));
            }
            found = Some(a);
        }
    }
    found.ok_or_else(|| Error::invalid(PARTS, format!("no answer found: {HOW}")))
}

/// The plan command that gives `answer` to what `mode` awaits: the plan
/// pending approval, or a modification. With nothing awaiting, the plan
/// command is still the one given, so its rule answers with its own error.
pub fn command(answer: Answer, mode: &PlanModeState) -> Result<PlanCommand> {
    let modification = match answer.modification_id {
        Some(id) => Some(id),
        None if mode.pending.is_none() => match mode.modifications.as_slice() {
            [] => None,
            [one] => Some(one.id),
            several => {
                let ids: Vec<String> = several.iter().map(|m| m.id.to_string()).collect();
                return Err(Error::invalid(
                    format!("{PARTS}.modification_id"),
                    format!(
                        "modifications {} await a decision: name one",
                        ids.join(", ")
                    ),
                ));
            }
        },
        None => None,
    };
    Ok(match (modification, answer.approve) {
        (Some(modification_id), approve) => {
            if !approve && !answer.reason.is_empty() {
                // Nowhere to keep it: refused rather than dropped.
                return Err(Error::invalid(
                    format!("{PARTS}.reason"),
                    "a modification is rejected without a reason; leave it out",
                ));
            }
            PlanCommand::DecideModification {
                modification_id,
                decision: if approve {
                    Decision::Approve
                } else {
                    Decision::Reject
                },
            }
        }
        (None, true) => {
            if !answer.reason.is_empty() {
                return Err(Error::invalid(
                    format!("{PARTS}.reason"),
                    "an approval carries no reason; leave it out",
                ));
            }
            PlanCommand::Approve {
                approver: String::new(),
            }
        }
        (None, false) => PlanCommand::Reject {
            reason: answer.reason,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::plan_mode::{Modification, PendingPlan};
    use prost_types::{Struct, Value};

    fn text(t: &str) -> a2a::Part {
        a2a::Part {
            content: Some(a2a::part::Content::Text(t.into())),
            ..a2a::Part::default()
        }
    }

    fn data(fields: &[(&str, Kind)]) -> a2a::Part {
        a2a::Part {
            content: Some(a2a::part::Content::Data(Value {
                kind: Some(Kind::StructValue(Struct {
                    fields: fields
                        .iter()
                        .map(|(k, v)| {
                            (
                                (*k).to_owned(),
                                Value {
                                    kind: Some(v.clone()),
                                },
                            )
                        })
                        .collect(),
                })),
            })),
            ..a2a::Part::default()
        }
    }

    fn message(parts: Vec<a2a::Part>) -> a2a::Message {
        a2a::Message {
            parts,
            ..a2a::Message::default()
        }
    }

    fn field(e: &Error) -> String {
        match e {
            Error::InvalidField { field, .. } => field.clone(),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn text_and_data_answers() {
        let a = answer(&message(vec![text("  Reject: touches prod ")])).unwrap();
        assert_eq!((a.approve, a.reason.as_str()), (false, "touches prod"));
        let a = answer(&message(vec![text("approve")])).unwrap();
        assert!(a.approve && a.reason.is_empty());
        let a = answer(&message(vec![
            text("here is my answer"),
            data(&[
                ("decision", Kind::StringValue("approve".into())),
                ("modification_id", Kind::NumberValue(3.0)),
            ]),
        ]))
        .unwrap();
        assert_eq!(a.modification_id, Some(3));

        for (parts, want) in [
            (vec![], PARTS.to_owned()),
            (vec![text("looks good")], PARTS.to_owned()),
            (vec![text("approve"), text("reject")], PARTS.to_owned()),
            (
                vec![data(&[("decision", Kind::StringValue("maybe".into()))])],
                format!("{PARTS}.decision"),
            ),
            (
                vec![data(&[
                    ("decision", Kind::StringValue("reject".into())),
                    ("reason", Kind::NumberValue(1.0)),
                ])],
                format!("{PARTS}.reason"),
            ),
            (
                vec![data(&[
                    ("decision", Kind::StringValue("approve".into())),
                    ("modification_id", Kind::NumberValue(1.5)),
                ])],
                format!("{PARTS}.modification_id"),
            ),
        ] {
            assert_eq!(field(&answer(&message(parts)).unwrap_err()), want);
        }
    }

    #[test]
    fn the_command_for_what_awaits() {
        let no = |approve, reason: &str| Answer {
            approve,
            reason: reason.into(),
            modification_id: None,
        };
        let mut mode = PlanModeState {
            pending: Some(PendingPlan::default()),
            ..PlanModeState::default()
        };
        assert_eq!(
            command(no(false, "why"), &mode).unwrap(),
            PlanCommand::Reject {
                reason: "why".into()
            }
        );
        assert_eq!(
            field(&command(no(true, "because"), &mode).unwrap_err()),
            format!("{PARTS}.reason")
        );
        mode.pending = None;
        let modification = |id| Modification {
            id,
            ..Modification::default()
        };
        mode.modifications = vec![modification(4)];
        assert_eq!(
            command(no(true, ""), &mode).unwrap(),
            PlanCommand::DecideModification {
                modification_id: 4,
                decision: Decision::Approve
            }
        );
        assert_eq!(
            field(&command(no(false, "no"), &mode).unwrap_err()),
            format!("{PARTS}.reason")
        );
        mode.modifications.push(modification(5));
        assert_eq!(
            field(&command(no(true, ""), &mode).unwrap_err()),
            format!("{PARTS}.modification_id")
        );
        // Nothing awaits: the approval goes to the rule, which says so.
        mode.modifications.clear();
        assert!(matches!(
            command(no(true, ""), &mode).unwrap(),
            PlanCommand::Approve { .. }
        ));
    }
}
