//! AWS event-stream framing (`application/vnd.amazon.eventstream`), as
//! Bedrock's `InvokeModelWithResponseStream` answers: binary frames, each
//!
//! ```text
//! total length (u32 BE) | headers length (u32 BE) | CRC32 of the 8 bytes before
//! headers: name length (u8), name, value type (u8), value …
//! payload
//! CRC32 of everything before (u32 BE)
//! ```
//!
//! An answer's frame has `:message-type` `event`, `:event-type` `chunk`,
//! `:content-type` `application/json` and the payload
//! `{"bytes": "<base64 of one Anthropic stream event>"}`; an error in the
//! stream is a frame with `:message-type` `exception`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

/// The `Content-Type` of an event-stream answer.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// Bytes before the headers: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// Bytes after the payload: the message CRC.
const TRAILER: usize = 4;
/// Largest frame accepted (Bedrock's chunks are a few KiB).
pub const MAX_FRAME: usize = 16 << 20;

/// Header value type of a string (the only type Bedrock's frames carry).
const STRING: u8 = 7;

/// One frame: its headers (string values; others are skipped) and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `(name, value)` of each string-valued header, in order.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub payload: Bytes,
}

impl Frame {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The Anthropic stream event an answer's `chunk` frame carries
    /// (`None`: another frame, or a payload that is not one).
    pub fn event(&self) -> Option<Value> {
        if self.header(":message-type") != Some("event") {
            return None;
        }
        let payload: Value = serde_json::from_slice(&self.payload).ok()?;
        let bytes = STANDARD.decode(payload.get("bytes")?.as_str()?).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The prelude's CRC does not match its lengths.
    #[error("event-stream prelude CRC mismatch")]
    PreludeCrc,
    /// The message CRC does not match the frame.
    #[error("event-stream message CRC mismatch")]
    MessageCrc,
    /// The lengths do not fit together, or the frame is too large.
    #[error("event-stream frame length {0} is not valid")]
    Length(usize),
    /// A header runs past the headers' length or has an unknown type.
    #[error("event-stream headers are malformed")]
    Headers,
}

/// One frame of `headers` (string values) and `payload`.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Bytes {
    let mut head = BytesMut::new();
    for (name, value) in headers {
        head.put_u8(name.len() as u8);
        head.put_slice(name.as_bytes());
        head.put_u8(STRING);
        head.put_u16(value.len() as u16);
        head.put_slice(value.as_bytes());
    }
    let total = PRELUDE + head.len() + payload.len() + TRAILER;
    let mut out = BytesMut::with_capacity(total);
    out.put_u32(total as u32);
    out.put_u32(head.len() as u32);
    out.put_u32(crc32fast::hash(&out[..8]));
    out.put_slice(&head);
    out.put_slice(payload);
    out.put_u32(crc32fast::hash(&out));
    out.freeze()
}

/// The `chunk` frame carrying one Anthropic stream event.
pub fn chunk(event: &Value) -> Bytes {
    let payload = json!({"bytes": STANDARD.encode(event.to_string())});
    frame(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// The `exception` frame that ends a stream foldgate cannot finish.
pub fn exception(kind: &str, message: &str) -> Bytes {
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": message}).to_string().as_bytes(),
    )
}

/// The frame at the start of `bytes` and its length; `Ok(None)`: the
/// frame is not whole yet.
pub fn read(bytes: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    if bytes.len() < PRELUDE {
        return Ok(None);
    }
    let total = be32(&bytes[0..4]);
    let headers_len = be32(&bytes[4..8]);
    if be32(&bytes[8..12]) as u32 != crc32fast::hash(&bytes[..8]) {
        return Err(FrameError::PreludeCrc);
    }
    if total > MAX_FRAME || total < PRELUDE + TRAILER + headers_len {
        return Err(FrameError::Length(total));
    }
    if bytes.len() < total {
        return Ok(None);
    }
    let body_end = total - TRAILER;
    if be32(&bytes[body_end..total]) as u32 != crc32fast::hash(&bytes[..body_end]) {
        return Err(FrameError::MessageCrc);
    }
    let headers = headers(&bytes[PRELUDE..PRELUDE + headers_len])?;
    let payload = Bytes::copy_from_slice(&bytes[PRELUDE + headers_len..body_end]);
    Ok(Some((Frame { headers, payload }, total)))
}

/// Every frame of a whole stream, in order; `Err` at the first bad one
/// (bytes after the last whole frame are an error too).
pub fn frames(mut bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        match read(bytes)? {
            Some((frame, len)) => {
                out.push(frame);
                bytes = &bytes[len..];
            }
            None => return Err(FrameError::Length(bytes.len())),
        }
    }
    Ok(out)
}

/// The Anthropic events of a whole stream's frames, up to the first frame
/// that cannot be read.
pub fn events(mut bytes: &[u8]) -> impl Iterator<Item = Value> + '_ {
    std::iter::from_fn(move || {
        loop {
            let (frame, len) = read(bytes).ok()??;
            bytes = &bytes[len..];
            if let Some(event) = frame.event() {
                return Some(event);
            }
        }
    })
}

/// The string-valued headers of a frame's header block.
fn headers(mut block: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    let mut out = Vec::new();
    while !block.is_empty() {
        let name_len = usize::from(block[0]);
        let name = block.get(1..1 + name_len).ok_or(FrameError::Headers)?;
        let kind = *block.get(1 + name_len).ok_or(FrameError::Headers)?;
        let rest = &block[2 + name_len..];
        let value_len = match kind {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                2 + usize::from(u16::from_be_bytes(
                    rest.get(..2)
                        .and_then(|b| b.try_into().ok())
                        .ok_or(FrameError::Headers)?,
                ))
            }
            _ => return Err(FrameError::Headers),
        };
        let value = rest.get(..value_len).ok_or(FrameError::Headers)?;
        if kind == STRING {
            out.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(&value[2..]).into_owned(),
            ));
        }
        block = &rest[value_len..];
    }
    Ok(out)
}

/// A big-endian `u32` as a length.
fn be32(bytes: &[u8]) -> usize {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_reads_back_as_its_event() {
        let event = json!({"type": "message_start", "message": {"usage": {"input_tokens": 12}}});
        let bytes = chunk(&event);
        let (frame, len) = read(&bytes).unwrap().unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(frame.header(":event-type"), Some("chunk"));
        assert_eq!(frame.header(":message-type"), Some("event"));
        assert_eq!(frame.event(), Some(event));
        assert_eq!(read(&bytes[..bytes.len() - 1]), Ok(None));
    }

    #[test]
    fn a_flipped_bit_fails_its_crc() {
        let bytes = chunk(&json!({"type": "ping"})).to_vec();
        let mut prelude = bytes.clone();
        prelude[3] ^= 1;
        assert_eq!(read(&prelude), Err(FrameError::PreludeCrc));
        let mut payload = bytes.clone();
        let at = payload.len() - 8;
        payload[at] ^= 1;
        assert_eq!(read(&payload), Err(FrameError::MessageCrc));
    }

    #[test]
    fn a_stream_is_its_frames_in_order() {
        let mut stream = chunk(&json!({"type": "a"})).to_vec();
        stream.extend_from_slice(&exception("throttlingException", "slow down"));
        stream.extend_from_slice(&chunk(&json!({"type": "b"})));
        let kinds: Vec<Value> = events(&stream).map(|e| e["type"].clone()).collect();
        assert_eq!(kinds, [json!("a"), json!("b")]);
        let all = frames(&stream).unwrap();
        assert_eq!(
            all[1].header(":exception-type"),
            Some("throttlingException")
        );
        assert!(frames(&stream[..stream.len() - 2]).is_err());
    }
}
