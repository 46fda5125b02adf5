//! The text log's line, written as tracing-subscriber's full format
//! writes it without colour:
//!
//! `2026-11-25T11:12:51.283332Z  INFO request{request_id="…" method=POST path="/v1/embeddings"}: foldgate::access: status=200 upstream_ms=0.793 overhead_ms=0.041`
//!
//! The fixed parts are written here directly; so are the fields whose
//! text needs no escaping ([`PlainFields`]: a plain string, an integer, a
//! bool, a float of whole thousandths such as the access line's `0.044`
//! milliseconds) and `Debug` or `Display` values (their `{:?}` after the
//! name, as the default visitor writes them), while every other field is
//! formatted by the subscriber's own visitor (its quoting and its escaping
//! of control characters). The
//! subscriber's own format paints every part through an ANSI style even
//! with colour off and builds the time through layers of `Display`: about
//! a fifth of the access line's instructions.

use std::fmt;
use std::time::SystemTime;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The full format without colour (for a log that is not a terminal).
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainText;

impl<S, N> FormatEvent<S, N> for PlainText
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "{} ", timestamp(SystemTime::now()))?;
        let meta = event.metadata();
        writer.write_str(level(*meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(&fields.fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
                seen = true;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// Fields as the subscriber's default formatter writes them without
/// colour (`name="text" count=3`), with a plain string, an integer or a
/// bool written directly instead of through `Debug` and the formatting
/// machinery, and a `Debug` value's name written directly; anything else
/// goes to the subscriber's own visitor.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'w> {
    writer: Writer<'w>,
    /// No field written yet (the next needs no separating space).
    first: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Writes `name=` and `value` when the default formatter writes the
    /// field's name as it is (not `message` or `r#…`); otherwise hands the
    /// field to the default visitor. `log.*` fields are skipped, as the
    /// default visitor skips them.
    fn write(
        &mut self,
        field: &Field,
        value: impl FnOnce(&mut Writer<'_>) -> fmt::Result,
        otherwise: impl FnOnce(&mut DefaultVisitor<'_>),
    ) {
        let name = field.name();
        if name == "message" || name.starts_with("r#") {
            return self.delegate(field, otherwise);
        }
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let pad = !std::mem::take(&mut self.first);
        self.result = (|| {
            if pad {
                self.writer.write_char(' ')?;
            }
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            value(&mut self.writer)
        })();
    }

    /// The field as the default visitor writes it.
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let mut inner = DefaultVisitor::new(self.writer.by_ref(), self.first);
        record(&mut inner);
        self.result = inner.finish();
        self.first = false;
    }
}

/// Whether `text` reads the same through `Debug` once quoted: printable
/// ASCII without a quote or a backslash.
fn plain(text: &str) -> bool {
    text.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if plain(value) {
            let quoted = |w: &mut Writer<'_>| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            };
            self.write(field, quoted, |inner| inner.record_str(field, value));
        } else {
            self.delegate(field, |inner| inner.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let display = |w: &mut Writer<'_>| w.write_str(Digits::of(value).as_str());
        self.write(field, display, |inner| inner.record_u64(field, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let display = |w: &mut Writer<'_>| write!(w, "{value}");
        self.write(field, display, |inner| inner.record_i64(field, value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match thousandths(value) {
            Some(n) => {
                let display = |w: &mut Writer<'_>| write_thousandths(w, n);
                self.write(field, display, |inner| inner.record_f64(field, value));
            }
            None => self.delegate(field, |inner| inner.record_f64(field, value)),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        let display = |w: &mut Writer<'_>| w.write_str(if value { "true" } else { "false" });
        self.write(field, display, |inner| inner.record_bool(field, value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |inner| inner.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // What the default visitor writes (`name=` then `Debug`), without
        // painting the name and the `=` through its colourless styles.
        let debug = |w: &mut Writer<'_>| write!(w, "{value:?}");
        self.write(field, debug, |inner| inner.record_debug(field, value));
    }
}

/// `value` as a count of thousandths when it is one exactly (non-negative,
/// below 10^12, `n / 1000` for a whole `n`): then `Debug` writes the
/// decimal `n / 1000` itself, which [`write_thousandths`] writes without
/// the float formatting. Below 10^12 doubles lie closer together than half
/// a thousandth, so no shorter decimal names the same double.
fn thousandths(value: f64) -> Option<u64> {
    if !(value.is_sign_positive() && value < 1e12) {
        return None;
    }
    let n = (value * 1e3).round();
    let whole = n as u64; // 0 <= n < 10^15
    (whole as f64 / 1e3 == value).then_some(whole)
}

/// `n / 1000` as `Debug` writes an `f64`: `0.044`, `12.5`, `3.0`.
fn write_thousandths(w: &mut Writer<'_>, n: u64) -> fmt::Result {
    w.write_str(Digits::of(n / 1000).as_str())?;
    let frac = Digits::of(1000 + n % 1000);
    let frac = frac
        .as_str()
        .get(1..)
        .unwrap_or_default()
        .trim_end_matches('0');
    w.write_char('.')?;
    w.write_str(if frac.is_empty() { "0" } else { frac })
}

/// A number's decimal digits, written on the stack (what `write!` writes,
/// without the formatting machinery).
struct Digits {
    text: [u8; 20],
    start: usize,
}

impl Digits {
    fn of(mut n: u64) -> Self {
        let mut text = [0u8; 20];
        let mut start = text.len();
        loop {
            start -= 1;
            text[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Self { text, start };
            }
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[self.start..]).unwrap_or_default()
    }
}

/// A level as the full format pads it, five columns.
fn level(level: Level) -> &'static str {
    match level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// RFC 3339 UTC to the microsecond (`2026-11-25T11:12:51.283332Z`), as
/// tracing-subscriber's full format writes it.
fn timestamp(at: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_micros(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, UNIX_EPOCH};
    use tracing_subscriber::fmt::MakeWriter;

    #[test]
    fn timestamps_are_rfc_3339_to_the_microsecond() {
        let at = |secs: u64, micros: u32| {
            timestamp(UNIX_EPOCH + Duration::new(secs, micros * 1000)).to_string()
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(1_700_000_000, 123_456), "2023-11-14T22:13:20.123456Z");
        assert_eq!(at(1_709_208_000, 7), "2024-02-29T12:00:00.000007Z");
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000000Z");
        assert_eq!(at(4_102_444_799, 999_999), "2099-12-31T23:59:59.999999Z");
    }

    /// Lines written to a shared buffer.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8_lossy(
                &self
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
            .into_owned()
        }
    }

    /// The events every level and shape of line: in spans, nested, with
    /// quoted, escaped and displayed fields, and outside any span.
    fn emit() {
        let request =
            tracing::info_span!("request", request_id = "r-1", method = %"POST", path = "/v1/x");
        let _outer = request.enter();
        tracing::info!(target: "foldgate::access", status = 200, upstream_ms = 0.793, error = Some("upstream"), "");
        let empty = tracing::info_span!("fold");
        let _inner = empty.enter();
        tracing::warn!(model = %"gpt-4o", window = 8192, "folding \u{1b}[31m \"now\"");
        drop(_inner);
        drop(_outer);
        tracing::error!(reason = ?("a", 1), "outside any span");
        let failed = std::io::Error::other(std::io::Error::other("the cause"));
        tracing::info!(
            log.target = "skipped",
            text = "a \"quoted\" \\ é\ttab",
            plain = "/v1/chat/completions?x=1&y='2'",
            quote = "say \"hi\"",
            backslash = "C:\\dir",
            control = "bell\u{7}",
            high = "café",
            tilde = "~ and DEL \u{7f}",
            empty = "",
            yes = true,
            no = false,
            below = -42i64,
            above = u64::MAX,
            ratio = 0.1f64,
            whole = 3.0f64,
            cents = 12.5f64,
            millis = 0.044f64,
            leading = 1.007f64,
            zero = 0.0f64,
            negative = -0.044f64,
            minus_zero = -0.0f64,
            tiny = 1e-7f64,
            huge = 1e300f64,
            third = 1.0f64 / 3.0,
            nan = f64::NAN,
            r#type = "raw",
            error = &failed as &(dyn std::error::Error + 'static),
            shown = %"a \"display\"",
            "with every kind of field"
        );
        tracing::info!(log.target = "skipped", first = "after a skipped field");
        tracing::debug!("debug");
        tracing::trace!("trace");
    }

    #[test]
    fn thousandths_write_as_debug_writes_them() {
        let written = |n: u64| {
            let mut text = String::new();
            write_thousandths(&mut Writer::new(&mut text), n).unwrap();
            text
        };
        let big = (0..2_000).map(|k| 999_999_999_000_000 - k * 7_919);
        for n in (0..200_000)
            .chain([1_000_000, 123_456_789, 999_999_999_999])
            .chain(big)
        {
            let value = n as f64 / 1e3;
            assert_eq!(thousandths(value), Some(n), "{value:?}");
            assert_eq!(written(n), format!("{value:?}"), "{n}");
        }
        for n in [0, 7, 10, 99, 1_000_000_007, u64::MAX] {
            assert_eq!(Digits::of(n).as_str(), n.to_string());
        }
        for other in [
            0.0001,
            0.1234,
            1e12,
            1e-7,
            -1.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert_eq!(thousandths(other), None, "{other:?}");
        }
    }

    #[test]
    fn lines_match_the_subscribers_full_format_without_colour() {
        let ours = Lines::default();
        let theirs = Lines::default();
        let subscriber = |lines: &Lines| {
            tracing_subscriber::fmt()
                .with_max_level(Level::TRACE)
                .with_ansi(false)
                .with_writer(lines.clone())
        };
        tracing::subscriber::with_default(
            subscriber(&ours)
                .fmt_fields(PlainFields)
                .event_format(PlainText)
                .finish(),
            emit,
        );
        tracing::subscriber::with_default(subscriber(&theirs).finish(), emit);
        let (ours, theirs) = (ours.text(), theirs.text());
        assert_eq!(ours.lines().count(), 7, "{ours}");
        for (mine, reference) in ours.lines().zip(theirs.lines()) {
            // The times differ by the microseconds between the two runs.
            assert_eq!(mine.get(27..), reference.get(27..), "\n{ours}\n{theirs}");
            assert_eq!(mine.as_bytes().get(26), Some(&b'Z'), "{mine}");
        }
    }
}
