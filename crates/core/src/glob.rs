//! Model-name globs: `*` matches any run of characters, `?` any one.

/// Whether `name` matches `pattern` (case-sensitive, whole string).
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Position of the last `*` and the name index it was tried at, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Orders patterns by specificity: fewer wildcards first, then longer.
/// The smallest key is the most specific pattern.
pub fn specificity(pattern: &str) -> (usize, std::cmp::Reverse<usize>) {
    let wildcards = pattern.bytes().filter(|&c| c == b'*' || c == b'?').count();
    (wildcards, std::cmp::Reverse(pattern.len()))
}

/// The most specific of `patterns` that matches `name`.
pub fn most_specific<'a, I>(patterns: I, name: &str) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    patterns
        .into_iter()
        .filter(|p| matches(p, name))
        .min_by_key(|p| specificity(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(matches("*", ""));
        assert!(matches("gpt-4o*", "gpt-4o-mini"));
        assert!(matches("*/claude-*", "anthropic/claude-3.5-sonnet"));
        assert!(matches("gpt-?o", "gpt-4o"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("gpt-4o*", "gpt-4"));
        assert!(!matches("a*b", "aXbY"));
    }

    #[test]
    fn most_specific_wins() {
        let pats = ["*", "gpt-4o*", "gpt-4o-mini", "gpt-*"];
        assert_eq!(most_specific(pats, "gpt-4o-mini"), Some("gpt-4o-mini"));
        assert_eq!(most_specific(pats, "gpt-4o-2024"), Some("gpt-4o*"));
        assert_eq!(most_specific(pats, "llama"), Some("*"));
        assert_eq!(most_specific(["gpt*"], "llama"), None);
    }
}
