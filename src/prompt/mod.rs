//! Builds the backend request from a chat's history: the rules in system, the records as messages.

use crate::llm::{Message, MessageRole, Request};
use crate::store::{Record, Role};

/// The default rules, given to the model as its system prompt.
pub const RULES: &str = include_str!("../../assets/rules.md");

/// The request for a reply whose history is `history` (oldest first, ending on the question).
/// Consecutive records of one role (a question whose reply failed, then another) are joined, so
/// the conversation alternates as every provider expects; tool records are not sent yet.
pub fn build_request(history: &[Record], model: &str, max_tokens: u32) -> Request {
    let mut messages: Vec<Message> = Vec::with_capacity(history.len());
    for record in history {
        let role = match record.role {
            Role::User => MessageRole::User,
            Role::Assistant => MessageRole::Assistant,
            Role::Tool => continue,
        };
        if record.text.trim().is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => {
                last.content.push_str("\n\n");
                last.content.push_str(&record.text);
            }
            _ => messages.push(Message {
                role,
                content: record.text.clone(),
            }),
        }
    }
    Request {
        system: RULES.trim().to_string(),
        messages,
        tools: Vec::new(),
        model: model.to_string(),
        max_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChatId, RecordId};

    fn rec(role: Role, text: &str) -> Record {
        Record {
            id: RecordId(0),
            chat: ChatId(1),
            seq: 0,
            role,
            text: text.into(),
            reply: None,
            created_at: 0,
        }
    }

    #[test]
    fn unanswered_questions_are_joined_so_roles_alternate() {
        let history = [
            rec(Role::User, "first"),
            rec(Role::Assistant, "answer"),
            rec(Role::User, "lost question"),
            rec(Role::User, "again"),
        ];
        let req = build_request(&history, "m", 100);
        let roles: Vec<_> = req.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [MessageRole::User, MessageRole::Assistant, MessageRole::User]
        );
        assert_eq!(req.messages[2].content, "lost question\n\nagain");
        assert!(req.system.contains("Jarvis"));
    }
}
