//! Python-compatible text primitives.
//!
//! The chunker must produce byte-identical output to a Python implementation,
//! so whitespace, `strip()`, `splitlines()` and `len()` follow CPython's
//! definitions rather than Rust's (which differ on e.g. U+001C..U+001F).

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// CPython's `str.isspace()` for one code point (bidi WS/B/S or category Zs).
#[inline]
pub fn is_py_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\x1c'..='\x20'
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// CPython's `str.strip()` with no arguments.
#[inline]
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// CPython's `len()` of a str: the number of code points.
#[inline]
pub fn char_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// True when a code point ends a line for CPython's `str.splitlines()`.
#[inline]
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\x0b'
            | '\x0c'
            | '\x1c'
            | '\x1d'
            | '\x1e'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// CPython's `str.splitlines()` (without keepends), lazily.
pub fn py_splitlines(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        if r.is_empty() {
            rest = None;
            return None;
        }
        match r.char_indices().find(|&(_, c)| is_line_break(c)) {
            Some((i, c)) => {
                let mut next = i + c.len_utf8();
                if c == '\r' && r.as_bytes().get(next) == Some(&b'\n') {
                    next += 1;
                }
                rest = Some(&r[next..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Removes every `<!-- ... -->` comment, leftmost first and non-greedy,
/// like `re.sub(r"<!--.*?-->", "", s, flags=re.DOTALL)`.
pub fn strip_html_comments(s: &str) -> std::borrow::Cow<'_, str> {
    // Built once: building a searcher costs more than most searches here.
    static OPEN: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("<!--"));
    static CLOSE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("-->"));
    let (open_finder, close_finder) = (&*OPEN, &*CLOSE);
    let Some(first) = open_finder.find(s.as_bytes()) else {
        return std::borrow::Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len());
    let mut pos = 0;
    let mut open = Some(first);
    while let Some(o) = open {
        let Some(close_rel) = close_finder.find(&s.as_bytes()[o + 4..]) else {
            break;
        };
        out.push_str(&s[pos..o]);
        pos = o + 4 + close_rel + 3;
        open = open_finder.find(&s.as_bytes()[pos..]).map(|i| i + pos);
    }
    if pos == 0 {
        return std::borrow::Cow::Borrowed(s);
    }
    out.push_str(&s[pos..]);
    std::borrow::Cow::Owned(out)
}

/// Like Python's `clean_content_for_embedding`: comments removed, runs of
/// three or more `\n` collapsed to two, stripped.
pub fn clean_for_embedding(s: &str) -> String {
    let no_comments = strip_html_comments(s);
    let mut out = String::with_capacity(no_comments.len());
    let mut newlines = 0usize;
    for c in no_comments.chars() {
        if c == '\n' {
            newlines += 1;
            continue;
        }
        if newlines > 0 {
            let n = if newlines >= 3 { 2 } else { newlines };
            for _ in 0..n {
                out.push('\n');
            }
            newlines = 0;
        }
        out.push(c);
    }
    if newlines > 0 {
        let n = if newlines >= 3 { 2 } else { newlines };
        for _ in 0..n {
            out.push('\n');
        }
    }
    py_strip(&out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitlines_matches_python() {
        assert_eq!(
            py_splitlines("a\r\nb\rc\n").collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
        assert_eq!(
            py_splitlines("a\n\nb").collect::<Vec<_>>(),
            vec!["a", "", "b"]
        );
        assert_eq!(py_splitlines("").count(), 0);
        assert_eq!(py_splitlines("x\x1cy").collect::<Vec<_>>(), vec!["x", "y"]);
    }

    #[test]
    fn comments_removed_non_greedy() {
        assert_eq!(strip_html_comments("a<!-- x -->b<!--y-->c"), "abc");
        assert_eq!(strip_html_comments("a<!-->b"), "a<!-->b");
        assert_eq!(strip_html_comments("a<!-- open"), "a<!-- open");
        assert_eq!(strip_html_comments("<!--a-->b<!-- open"), "b<!-- open");
    }

    #[test]
    fn clean_collapses_newlines() {
        assert_eq!(
            clean_for_embedding("  a\n\n\n\nb<!-- c -->\n\n\n"),
            "a\n\nb"
        );
        assert_eq!(clean_for_embedding("a\n\nb"), "a\n\nb");
    }
}
