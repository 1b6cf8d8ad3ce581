//! Text from files and peers made safe to show: a name or an error read from a results
//! file, a scenario or a server may hold control characters (`ESC [2J` clears a terminal;
//! a raw U+001B makes an SVG invalid XML, which browsers refuse to render). Every output
//! people read goes through one of these two.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal or a document raw: control characters (C0, DEL,
/// C1) and the bidirectional overrides and isolates, which reorder the text around them
/// on screen (the "Trojan Source" trick, CVE-2021-42574).
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) && !keep(c) {
            // Rust's own spelling, `\u{1b}`: visible, and unambiguous to whoever reads it.
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One value on one line (a name, a label, an error): every control character, line breaks
/// too, written as its escape (`\u{1b}`); text without any is returned as it is.
pub fn printable(s: &str) -> Cow<'_, str> {
    escape(s, |_| false)
}

/// Text of many lines (a table, a document): as [`printable`], but line breaks and tabs
/// are kept.
pub fn printable_text(s: &str) -> Cow<'_, str> {
    escape(s, |c| matches!(c, '\n' | '\t' | '\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("cubic-sack"), Cow::Borrowed(_)));
        assert!(matches!(printable("débit 5 µs ✓"), Cow::Borrowed(_)));
        assert_eq!(printable("cu\u{1b}[2J"), "cu\\u{1b}[2J");
        assert_eq!(
            printable("a\nb\0c\u{7f}\u{9b}"),
            "a\\u{a}b\\u{0}c\\u{7f}\\u{9b}"
        );
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(printable_text("a\tb\nc\u{1b}"), "a\tb\nc\\u{1b}");
    }
}
