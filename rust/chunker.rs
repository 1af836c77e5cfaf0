//! Markdown chunking: heading sections, paragraph/line/sentence fallback,
//! overlap and 1-based inclusive line ranges.
//!
//! Output is identical to memsearch 0.4.23's chunker (so chunk ids are
//! interchangeable), with two deliberate differences: a line inside a fenced
//! code block is never a heading, and the overlap is bounded (see
//! [`AMPLIFY`]). The work is linear in the input: the joined text of a line
//! range is a slice of the input, and lengths are tracked incrementally
//! instead of re-joining lines.

use crate::hashing::{sha256_head, Hex16};
use crate::pytext::{char_len, is_line_break, is_py_space, py_strip, strip_html_comments};

/// One chunk, before it crosses into Python. Content and heading are byte
/// ranges of the chunked text: every chunk is a slice of its document, so
/// nothing is copied until Python asks for a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChunk {
    pub content: (usize, usize),
    pub heading: (usize, usize),
    pub heading_level: u8,
    pub start_line: usize,
    pub end_line: usize,
    pub content_hash: Hex16,
}

impl RawChunk {
    pub fn content<'a>(&self, text: &'a str) -> &'a str {
        &text[self.content.0..self.content.1]
    }

    pub fn heading<'a>(&self, text: &'a str) -> &'a str {
        &text[self.heading.0..self.heading.1]
    }
}

/// Byte range of `part` within `text`; `part` must be a slice of `text`.
#[inline]
fn span(text: &str, part: &str) -> (usize, usize) {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    debug_assert!(start + part.len() <= text.len());
    (start, start + part.len())
}

/// Returns `(level, title)` when `line` is an ATX heading by the rule
/// `^(#{1,6})\s+(.+)$` (Python `re`, `\s` = `str.isspace`).
#[inline]
pub fn heading_of(line: &str) -> Option<(u8, &str)> {
    let bytes = line.as_bytes();
    if bytes.first() != Some(&b'#') {
        return None;
    }
    let hashes = bytes.iter().take_while(|&&b| b == b'#').count();
    if hashes > 6 {
        return None;
    }
    let rest = &line[hashes..];
    let mut chars = rest.chars();
    match chars.next() {
        Some(c) if is_py_space(c) => {}
        _ => return None,
    }
    // `\s+` takes at least one character and `.+` at least one more.
    chars.next()?;
    Some((hashes as u8, py_strip(rest)))
}

/// Tracks fenced code blocks (``` or ~~~, CommonMark rules) line by line.
#[derive(Default)]
pub struct FenceState {
    open: Option<(u8, usize)>,
}

impl FenceState {
    /// Feeds one line; returns true when the line is inside a fence
    /// (including the fence's own opening and closing lines).
    pub fn in_fence(&mut self, line: &str) -> bool {
        let indent = line.bytes().take_while(|&b| b == b' ').count();
        let marker = if indent <= 3 {
            fence_marker(&line[indent..])
        } else {
            None
        };
        match self.open {
            Some((ch, len)) => {
                if let Some((mch, mlen, rest)) = marker {
                    if mch == ch && mlen >= len && rest.chars().all(is_py_space) {
                        self.open = None;
                    }
                }
                true
            }
            None => {
                if let Some((mch, mlen, rest)) = marker {
                    if mch == b'~' || !rest.contains('`') {
                        self.open = Some((mch, mlen));
                        return true;
                    }
                }
                false
            }
        }
    }
}

fn fence_marker(s: &str) -> Option<(u8, usize, &str)> {
    let ch = *s.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let n = s.bytes().take_while(|&b| b == ch).count();
    if n < 3 {
        return None;
    }
    Some((ch, n, &s[n..]))
}

/// True when the section has at least two non-whitespace characters outside
/// HTML comments and heading lines (the reference drops emptier sections).
///
/// Equivalent to counting over `splitlines()` of the comment-free text, but
/// it stops at the second such character and only looks at whole lines when
/// a line could be a heading or a fence.
fn has_meaningful_content(section: &str) -> bool {
    let stripped = strip_html_comments(section);
    let s: &str = &stripped;
    let bytes = s.as_bytes();
    let mut fence = FenceState::default();
    let mut seen = 0usize;
    let mut pos = 0usize;
    while pos < s.len() {
        let rest = &s[pos..];
        let first = bytes[pos];
        let maybe_special = fence.open.is_some() || matches!(first, b'#' | b'`' | b'~' | b' ');
        if maybe_special {
            let (end, next) = line_bounds(rest);
            let line = &rest[..end];
            if fence.in_fence(line) || heading_of(line).is_none() {
                seen += line
                    .chars()
                    .filter(|&c| !is_py_space(c))
                    .take(2 - seen)
                    .count();
                if seen >= 2 {
                    return true;
                }
            }
            pos += next;
            continue;
        }
        let mut advanced = rest.len();
        for (i, c) in rest.char_indices() {
            if is_line_break(c) {
                advanced = i + c.len_utf8();
                if c == '\r' && rest.as_bytes().get(advanced) == Some(&b'\n') {
                    advanced += 1;
                }
                break;
            }
            if !is_py_space(c) {
                seen += 1;
                if seen >= 2 {
                    return true;
                }
            }
        }
        pos += advanced;
    }
    false
}

/// `(end of line, start of next line)` for `str.splitlines()` semantics.
fn line_bounds(rest: &str) -> (usize, usize) {
    for (i, c) in rest.char_indices() {
        if is_line_break(c) {
            let mut next = i + c.len_utf8();
            if c == '\r' && rest.as_bytes().get(next) == Some(&b'\n') {
                next += 1;
            }
            return (i, next);
        }
    }
    (rest.len(), rest.len())
}

/// The input split on `\n` with the byte span of each line, so any run of
/// lines joined by `\n` is a zero-copy slice.
struct Lines<'a> {
    text: &'a str,
    spans: Vec<(usize, usize)>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let mut spans = Vec::new();
        let mut start = 0;
        for i in memchr::memchr_iter(b'\n', text.as_bytes()) {
            spans.push((start, i));
            start = i + 1;
        }
        spans.push((start, text.len()));
        Lines { text, spans }
    }

    fn line(&self, i: usize) -> &'a str {
        let (s, e) = self.spans[i];
        &self.text[s..e]
    }

    /// Lines `lo..hi` joined by `\n` (empty when the range is empty).
    fn join(&self, lo: usize, hi: usize) -> &'a str {
        if lo >= hi {
            return "";
        }
        &self.text[self.spans[lo].0..self.spans[hi - 1].1]
    }
}

/// The chunks of a document may hold at most this many times its bytes (plus
/// [`SLACK_CHUNKS`] chunks' worth). Only overlap repeats text: an overlap of
/// more lines than a window holds made every window one line longer than the
/// last, so N short lines gave about N²/4 chunks (1,000 lines of 25 bytes:
/// 249,107 chunks, a 1 GB database). A document past the bound is chunked
/// again without overlap. memsearch 0.4.23 has no bound; an overlap of a few
/// lines on windows of several lines stays well inside it, and the
/// differential tests compare the two chunkers wherever it does not.
pub const AMPLIFY: usize = 6;
/// Room for a short document's overlap, in chunks of the maximum size.
pub const SLACK_CHUNKS: usize = 4;

struct Emitter<'t> {
    text: &'t str,
    heading: (usize, usize),
    level: u8,
    max_size: usize,
    out: Vec<RawChunk>,
    /// Bytes of chunk content still allowed in this document.
    left: usize,
    /// Set once a chunk would pass `left`: the document is chunked again without overlap.
    over: bool,
}

impl Emitter<'_> {
    fn emit(&mut self, content: &str, start_line: usize, end_line: usize) {
        if content.is_empty() || self.over {
            return;
        }
        if content.len() > self.left {
            self.over = true;
            return;
        }
        self.left -= content.len();
        self.out.push(RawChunk {
            content: span(self.text, content),
            heading: self.heading,
            heading_level: self.level,
            start_line,
            end_line,
            content_hash: sha256_head(content.as_bytes()),
        });
    }

    fn emit_bounded(&mut self, content: &str, start_line: usize, end_line: usize) {
        let content = py_strip(content);
        if content.is_empty() {
            return;
        }
        if content.len() > self.max_size && char_len(content) > self.max_size {
            for part in split_long_text(content, self.max_size) {
                self.emit(py_strip(part), start_line, end_line);
            }
        } else {
            self.emit(content, start_line, end_line);
        }
    }
}

/// Chunks one markdown document.
pub fn chunk_markdown(text: &str, max_chunk_size: usize, overlap_lines: i64) -> Vec<RawChunk> {
    if overlap_lines <= 0 {
        // Without overlap every byte is in at most one chunk.
        return chunk_within(text, max_chunk_size, 0, usize::MAX).unwrap_or_default();
    }
    let budget = text
        .len()
        .saturating_mul(AMPLIFY)
        .saturating_add(max_chunk_size.saturating_mul(SLACK_CHUNKS));
    chunk_within(text, max_chunk_size, overlap_lines, budget)
        .or_else(|| chunk_within(text, max_chunk_size, 0, usize::MAX))
        .unwrap_or_default()
}

/// The chunks of `text`, or None when their content passes `budget` bytes.
fn chunk_within(
    text: &str,
    max_chunk_size: usize,
    overlap_lines: i64,
    budget: usize,
) -> Option<Vec<RawChunk>> {
    let lines = Lines::new(text);
    let n = lines.spans.len();

    let mut headings: Vec<(usize, u8, &str)> = Vec::new();
    let mut fence = FenceState::default();
    for i in 0..n {
        let line = lines.line(i);
        if fence.in_fence(line) {
            continue;
        }
        if let Some((level, title)) = heading_of(line) {
            headings.push((i, level, title));
        }
    }

    let mut sections: Vec<(usize, usize, &str, u8)> = Vec::with_capacity(headings.len() + 1);
    if headings.first().is_none_or(|h| h.0 > 0) {
        let end = headings.first().map_or(n, |h| h.0);
        sections.push((0, end, "", 0));
    }
    for (idx, &(line_idx, level, title)) in headings.iter().enumerate() {
        let next = headings.get(idx + 1).map_or(n, |h| h.0);
        sections.push((line_idx, next, title, level));
    }

    let mut chunks = Vec::new();
    let mut left = budget;
    for (start, end, heading, level) in sections {
        let section_text = py_strip(lines.join(start, end));
        if section_text.is_empty() || !has_meaningful_content(section_text) {
            continue;
        }
        let heading = if heading.is_empty() {
            (0, 0)
        } else {
            span(text, heading)
        };
        let mut em = Emitter {
            text,
            heading,
            level,
            max_size: max_chunk_size,
            out: Vec::new(),
            left,
            over: false,
        };
        if section_text.len() <= max_chunk_size || char_len(section_text) <= max_chunk_size {
            em.emit(section_text, start + 1, end);
        } else {
            split_large_section(&lines, start, end, overlap_lines, &mut em);
        }
        if em.over {
            return None;
        }
        left = em.left;
        chunks.append(&mut em.out);
    }
    Some(chunks)
}

/// Splits the lines `start..end` of one oversized section: paragraph
/// boundary first, then line boundary, then sentence/character boundary.
/// The current window is always a contiguous run of lines `lo..=i`.
fn split_large_section(
    lines: &Lines<'_>,
    start: usize,
    end: usize,
    overlap: i64,
    em: &mut Emitter<'_>,
) {
    let max_size = em.max_size;
    let overlap = overlap.max(0) as usize;
    let mut lo = start; // first line of the current window
    let mut count = 0usize; // lines in the window
    let mut chars = 0usize; // code points in the window's lines, without separators

    // Code point length of each line, counted only for sections that split.
    let line_chars: Vec<usize> = (start..end).map(|j| char_len(lines.line(j))).collect();
    let chars_of = |j: usize| line_chars[j - start];
    let window_len = |count: usize, chars: usize| if count == 0 { 0 } else { chars + count - 1 };
    let refill = |lo: usize, hi: usize| (lo..hi).map(chars_of).sum::<usize>();

    for i in start..end {
        if em.over {
            return; // past the document's budget: it is chunked again without overlap
        }
        if count == 0 {
            lo = i;
        }
        count += 1;
        chars += chars_of(i);
        let text_len = window_len(count, chars);
        let line = lines.line(i);
        let is_paragraph_break = py_strip(line).is_empty() && i + 1 < end;
        let is_last_line = i == end - 1;

        if text_len >= max_size && is_paragraph_break {
            em.emit_bounded(lines.join(lo, i + 1), lo + 1, i + 1);
            let keep = count.min(overlap);
            lo = i + 1 - keep;
            count = keep;
            chars = refill(lo, i + 1);
            continue;
        }

        if text_len >= max_size && count > 1 {
            // Roll back the current line: the previous lines form a chunk and
            // this line starts the next window after the overlap.
            let prev = lines.join(lo, i);
            em.emit_bounded(py_strip(prev), lo + 1, i);
            let keep = (count - 1).min(overlap);
            lo = i - keep;
            count = keep + 1;
            chars = refill(lo, i + 1);
            continue;
        }

        if text_len >= max_size && count == 1 {
            for part in split_long_text(lines.join(lo, i + 1), max_size) {
                em.emit(py_strip(part), lo + 1, i + 1);
            }
            count = 0;
            chars = 0;
            lo = i + 1;
            continue;
        }

        if is_last_line {
            em.emit_bounded(lines.join(lo, i + 1), lo + 1, i + 1);
            count = 0;
            chars = 0;
        }
    }

    if count > 0 {
        let remaining = py_strip(lines.join(lo, lo + count));
        if !remaining.is_empty() {
            em.emit_bounded(remaining, lo + 1, end);
        }
    }
}

/// Heading level of each line (0 = not a heading), with the chunker's rules:
/// lines inside fenced code blocks are never headings.
pub fn heading_levels<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut fence = FenceState::default();
    lines
        .into_iter()
        .map(|line| {
            if fence.in_fence(line) {
                0
            } else {
                heading_of(line).map_or(0, |(level, _)| level)
            }
        })
        .collect()
}

#[inline]
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3040}'..='\u{30FF}' | '\u{AC00}'..='\u{D7AF}')
}

/// End (exclusive, in code points) of a sentence-ending match starting at
/// `j`, searching as if the text ended at `endpos`.
#[inline]
fn sentence_end_at(cs: &[char], j: usize, endpos: usize) -> Option<usize> {
    let skip_ws = |mut k: usize| {
        while k < endpos && is_py_space(cs[k]) {
            k += 1;
        }
        k
    };
    match cs[j] {
        '…' => Some(if j + 1 < endpos && cs[j + 1] == '…' {
            j + 2
        } else {
            j + 1
        }),
        '。' | '\u{FF01}' | '\u{FF1F}' | '\u{FF1B}' => Some(skip_ws(j + 1)),
        '.' | '!' | '?' | ';' => {
            if j + 1 == endpos || is_py_space(cs[j + 1]) || is_cjk(cs[j + 1]) {
                Some(skip_ws(j + 1))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Splits text longer than `max_size` code points into pieces of at most
/// `max_size`, preferring the last sentence end inside each window.
pub fn split_long_text(text: &str, max_size: usize) -> Vec<&str> {
    let max_size = max_size.max(1);
    let mut offsets: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    offsets.push(text.len());
    let cs: Vec<char> = text.chars().collect();
    let total = cs.len();

    let mut parts = Vec::new();
    let mut pos = 0usize;
    while total - pos > max_size {
        let endpos = pos + max_size;
        let mut best = None;
        let mut j = pos;
        while j < endpos {
            match sentence_end_at(&cs, j, endpos) {
                Some(e) => {
                    best = Some(e);
                    j = e;
                }
                None => j += 1,
            }
        }
        let cut = best.unwrap_or(endpos);
        parts.push(&text[offsets[pos]..offsets[cut]]);
        pos = cut;
    }
    if pos < total {
        parts.push(&text[offsets[pos]..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_rule() {
        assert_eq!(heading_of("# Title"), Some((1, "Title")));
        assert_eq!(heading_of("###### Six"), Some((6, "Six")));
        assert_eq!(heading_of("####### Seven"), None);
        assert_eq!(heading_of("#Title"), None);
        assert_eq!(heading_of("# "), None);
        assert_eq!(heading_of("#  "), Some((1, "")));
        assert_eq!(heading_of("## Title\r"), Some((2, "Title")));
    }

    #[test]
    fn fenced_hash_is_not_heading() {
        let text = "# Real\nbody text\n```\n# not a heading\n```\nmore";
        let chunks = chunk_markdown(text, 1500, 2);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].heading(text), "Real");
        assert_eq!(chunks[0].content(text), text);
        assert_eq!(chunks[0].end_line, 6);
    }

    #[test]
    fn an_overlap_longer_than_its_windows_is_bounded() {
        // 1,000 short lines, windows of two lines, an overlap of 1,000 lines:
        // unbounded, each window would be one line longer than the last.
        let text: String = (0..1000)
            .map(|i| format!("line {i:04} of the journal\n"))
            .collect();
        let chunks = chunk_markdown(&text, 50, 1000);
        let bytes: usize = chunks.iter().map(|c| c.content(&text).len()).sum();
        assert!(
            bytes <= text.len() * AMPLIFY + 50 * SLACK_CHUNKS,
            "{bytes} bytes"
        );
        // Chunked again without overlap: every line once, in order.
        assert_eq!(chunks, chunk_markdown(&text, 50, 0));
        assert_eq!(chunks.first().map(|c| c.start_line), Some(1));
        assert_eq!(chunks.last().map(|c| c.end_line), Some(1000));
        // An overlap that stays within the bound is kept as it was.
        let small = chunk_markdown(&text, 200, 2);
        assert!(small.windows(2).all(|w| w[1].start_line <= w[0].end_line));
    }

    #[test]
    fn long_text_prefers_sentences() {
        let parts = split_long_text("aaaa. bbbb. cccc", 8);
        assert_eq!(parts, vec!["aaaa. ", "bbbb. ", "cccc"]);
        let parts = split_long_text("abcdefghij", 4);
        assert_eq!(parts, vec!["abcd", "efgh", "ij"]);
    }
}
