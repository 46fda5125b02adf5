//! The room a window has left for recalled excerpts: one rule for the
//! recall tool's results and for excerpts injected before the last user
//! message, over numbers only.

/// Tokens kept free beyond the output reserve, because every count here
/// is an estimate: a twentieth of the window, at least 64 tokens.
pub fn margin(window: u32) -> u32 {
    (window / 20).max(64)
}

/// Fewest tokens of excerpts worth sending: about one matching line.
pub const SMALLEST: u32 = 24;

/// Tokens excerpts may add to a request: the window, less the request's
/// tokens so far (`used`: the view, the tools, earlier rounds' calls and
/// results), less its output reserve, less the [`margin`]; 0 when none
/// is left.
pub fn room(window: u32, used: u32, reserve: u32) -> u32 {
    window
        .saturating_sub(used)
        .saturating_sub(reserve)
        .saturating_sub(margin(window))
}

/// How much of `wanted` tokens of excerpts a request with `room` left can
/// take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// All of it.
    Whole(u32),
    /// Only this many: the excerpts are shortened.
    Shortened(u32),
    /// Not even [`SMALLEST`]: no excerpt is sent.
    NoRoom,
}

/// [`Fit`] of `wanted` tokens in `room`.
pub fn fit(wanted: u32, room: u32) -> Fit {
    if wanted <= room {
        Fit::Whole(wanted)
    } else if room >= SMALLEST {
        Fit::Shortened(room)
    } else {
        Fit::NoRoom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_what_the_window_leaves_after_the_request_reserve_and_margin() {
        assert_eq!(margin(4000), 200);
        assert_eq!(margin(128), 64);
        assert_eq!(room(4000, 2700, 300), 800);
        // The case: a 4,943-token view in a 6,000-token window.
        assert_eq!(room(6000, 4943, 1000), 0);
        assert_eq!(room(100, 500, 10), 0, "an overfull request has none");
    }

    #[test]
    fn fit_shortens_then_refuses() {
        assert_eq!(fit(2000, room(4000, 1000, 300)), Fit::Whole(2000));
        assert_eq!(fit(2000, 800), Fit::Shortened(800));
        assert_eq!(fit(2000, SMALLEST - 1), Fit::NoRoom);
        assert_eq!(fit(10, 10), Fit::Whole(10));
    }
}
