//! Gemini's fast-path reader: a `generateContent` body read shallowly
//! ([`crate::shallow`]), with the units and identities [`super::codec`]'s
//! decoder gives it.
//!
//! Each content is one unit, its identity its own text's; whether a turn
//! of function responses is a tool message depends on the content before
//! it, which the fast path tells ([`crate::api::ApiSpec::answers_by_position`]).
//! The pinned unit is the system instruction's `parts`; the model is the
//! path's, so the read leaves it empty.

use super::codec::{SYSTEM_FIELDS, estimate_fields};
use crate::api::codec::RawRequest;
use crate::shallow::{self, Spec};

/// What the fast path reads of a `generateContent` body: the fields the
/// estimate reads, the system instruction and the contents as text.
const SHALLOW: Spec = Spec {
    parsed: &["tools", "generationConfig"],
    raw: &SYSTEM_FIELDS,
    items: "contents",
    held_upstream: &[],
    item_members: false,
};

/// Reads a `generateContent` body shallowly, for the fast path (`None`:
/// the decoder judges it).
pub fn shallow(bytes: &[u8]) -> Option<RawRequest<'_>> {
    let fields = shallow::read(bytes, &SHALLOW)?;
    let pinned = match fields.raw.as_slice() {
        [] => None,
        [(name, text)] => pinned_parts(name, text)?,
        // Both spellings: the decoder reads one and keeps the other.
        _ => return None,
    };
    Some(RawRequest {
        model: String::new(),
        rest: estimate_fields(&fields.parsed, None),
        pinned: pinned.into_iter().collect(),
        units: (0..fields.items.len()).map(|i| i..i + 1).collect(),
        items: fields.items,
        opaque: None,
    })
}

/// The pinned field of a system instruction given as JSON text: its
/// `parts`, which the decoder pins (`Some(None)`: no text, no pin). Its
/// other members are checked as the full parser reads them. `None`: a
/// shape the decoder judges (not an object, `parts` twice).
fn pinned_parts<'a>(
    name: &'static str,
    text: &'a [u8],
) -> Option<Option<(&'static str, &'a [u8])>> {
    if text == b"null" {
        return Some(None);
    }
    let mut parts = None;
    for (key, value) in shallow::members(text)? {
        if key == "parts" {
            if parts.replace(value).is_some() {
                return None;
            }
        } else if !shallow::checked(value) {
            return None;
        }
    }
    // Parts without text make no message (as the decoder reads them).
    let parts = parts.filter(|p| !matches!(*p, b"null" | b"\"\"" | b"[]"));
    Some(parts.map(|p| (name, p)))
}
