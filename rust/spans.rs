//! A chunk's spans: the sentences of its list items and paragraph lines, cut
//! by the rules `memsearch_fast.index.spans` documents, with each span text's
//! content hash. Pure and parallel: the index run cuts a batch of chunks here
//! without the GIL, where the Python cutter held it for a seventh of a cold
//! index run.
//!
//! The character classes are Python's (`str.isspace`, `\w`, `\d`,
//! `str.islower`), so the spans are the ones the Python rules give: tests
//! compare the two on random and real text. The list marker, the lines with
//! no text and the heading's letter are those of `store/spans/words.py`,
//! which search reads a matched line with: a change goes to both.

use std::sync::LazyLock;

use regex::Regex;

use crate::hashing::sha256_hex16;
use crate::pytext::py_strip as strip;

// Python's classes in regex syntax: `\s` is `[\s\x1C-\x1F]`, `\w` is
// `[\p{L}\p{N}_]`, `\d` is `\p{Nd}`, and `[^\W\d_]` is `[\p{L}\p{Nl}\p{No}]`.
const SPACE: &str = r"[\s\x1C-\x1F]";
const LETTER: &str = r"[\p{L}\p{Nl}\p{No}]";
const WORD: &str = r"[\p{L}\p{N}_'.-]";

/// A list item's marker (`- `, `12. `), up to three spaces in.
static LIST_ITEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"^{SPACE}{{0,3}}(?:[-*+]|\p{{Nd}}{{1,9}}[.)]){SPACE}"
    ))
    .expect("valid pattern")
});
/// A chat log's time before who speaks: `[1:56 pm]`, `[2023-05-08 13:56]` (a
/// bracket with a digit in it), or `13:56`, `(1:56 pm)`.
const STAMP: &str = r"(?:\[[^\]\n]{0,40}\p{Nd}[^\]\n]{0,40}\]|\(?\p{Nd}{1,2}:\p{Nd}{2}(?::\p{Nd}{2})?(?:[\s\x1C-\x1F]?[AaPp]\.?[Mm]\.?)?\)?)";
/// Who speaks: a label of one to three words before a colon, after a quote
/// mark, a list marker or a time, with a note in brackets after it
/// (`> Maya:`, `1. Maya:`, `- [13:56] **Maya:**`, `Maya (1:56 pm):`, `Maya [13:56]:`).
static SPEAKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"^(?:>+{SPACE}*)?(?:(?:[-*+]|\p{{Nd}}{{1,9}}[.)]){SPACE}+)?(?:{STAMP}{SPACE}+)?(?:\*\*)?({LETTER}{WORD}*(?: {LETTER}{WORD}*){{0,2}})(?:\*\*)?(?:{SPACE}?(?:\([^()\n]{{1,40}}\)|\[[^\[\]\n]{{1,40}}\]))?(?:\*\*)?:(?:\*\*)?{SPACE}"
    ))
    .expect("valid pattern")
});
/// A sentence's end: a stop and white space, or a CJK stop.
static SENTENCE_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"[.!?。！？；;]{SPACE}+|[。！？；]")).expect("valid pattern")
});
static HAS_LETTER: LazyLock<Regex> = LazyLock::new(|| Regex::new(LETTER).expect("valid pattern"));

/// The sizes the cutter works with, in UTF-8 bytes (Python passes its constants).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Lines grouped into one span while they fit; 0: a span a sentence.
    pub budget: usize,
    /// A chunk with at most this much span text keeps its own vector alone.
    pub min_chunk: usize,
    /// A shorter sentence joins its neighbour.
    pub min_sentence: usize,
    /// The index of a chunk's first span.
    pub first: i64,
}

/// One span: its index, first and last line (1-based), text and content hash.
pub type Span = (i64, i64, i64, String, String);

/// A stripped line with nothing to match: blank, a heading, or a comment.
fn no_text(line: &str) -> bool {
    line.is_empty() || line.starts_with('#') || (line.starts_with("<!--") && line.ends_with("-->"))
}

/// *text* cut after each sentence's end, the white space after it dropped.
fn split(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for m in SENTENCE_END.find_iter(text) {
        let stop = text[m.start()..].chars().next().map_or(1, char::len_utf8);
        parts.push(&text[start..m.start() + stop]);
        start = m.end();
    }
    parts.push(&text[start..]);
    parts
}

/// The sentences of one item or line; a short one joins a neighbour, at most
/// one per sentence.
fn sentences(text: &str, min: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut joined = false; // the last sentence took in a neighbour already
    for part in split(text).into_iter().filter(|s| !strip(s).is_empty()) {
        let short = part.len() < min || out.last().is_some_and(|o| o.len() < min);
        match out.last_mut() {
            Some(last) if short && !joined => {
                last.push(' ');
                last.push_str(part);
                joined = true;
            }
            _ => {
                out.push(part.to_owned());
                joined = false;
            }
        }
    }
    out
}

/// (start, end, text) of each sentence of each list item or paragraph line.
fn units(content: &str, first_line: i64, min_sentence: usize) -> Vec<(i64, i64, String)> {
    let mut items: Vec<(i64, i64, String)> = Vec::new();
    for (offset, raw) in content.split('\n').enumerate() {
        let line = strip(raw);
        let number = first_line + offset as i64;
        if no_text(line) {
            continue;
        }
        if let Some(last) = items.last_mut() {
            if (raw.starts_with(' ') || raw.starts_with('\t')) && !LIST_ITEM.is_match(raw) {
                last.1 = number; // a continuation line belongs to the item above
                last.2.push(' ');
                last.2.push_str(line);
                continue;
            }
        }
        items.push((number, number, line.to_owned()));
    }
    let mut out = Vec::with_capacity(items.len());
    for (start, end, text) in items {
        let label = SPEAKER
            .captures(&text)
            .and_then(|c| c.get(1))
            .map(|g| g.as_str())
            .filter(|name| !name.chars().next().is_some_and(char::is_lowercase))
            .map(|name| format!("{name}: "));
        for (i, s) in sentences(&text, min_sentence).into_iter().enumerate() {
            let s = match &label {
                Some(l) if i > 0 => format!("{l}{s}"),
                _ => s,
            };
            out.push((start, end, s));
        }
    }
    out
}

/// The spans of a chunk (its content, heading and first line), in order;
/// empty when the chunk is short or makes one span.
pub fn cut(content: &str, heading: &str, start_line: i64, rules: Rules) -> Vec<Span> {
    let units = units(content, start_line, rules.min_sentence);
    if units.iter().map(|u| u.2.len() + 1).sum::<usize>() <= rules.min_chunk {
        return Vec::new();
    }
    let prefix = if HAS_LETTER.is_match(heading) {
        format!("{}\n", strip(heading))
    } else {
        String::new()
    };
    let span = |i: usize, a: i64, b: i64, text: String| {
        let text = format!("{prefix}{text}");
        let hash = sha256_hex16(text.as_bytes());
        (rules.first + i as i64, a, b, text, hash)
    };
    if rules.budget == 0 {
        if units.len() < 2 {
            return Vec::new();
        }
        return units
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, t))| span(i, a, b, t))
            .collect();
    }
    let mut groups: Vec<Vec<(i64, i64, String)>> = Vec::new();
    let mut size = 0;
    for unit in units {
        let n = unit.2.len();
        match groups.last_mut() {
            Some(g) if size + n < rules.budget => {
                g.push(unit);
                size += n + 1;
            }
            _ => {
                groups.push(vec![unit]);
                size = n;
            }
        }
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let text = g
                .iter()
                .map(|u| u.2.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            span(i, g[0].0, g[g.len() - 1].1, text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        budget: 0,
        min_chunk: 320,
        min_sentence: 40,
        first: 1,
    };

    fn texts(content: &str, heading: &str) -> Vec<String> {
        cut(content, heading, 1, RULES)
            .into_iter()
            .map(|s| s.3)
            .collect()
    }

    #[test]
    fn a_short_chunk_has_no_spans() {
        assert!(texts("- one fact\n- another", "## Notes").is_empty());
    }

    #[test]
    fn each_item_is_a_span_led_by_its_heading() {
        let body = (0..6)
            .map(|i| format!("- item {i} says something long enough to be a sentence on its own"))
            .collect::<Vec<_>>()
            .join("\n");
        let spans = cut(&body, "## Relay notes", 10, RULES);
        assert_eq!(spans.len(), 6);
        assert_eq!(spans[0].0, 1);
        assert_eq!((spans[2].1, spans[2].2), (12, 12));
        assert!(spans[0].3.starts_with("## Relay notes\n- item 0"));
        assert_eq!(spans[0].4, sha256_hex16(spans[0].3.as_bytes()));
    }

    #[test]
    fn a_turn_keeps_its_speaker_and_short_sentences_join() {
        let turn = "Maya: You won't believe what happened at the fair today. I sold twelve mugs at the fair and two bowls too. Done.";
        let body = format!("{turn}\n{turn}\n{turn}");
        let spans = texts(&body, "### 14:32");
        assert_eq!(
            spans[0],
            "Maya: You won't believe what happened at the fair today."
        );
        assert_eq!(
            spans[1],
            "Maya: I sold twelve mugs at the fair and two bowls too. Done."
        );
    }

    #[test]
    fn a_speaker_after_a_time_a_quote_or_a_number_keeps_the_turn() {
        let later = "And I met so many people there who understood me.";
        for (line, name) in [
            ("[1:56 pm] Caroline:", "Caroline"),
            ("- [2023-05-08 13:56] **Caroline:**", "Caroline"),
            ("- 13:56 Caroline:", "Caroline"),
            ("(9:05 a.m.) Caroline:", "Caroline"),
            ("> Caroline:", "Caroline"),
            ("12. Caroline:", "Caroline"),
            ("- **Caroline** (1:56 pm):", "Caroline"),
            ("Caroline (to Mel):", "Caroline"),
            ("Caroline [13:56]:", "Caroline"),
            ("Ana María:", "Ana María"),
        ] {
            let turn = format!("{line} I went to the support group yesterday afternoon. {later}");
            let body = format!("{turn}\n{turn}\n{turn}");
            let spans = texts(&body, "");
            assert_eq!(spans[1], format!("{name}: {later}"), "{line}");
        }
        // A bracket without a digit is no time (a task's box), a lower-case label no speaker.
        for line in [
            "- [x] Caroline:",
            "- [13:56] the plan:",
            "[see below] Caroline:",
        ] {
            let turn = format!("{line} I went to the support group yesterday afternoon. {later}");
            let body = format!("{turn}\n{turn}\n{turn}");
            assert_eq!(texts(&body, "")[1], later, "{line}");
        }
    }

    #[test]
    fn cjk_stops_end_sentences_without_space() {
        assert_eq!(split("一。二！三"), vec!["一。", "二！", "三"]);
        assert_eq!(split("a. b;  c"), vec!["a.", "b;", "c"]);
    }
}
