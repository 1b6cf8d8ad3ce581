//! The Markdown these tests read: which files, their fenced blocks, the commands of the
//! `sh` blocks as a shell reads them, and the headings and links a reader follows.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents, relative to the root: README.md, ARCHITECTURE.md, SECURITY.md, every
/// docs/*.md and every README.md under deploy/, in a fixed order.
pub fn doc_files() -> Vec<String> {
    let root = repo();
    let mut out: Vec<String> = ["README.md", "ARCHITECTURE.md", "SECURITY.md"]
        .map(String::from)
        .to_vec();
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    out.extend(docs);
    let mut deploy = Vec::new();
    readmes_under(&root, "deploy", &mut deploy);
    deploy.sort();
    out.extend(deploy);
    out
}

/// Every README.md under `dir` (relative to `root`), recursively.
fn readmes_under(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = format!("{dir}/{name}");
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            readmes_under(root, &rel, out);
        } else if name == "README.md" {
            out.push(rel);
        }
    }
}

/// A document's text.
pub fn read(file: &str) -> String {
    std::fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A fenced code block: where it opens, its language tag ("" when it has none) and its
/// lines with their numbers, the fence's indentation taken off.
pub struct Block {
    pub file: String,
    pub line: usize,
    pub tag: String,
    pub body: Vec<(usize, String)>,
}

/// The fenced blocks of `text` (```), in order; an unclosed one is an error.
pub fn blocks(file: &str, text: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        match open.take() {
            None if t.starts_with("```") => {
                let tag = t.trim_start_matches('`').trim().to_string();
                let block = Block {
                    file: file.to_string(),
                    line: n,
                    tag,
                    body: Vec::new(),
                };
                open = Some((block, indent));
            }
            None => {}
            Some((block, _)) if t == "```" => out.push(block),
            Some((mut block, at)) => {
                let cut = indent.min(at);
                block.body.push((n, line[cut..].to_string()));
                open = Some((block, at));
            }
        }
    }
    match open {
        Some((b, _)) => Err(format!(
            "{}:{}: a fenced block is never closed",
            file, b.line
        )),
        None => Ok(out),
    }
}

/// One command of an `sh` block: a logical line (continued by a trailing `\`, an open
/// quote or an open `do`), comments removed.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub file: String,
    pub line: usize,
    pub text: String,
}

/// The commands of a block, as a shell reads its lines.
pub fn commands(block: &Block) -> Vec<Cmd> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut quote: Option<char> = None;
    // What joins the next line to the command: a blank after a `\`, a newline in a quote
    // or a loop's body.
    let mut joint = ' ';
    for (n, raw) in &block.body {
        let line = if quote.is_some() {
            raw.clone()
        } else {
            strip_comment(raw)
        };
        if cur.is_empty() && line.trim().is_empty() {
            continue;
        }
        if cur.is_empty() {
            start = *n;
        } else {
            cur.push(joint);
        }
        // A line that goes on inside a quote keeps its indentation, as the shell does.
        let quoted = quote.is_some();
        quote = quote_after(quote, &line);
        let continued = quote.is_none() && line.trim_end().ends_with('\\');
        let piece = line.trim_end().trim_end_matches(|c| continued && c == '\\');
        let piece = if quoted { piece } else { piece.trim() };
        cur.push_str(piece);
        joint = if continued { ' ' } else { '\n' };
        if quote.is_some() || continued || open_loops(&cur) > 0 {
            continue;
        }
        out.push(Cmd {
            file: block.file.clone(),
            line: start,
            text: std::mem::take(&mut cur),
        });
    }
    if !cur.is_empty() {
        out.push(Cmd {
            file: block.file.clone(),
            line: start,
            text: cur,
        });
    }
    out
}

/// The line without its comment: a `#` at the start, or after a blank outside quotes.
fn strip_comment(line: &str) -> String {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') if prev.is_whitespace() => return line[..i].trim_end().to_string(),
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// The quote still open after `line`, given the one open before it.
fn quote_after(mut quote: Option<char>, line: &str) -> Option<char> {
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    quote
}

/// `do`s not yet closed by a `done` in `text`.
fn open_loops(text: &str) -> i32 {
    text.split(|c: char| c.is_whitespace() || c == ';')
        .map(|w| match w {
            "do" => 1,
            "done" => -1,
            _ => 0,
        })
        .sum()
}

/// The anchor GitHub gives a heading: its text as shown (code spans' backticks and links'
/// targets dropped), lowercased, every character but letters, digits, spaces, `-` and `_`
/// removed, and spaces made `-`.
pub fn anchor(heading: &str) -> String {
    link_texts(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `[text](target)` as `text`.
fn link_texts(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("](") {
        let Some(j) = rest[i..].find(')') else { break };
        out.push_str(&rest[..i]);
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    out.replace('[', "")
}

/// The anchors of a document's headings; a repeated one also as `NAME-1`, `NAME-2`, ...
pub fn anchors(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    for line in prose(text).lines() {
        let t = line.trim_end();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(t[hashes..].trim());
        let mut name = base.clone();
        let mut k = 0;
        while out.contains(&name) {
            k += 1;
            name = format!("{base}-{k}");
        }
        out.insert(name);
    }
    out
}

/// The text outside fenced blocks (their lines left empty, so line numbers stay).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim().starts_with("```") {
            inside = !inside;
        } else if !inside {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The targets of a document's links and images outside code, with their line numbers:
/// `[text](target)` and `![alt](target)`.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let text = without_code_spans(&prose(text));
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = text[i..].find("](") {
        let at = i + k;
        let start = at + 2;
        let Some(len) = text[start..].find(')') else {
            break;
        };
        let target = text[start..start + len].split_whitespace().next();
        // A link's text is in brackets: a `](` without its `[` is no link.
        let opened = text[..at]
            .rfind('[')
            .is_some_and(|o| !text[o..at].contains("\n\n"));
        if let (Some(t), true) = (target, opened) {
            let line = text[..at].matches('\n').count() + 1;
            out.push((line, t.to_string()));
        }
        i = start + len;
    }
    out
}

/// The text with inline code spans blanked (a link written in code is no link). A span
/// ends with its paragraph at the latest, so a stray backtick costs one paragraph.
fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    let mut prev = ' ';
    for c in text.chars() {
        if c == '`' {
            inside = !inside;
            out.push(' ');
        } else if c == '\n' {
            inside = inside && prev != '\n';
            out.push(c);
        } else if inside {
            out.push(' ');
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}
