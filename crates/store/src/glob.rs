//! Redis-style glob matching (`*`, `?`, `[abc]`, `[^a-z]`, `\x`) for KEYS, SCAN MATCH and HSCAN MATCH.
//!
//! Pure byte matching: it knows nothing of keyspaces. Patterns and subjects are binary-safe.
//! The matcher is iterative with single-star backtracking, so a hostile pattern such as
//! `*a*a*a*a*b` costs O(pattern × subject) at worst, never exponential time. Redis' recursive
//! matcher gives up (no match) past [`MAX_STAR_NESTING`] nested stars; this one answers the same.

/// Redis' `stringmatchlen` recurses once per `*` group it passes and answers "no match" beyond
/// this depth (its "protection against abusive patterns").
pub const MAX_STAR_NESTING: usize = 1000;

/// True when `subject` matches `pattern`, with Redis' `stringmatchlen` rules (case-sensitive).
pub fn glob_match(pattern: &[u8], subject: &[u8]) -> bool {
    // Every match passes each `*` group that has pattern after it (a trailing one matches the
    // rest without recursing), so past the limit Redis never matches. A pattern needs at least
    // two bytes per such group to have that many.
    if pattern.len() > 2 * MAX_STAR_NESTING && inner_star_groups(pattern) > MAX_STAR_NESTING {
        return false;
    }
    let (mut p, mut s) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern index after the star, subject index it consumed to).
    let mut backtrack: Option<(usize, usize)> = None;
    while s < subject.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    backtrack = Some((p, s));
                    continue;
                }
                b'?' => {
                    p += 1;
                    s += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = match_class(pattern, p, subject[s]) {
                        if matched {
                            p = next;
                            s += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == subject[s] {
                        p += 2;
                        s += 1;
                        continue;
                    }
                }
                c => {
                    if c == subject[s] {
                        p += 1;
                        s += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last star swallow one more byte, or fail.
        match backtrack {
            Some((bp, bs)) => {
                p = bp;
                s = bs + 1;
                backtrack = Some((bp, bs + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// How many runs of unescaped `*` outside a `[...]` class have pattern after them.
fn inner_star_groups(pattern: &[u8]) -> usize {
    let (mut groups, mut i) = (0, 0);
    while i < pattern.len() {
        match pattern[i] {
            b'*' => {
                while i < pattern.len() && pattern[i] == b'*' {
                    i += 1;
                }
                if i < pattern.len() {
                    groups += 1;
                }
                continue;
            }
            b'\\' => i += 2,
            b'[' => {
                i += 1;
                while i < pattern.len() && pattern[i] != b']' {
                    i += if pattern[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    groups
}

/// Match `c` against the class starting at `pattern[start] == b'['`.
/// Returns (matched, index after the class). An unterminated class runs to the end of the pattern,
/// as in Redis.
fn match_class(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < pattern.len() && pattern[i] == b'^';
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            if pattern[i + 1] == c {
                matched = true;
            }
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' {
            let (mut lo, mut hi) = (pattern[i], pattern[i + 2]);
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            if c >= lo && c <= hi {
                matched = true;
            }
            i += 3;
        } else {
            if pattern[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    // Skip the closing bracket if present.
    let next = if i < pattern.len() { i + 1 } else { i };
    Some((matched != negate, next))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn basics() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(!glob_match(b"h?llo", b"hllo"));
        assert!(glob_match(b"h*llo", b"heeeello"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[ae]llo", b"hillo"));
        assert!(glob_match(b"h[^e]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-b]llo", b"hbllo"));
        assert!(glob_match(b"h[b-a]llo", b"hallo"));
        assert!(glob_match(b"a\\*b", b"a*b"));
        assert!(!glob_match(b"a\\*b", b"axb"));
        assert!(glob_match(b"user:*:name", b"user:42:name"));
        assert!(!glob_match(b"user:*:name", b"user:42:age"));
        assert!(glob_match(b"*a*b", b"xxaxxb"));
        assert!(!glob_match(b"abc", b"abcd"));
        assert!(glob_match(b"abc*", b"abc"));
    }

    /// Redis' keyspace.tcl "Regression for pattern matching very long nested loops": KEYS with
    /// `*?` repeated 50000 times finds nothing, not even a key it would match.
    #[test]
    fn star_nesting_beyond_redis_limit_matches_nothing() {
        let subject = vec![b'a'; 50_000];
        assert!(!glob_match(&b"*?".repeat(50_000), &subject));
        // Up to the limit the pattern still matches; a trailing star does not count, nor do
        // escaped stars or stars inside a class.
        assert!(glob_match(&b"*?".repeat(1000), &subject));
        let mut trailing = b"?*".repeat(1000);
        trailing.extend_from_slice(b"?*");
        assert!(glob_match(&trailing, &subject));
        assert!(!glob_match(&trailing, &subject[..1000]));
        let escaped = b"\\*a".repeat(1500);
        assert!(glob_match(&escaped, &b"*a".repeat(1500)));
        let class = b"[*]a".repeat(1500);
        assert!(glob_match(&class, &b"*a".repeat(1500)));
    }

    #[test]
    fn hostile_pattern_is_fast() {
        let subject = vec![b'a'; 10_000];
        let pattern = b"*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!glob_match(pattern, &subject));
    }
}
