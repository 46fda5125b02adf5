//! The message vocabulary every room shares: identities, roles, the pinned
//! head and tool-call pairing, defined once for tokens, fold, chat and the
//! conversation key. A leaf: it imports nothing of foldgate's.

use serde_json::Value;
use twox_hash::XxHash3_128;

/// The function tool through which a model recalls archived messages
/// (foldgate's own: it answers the calls and hides them from the client).
pub const RECALL_TOOL: &str = "foldgate_recall";

/// The member a codec sets on an engine message whose wire items hold a
/// type the codec does not read (an unknown item, part or block), or an
/// opaque history item (a provider's compaction): its value names the
/// type. Such a message is never summarized from placeholders: the fold
/// keeps it verbatim ([`is_opaque`]). Chat messages are their own wire
/// items and never carry it; their unknown part types say it instead.
pub const OPAQUE: &str = "foldgate_opaque";

/// Content part types some codec reads (their text, or what they stand
/// for: an image, a file): chat completions', Responses', Anthropic's,
/// and those the Gemini codec maps its parts to.
pub const KNOWN_PARTS: [&str; 13] = [
    "text",
    "image_url",
    "input_audio",
    "file",
    "refusal",
    "input_text",
    "output_text",
    "input_image",
    "input_file",
    "image",
    "document",
    "tool_result",
    "search_result",
];

/// Whether a message stands for something foldgate does not understand:
/// a codec marked it [`OPAQUE`], or its content has a part of a type no
/// codec reads. The fold never summarizes it: it stays in the view, in
/// the pinned head, as a pin, or by a cut that stops before it
/// (docs/folding.md, "What foldgate does not understand").
pub fn is_opaque(message: &Value) -> bool {
    message.get(OPAQUE).is_some()
        || message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|parts| parts.iter().any(|p| !known_part(p)))
}

/// Whether a content part is of a type some codec reads (a bare string
/// is text).
fn known_part(part: &Value) -> bool {
    match part {
        Value::String(_) => true,
        Value::Object(fields) => fields
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| KNOWN_PARTS.contains(&t)),
        _ => false,
    }
}

/// A message's role, as far as folding cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `system` or `developer`: pinned when leading.
    Pinned,
    /// `user`.
    User,
    /// `assistant`.
    Assistant,
    /// `tool` (a tool call's result).
    Tool,
    /// Any other role.
    Other,
}

impl Role {
    /// The role named `name`.
    pub fn of(name: &str) -> Self {
        match name {
            "system" | "developer" => Self::Pinned,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => Self::Other,
        }
    }

    /// The role of a message; `None` when its `role` is not a string.
    pub fn of_message(message: &Value) -> Option<Self> {
        role(message).map(Self::of)
    }
}

/// One message's identity: the XXH3-128 of its JSON text.
pub type MessageId = u128;

/// The identity of a message: the hash of its `serde_json` encoding
/// (with `preserve_order`, the client's key order), however the client
/// spaced or escaped it. [`unit_id`] of the message alone.
pub fn message_id(message: &Value) -> MessageId {
    unit_id(std::slice::from_ref(message))
}

/// The identity of the wire items one engine message stands for: their
/// `serde_json` encodings, separated, hashed. One item's is its
/// [`message_id`].
pub fn unit_id<'a>(items: impl IntoIterator<Item = &'a Value>) -> MessageId {
    let mut h = HashWriter(XxHash3_128::new());
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            h.0.write(b"\x1e");
        }
        // Writing a `Value` into a hasher cannot fail (its map keys are
        // strings, the writer takes everything).
        let _ = serde_json::to_writer(&mut h, item);
    }
    h.0.finish_128()
}

/// Feeds what is written to an XXH3 hasher.
struct HashWriter(XxHash3_128);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`message_id`] of every message.
pub fn ids_of(messages: &[Value]) -> Vec<MessageId> {
    messages.iter().map(message_id).collect()
}

/// A message's `role`, if it is a string.
pub fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// Whether `message` has the given role.
pub fn is_role(message: &Value, role: Role) -> bool {
    Role::of_message(message) == Some(role)
}

/// Length of the pinned head: the leading `system`/`developer` messages.
pub fn pinned_len(messages: &[Value]) -> usize {
    pinned_count(messages.iter().map(Role::of_message))
}

/// Each message's role, as the fold engine reads it ([`Role::Other`] for
/// a message whose `role` is not a string).
pub fn roles_of(messages: &[Value]) -> Vec<Role> {
    messages
        .iter()
        .map(|m| Role::of_message(m).unwrap_or(Role::Other))
        .collect()
}

/// Length of the pinned head of a sequence of roles.
pub fn pinned_count(roles: impl IntoIterator<Item = Option<Role>>) -> usize {
    roles
        .into_iter()
        .take_while(|r| *r == Some(Role::Pinned))
        .count()
}

/// The ids of an assistant message's `tool_calls`.
pub fn tool_call_ids(message: &Value) -> Option<impl Iterator<Item = &str>> {
    let calls = message.get("tool_calls")?.as_array()?;
    Some(
        calls
            .iter()
            .filter_map(|c| c.get("id").and_then(Value::as_str)),
    )
}

/// Whether a message makes tool calls (a non-empty `tool_calls`).
pub fn makes_calls(message: &Value) -> bool {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty())
}

/// The `tool_call_id` a tool message answers.
pub fn tool_call_id(message: &Value) -> Option<&str> {
    message.get("tool_call_id").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_and_the_pinned_head() {
        let ms = [
            json!({"role": "system", "content": "a"}),
            json!({"role": "developer", "content": "b"}),
            json!({"role": "user", "content": "c"}),
            json!({"role": "system", "content": "late"}),
        ];
        assert_eq!(pinned_len(&ms), 2);
        assert_eq!(pinned_len(&ms[2..]), 0);
        assert!(is_role(&ms[2], Role::User));
        assert_eq!(Role::of_message(&json!({"role": 1})), None);
        assert_eq!(Role::of("critic"), Role::Other);
        assert_eq!(
            pinned_count([Some(Role::Pinned), None, Some(Role::Pinned)]),
            1
        );
    }

    #[test]
    fn opaque_messages() {
        let known = json!({"role": "user", "content": [{"type": "input_text", "text": "a"}, "b"]});
        assert!(!is_opaque(&known));
        assert!(!is_opaque(&json!({"role": "user", "content": "plain"})));
        let part = json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "hologram"}]});
        assert!(is_opaque(&part));
        assert!(is_opaque(
            &json!({"role": "user", "content": [{"text": "no type"}]})
        ));
        assert!(is_opaque(
            &json!({"role": "developer", "content": "", OPAQUE: "compaction"})
        ));
    }

    #[test]
    fn tool_pairing_fields() {
        let call = json!({"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}, {}]});
        let ids: Vec<&str> = tool_call_ids(&call).into_iter().flatten().collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(tool_call_ids(&json!({"role": "assistant"})).is_none());
        assert_eq!(
            tool_call_id(&json!({"role": "tool", "tool_call_id": "a"})),
            Some("a")
        );
    }
}

/// A passage of an archived message, for a model that recalls it (the
/// archive finds it, each API's recall shapes it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Excerpt {
    /// The message's position in the conversation (its turn).
    pub position: usize,
    /// Its role.
    pub role: String,
    /// The passage around the first match, `…` where cut.
    pub text: String,
}
