//! Builds the backend request from a chat's history: the rules and the profile in system, the
//! records as messages.

use crate::llm::{Message, MessageRole, Request};
use crate::store::{Fact, Record, Role};

/// The default rules, given to the model as its system prompt.
pub const RULES: &str = include_str!("../../assets/rules.md");

/// The system prompt: the rules, then — when there are facts — the profile block, "About {name}"
/// and one line per fact.
pub fn system_prompt(facts: &[Fact], name: &str) -> String {
    let mut system = RULES.trim().to_string();
    if !facts.is_empty() {
        let name = if name.trim().is_empty() {
            "the user"
        } else {
            name.trim()
        };
        system.push_str(&format!("\n\nAbout {name}:"));
        for fact in facts {
            system.push_str("\n- ");
            system.push_str(fact.text.trim());
        }
    }
    system
}

/// The request for a reply whose history is `history` (oldest first, ending on the question).
/// Consecutive records of one role (a question whose reply failed, then another) are joined, so
/// the conversation alternates as every provider expects; tool records are not sent yet.
pub fn build_request(history: &[Record], system: String, model: &str, max_tokens: u32) -> Request {
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
        system,
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
        let req = build_request(&history, system_prompt(&[], ""), "m", 100);
        let roles: Vec<_> = req.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [MessageRole::User, MessageRole::Assistant, MessageRole::User]
        );
        assert_eq!(req.messages[2].content, "lost question\n\nagain");
        assert!(req.system.contains("Jarvis"));
        assert!(!req.system.contains("About"), "no profile without facts");
    }

    #[test]
    fn the_profile_lists_each_fact_under_the_users_name() {
        let fact = |text: &str| Fact {
            id: 0,
            text: text.into(),
            created_at: 0,
            updated_at: 0,
        };
        let facts = [fact("My dog is called Bruno"), fact("I live in Lyon")];
        let system = system_prompt(&facts, "Ada");
        assert!(system.starts_with(RULES.trim()));
        assert!(
            system.ends_with("\n\nAbout Ada:\n- My dog is called Bruno\n- I live in Lyon"),
            "{system}"
        );
        assert!(system_prompt(&facts, " ").contains("About the user:"));
    }
}
