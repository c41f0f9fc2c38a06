//! Glob matching with the semantics of Redis's `stringmatchlen` (SCAN MATCH, CONFIG GET).
//!
//! `*` matches any run of bytes, `?` any one byte, `[...]` one byte from a set (`^` first
//! negates, `a-z` ranges, reversed ranges are swapped, `\` escapes inside), `\x` matches `x`
//! literally. As in Redis, an unterminated `[` takes the rest of the pattern as its set, `[]` is
//! an empty set, and a trailing `\` matches a backslash.
//!
//! Unlike Redis's recursive matcher, this one is iterative with a single backtrack point (the
//! last `*`), so it runs in O(pattern x subject) time whatever the pattern.

/// Redis's matcher recurses once per `*` and gives up (no match) past this depth.
const STAR_NESTING_MAX: usize = 1000;

/// Whether `subject` matches `pattern` (case-sensitive, byte-wise).
pub fn glob_match(pattern: &[u8], subject: &[u8]) -> bool {
    if too_many_stars(pattern) {
        return false;
    }
    let (mut p, mut s) = (0usize, 0usize);
    // After a `*`: the pattern position following it and the subject position it resumes at.
    let mut star: Option<(usize, usize)> = None;
    while s < subject.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, s));
            continue;
        }
        if p < pattern.len() {
            let (matched, next) = match_single(pattern, p, subject[s]);
            if matched {
                p = next;
                s += 1;
                continue;
            }
        }
        match star {
            Some((star_p, star_s)) => {
                // Let the last `*` swallow one more byte and retry.
                star = Some((star_p, star_s + 1));
                p = star_p;
                s = star_s + 1;
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

/// Whether the pattern has more than [`STAR_NESTING_MAX`] runs of `*` before its last element:
/// Redis then never matches (a match must pass every run with bytes left, one recursion each),
/// and neither does this matcher, so that KEYS, SCAN and CONFIG GET answer alike.
fn too_many_stars(pattern: &[u8]) -> bool {
    let mut runs = 0;
    let mut p = 0;
    while p < pattern.len() {
        if pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            runs += 1;
            if runs > STAR_NESTING_MAX && p < pattern.len() {
                return true;
            }
        } else {
            p = match_single(pattern, p, 0).1;
        }
    }
    false
}

/// Matches the single-byte pattern element at `p` (anything but `*`) against `c`. Returns
/// whether it matched and where the next element starts.
fn match_single(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c, p + 2),
        b'[' => match_class(pattern, p + 1, c),
        literal => (literal == c, p + 1),
    }
}

/// Matches a `[...]` set whose body starts at `p`. Returns whether `c` matched and the position
/// after the closing `]` (or the end of the pattern when there is none).
fn match_class(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    loop {
        match pattern.get(p) {
            None => break,
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                if pattern[p + 1] == c {
                    matched = true;
                }
                p += 2;
            }
            Some(&start) if p + 2 < pattern.len() && pattern[p + 1] == b'-' => {
                let end = pattern[p + 2];
                let (low, high) = if start <= end {
                    (start, end)
                } else {
                    (end, start)
                };
                if (low..=high).contains(&c) {
                    matched = true;
                }
                p += 3;
            }
            Some(&b) => {
                if b == c {
                    matched = true;
                }
                p += 1;
            }
        }
    }
    (matched != negate, p)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn table() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("", "", true),
            ("", "a", false),
            ("a", "a", true),
            ("a", "b", false),
            ("a*", "abc", true),
            ("a*", "ba", false),
            ("*c", "abc", true),
            ("a*c", "ac", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbbd", false),
            ("a**c", "abc", true),
            ("*a*b*c*", "xxaxxbxxcxx", true),
            ("*a*b*c*", "xxaxxcxxbxx", false),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("key:[0-9]*", "key:1abc", true),
            ("key:[0-9]*", "key:xabc", false),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("h[\\]]llo", "h]llo", true),
            ("h[\\-]llo", "h-llo", true),
            ("a\\", "a\\", true),
            ("[]a", "a", false),
            ("[^]a", "xa", true),
            ("[abc", "b", true),
            ("[abc", "d", false),
            ("[a-", "-", true),
            ("??", "ab", true),
            ("??", "abc", false),
            ("*?", "", false),
            ("*x", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxy", false),
        ];
        for (pattern, subject, want) in cases {
            assert_eq!(
                glob_match(pattern.as_bytes(), subject.as_bytes()),
                *want,
                "pattern {pattern:?} subject {subject:?}"
            );
        }
    }

    #[test]
    fn too_many_star_runs_never_match_as_in_redis() {
        let subject = "a".repeat(50_000);
        assert!(!glob_match(
            "*?".repeat(50_000).as_bytes(),
            subject.as_bytes()
        ));
        // 1000 runs before the last element still match; 1001 do not.
        let near = "*a".repeat(1000);
        assert!(glob_match(near.as_bytes(), subject.as_bytes()));
        let over = "*a".repeat(1001);
        assert!(!glob_match(over.as_bytes(), subject.as_bytes()));
        // A final run costs no recursion, and escaped or bracketed stars are no runs.
        assert!(glob_match((near + "*").as_bytes(), subject.as_bytes()));
        let escaped = "\\*a".repeat(1001);
        assert!(glob_match(escaped.as_bytes(), "*a".repeat(1001).as_bytes()));
        let bracketed = "[*]a".repeat(1001);
        assert!(glob_match(
            bracketed.as_bytes(),
            "*a".repeat(1001).as_bytes()
        ));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let pattern = "*a".repeat(50) + "b";
        let subject = "a".repeat(5000);
        assert!(!glob_match(pattern.as_bytes(), subject.as_bytes()));
    }
}
