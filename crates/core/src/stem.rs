//! The Porter stemmer (M.F. Porter, 1980), the rule SQLite's FTS5 `porter`
//! tokenizer applies: the scanning backends (Redis, memory) and the query
//! shaping stem words with it, so `listens`, `listening` and `listened`
//! all match `listen` on every backend. Words shorter than 3 bytes or
//! longer than 64, and words with non-ASCII letters, are left as they are.

/// Longest word stemmed (FTS5's limit).
const MAX: usize = 64;

/// The stem of a lowercase `word`.
pub fn stem(word: &str) -> String {
    if word.len() < 3 || word.len() > MAX || !word.is_ascii() {
        return word.to_string();
    }
    let mut w = word.as_bytes().to_vec();
    step1ab(&mut w);
    step1c(&mut w);
    replace_first(&mut w, STEP2, 0);
    replace_first(&mut w, STEP3, 0);
    step4(&mut w);
    step5(&mut w);
    String::from_utf8(w).unwrap_or_else(|_| word.to_string())
}

/// Whether `w[i]` is a consonant: not a vowel, and `y` after a vowel or
/// first.
fn cons(w: &[u8], i: usize) -> bool {
    match w[i] {
        b'a' | b'e' | b'i' | b'o' | b'u' => false,
        b'y' => i == 0 || !cons(w, i - 1),
        _ => true,
    }
}

/// The measure `m` of `w[..len]`: its vowel-consonant sequences.
fn measure(w: &[u8], len: usize) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < len && cons(w, i) {
        i += 1;
    }
    loop {
        while i < len && !cons(w, i) {
            i += 1;
        }
        if i >= len {
            return n;
        }
        while i < len && cons(w, i) {
            i += 1;
        }
        n += 1;
    }
}

fn has_vowel(w: &[u8], len: usize) -> bool {
    (0..len).any(|i| !cons(w, i))
}

/// Whether `w[..len]` ends in a double consonant.
fn double(w: &[u8], len: usize) -> bool {
    len >= 2 && w[len - 1] == w[len - 2] && cons(w, len - 1)
}

/// Whether `w[..len]` ends consonant-vowel-consonant, the last not w, x, y.
fn cvc(w: &[u8], len: usize) -> bool {
    len >= 3
        && cons(w, len - 1)
        && !cons(w, len - 2)
        && cons(w, len - 3)
        && !matches!(w[len - 1], b'w' | b'x' | b'y')
}

fn step1ab(w: &mut Vec<u8>) {
    if w.ends_with(b"sses") || w.ends_with(b"ies") {
        w.truncate(w.len() - 2);
    } else if w.ends_with(b"s") && !w.ends_with(b"ss") {
        w.pop();
    }
    let len = w.len();
    if w.ends_with(b"eed") {
        if measure(w, len - 3) > 0 {
            w.pop();
        }
        return;
    }
    let cut = if w.ends_with(b"ed") && has_vowel(w, len - 2) {
        2
    } else if w.ends_with(b"ing") && has_vowel(w, len - 3) {
        3
    } else {
        return;
    };
    w.truncate(len - cut);
    let len = w.len();
    if w.ends_with(b"at") || w.ends_with(b"bl") || w.ends_with(b"iz") {
        w.push(b'e');
    } else if double(w, len) && !matches!(w[len - 1], b'l' | b's' | b'z') {
        w.pop();
    } else if measure(w, len) == 1 && cvc(w, len) {
        w.push(b'e');
    }
}

fn step1c(w: &mut [u8]) {
    let len = w.len();
    if w.ends_with(b"y") && has_vowel(w, len - 1) {
        w[len - 1] = b'i';
    }
}

const STEP2: &[(&str, &str)] = &[
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
];

const STEP3: &[(&str, &str)] = &[
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
];

/// Replaces the first suffix of `rules` that `w` ends with, when the stem
/// before it measures more than `min`.
fn replace_first(w: &mut Vec<u8>, rules: &[(&str, &str)], min: usize) {
    let Some((suffix, with)) = rules.iter().find(|(s, _)| w.ends_with(s.as_bytes())) else {
        return;
    };
    let stem = w.len() - suffix.len();
    if measure(w, stem) > min {
        w.truncate(stem);
        w.extend_from_slice(with.as_bytes());
    }
}

const STEP4: &[&str] = &[
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize",
];

fn step4(w: &mut Vec<u8>) {
    let Some(suffix) = STEP4.iter().find(|s| w.ends_with(s.as_bytes())) else {
        return;
    };
    let stem = w.len() - suffix.len();
    if *suffix == "ion" && !(stem > 0 && matches!(w[stem - 1], b's' | b't')) {
        return;
    }
    if measure(w, stem) > 1 {
        w.truncate(stem);
    }
}

fn step5(w: &mut Vec<u8>) {
    let len = w.len();
    if w.ends_with(b"e") {
        let m = measure(w, len - 1);
        if m > 1 || (m == 1 && !cvc(w, len - 1)) {
            w.pop();
        }
    }
    let len = w.len();
    if w.ends_with(b"l") && double(w, len) && measure(w, len) > 1 {
        w.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::stem;

    #[test]
    fn porters_own_examples() {
        for (word, want) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("hopping", "hop"),
            ("filing", "file"),
            ("happy", "happi"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("hopefulness", "hope"),
            ("electricity", "electr"),
            ("adjustment", "adjust"),
            ("adoption", "adopt"),
            ("controlling", "control"),
            ("generalization", "gener"),
            ("listens", "listen"),
            ("listening", "listen"),
            ("moved", "move"),
            ("moving", "move"),
            ("port", "port"),
            ("as", "as"),
            ("café", "café"),
        ] {
            assert_eq!(stem(word), want, "{word}");
        }
    }
}
