//! The pure transformations file tools apply, in one crate that both the
//! host's producers and the filesystem classifier compile (ADP row 1), so the
//! postcondition digest a claim carries is computed by the very code that
//! writes the bytes.
//!
//! - [`unwrap_fence`]: `write_file` content wrapped in one markdown code fence,
//!   as agent runtimes unwrap it;
//! - [`apply_edit`]: `edit_file`, exact `old_string` -> `new_string`, no newline
//!   translation;
//! - [`parse_patch`] and [`apply_hunks`]: `apply_patch` in the `*** Begin Patch`
//!   format coding agents emit; updates apply to the universal-newline
//!   pre-state (CRLF and CR read as LF) and write LF.
//!
//! No IO, no allocation tricks, no dependencies: it must build for
//! wasm32-unknown-unknown and natively, and give the same bytes on both.

/// Strips one markdown code fence that surrounds the whole content: a first
/// line starting with three backticks (an info string may follow) and a last
/// non-empty line of exactly three backticks. Anything else is returned as is.
pub fn unwrap_fence(content: &str) -> &str {
    let Some(rest) = content.strip_prefix("```") else { return content };
    let Some(first_newline) = rest.find('\n') else { return content };
    if rest[..first_newline].contains('`') {
        return content; // "```a```" on one line is inline code, not a fence
    }
    let body = &rest[first_newline + 1..];
    let trimmed = body.trim_end_matches(['\n', '\r', ' ', '\t']);
    let Some(inner) = trimmed.strip_suffix("```") else { return content };
    if !(inner.is_empty() || inner.ends_with('\n')) {
        return content; // the closing fence must be on its own line
    }
    inner
}

/// Why an edit cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// `old_string` is empty.
    EmptyOld,
    /// `old_string` does not occur.
    NotFound,
    /// `old_string` occurs this many times and `replace_all` is false.
    Ambiguous(usize),
    /// `old_string` equals `new_string`: nothing would change.
    NoChange,
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::EmptyOld => f.write_str("old_string is empty"),
            EditError::NotFound => f.write_str("old_string does not occur in the file"),
            EditError::Ambiguous(n) => {
                write!(f, "old_string occurs {n} times; set replace_all or give more context")
            }
            EditError::NoChange => f.write_str("old_string and new_string are the same"),
        }
    }
}

/// `edit_file`: replaces the exact `old` with `new` in `pre`, once (it must
/// occur exactly once) or everywhere with `replace_all`. Bytes other than the
/// replaced ones are kept exactly, line endings included.
pub fn apply_edit(pre: &str, old: &str, new: &str, replace_all: bool) -> Result<String, EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOld);
    }
    if old == new {
        return Err(EditError::NoChange);
    }
    match pre.matches(old).count() {
        0 => Err(EditError::NotFound),
        1 => Ok(pre.replacen(old, new, 1)),
        _ if replace_all => Ok(pre.replace(old, new)),
        n => Err(EditError::Ambiguous(n)),
    }
}

/// One hunk of an update: lines to find (context and removals, in order) and
/// the lines that replace them (context and additions, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@` header's text: a whole line to find first (compared exactly,
    /// then ignoring trailing whitespace), or empty.
    pub anchor: String,
    /// Context and `-` lines.
    pub old: Vec<String>,
    /// Context and `+` lines.
    pub new: Vec<String>,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// Create `path` with `content`.
    Add {
        /// Target path.
        path: String,
        /// Its content (LF, ending in a newline).
        content: String,
    },
    /// Remove `path`.
    Delete {
        /// Target path.
        path: String,
    },
    /// Apply hunks to `path`, optionally moving it.
    Update {
        /// Target path.
        path: String,
        /// New path, for `*** Move to:`.
        move_to: Option<String>,
        /// The hunks, in file order.
        hunks: Vec<Hunk>,
    },
}

/// Why a patch does not parse or apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError {
    /// 1-based line of the patch, or 0 when applying.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 {
            write!(f, "patch line {}: {}", self.line, self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

fn error(line: usize, message: impl Into<String>) -> PatchError {
    PatchError { line, message: message.into() }
}

/// Parses a patch (`*** Begin Patch` ... `*** End Patch`).
pub fn parse_patch(text: &str) -> Result<Vec<PatchOp>, PatchError> {
    let lines: Vec<&str> = text.lines().map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let first = lines.iter().position(|l| !l.trim().is_empty()).ok_or_else(|| error(1, "empty patch"))?;
    if lines[first].trim() != "*** Begin Patch" {
        return Err(error(first + 1, "a patch starts with `*** Begin Patch`"));
    }
    let mut ops = Vec::new();
    let mut index = first + 1;
    loop {
        let Some(line) = lines.get(index) else { return Err(error(index, "missing `*** End Patch`")) };
        let number = index + 1;
        index += 1;
        if line.trim() == "*** End Patch" {
            break;
        } else if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut content = String::new();
            while let Some(body) = lines.get(index).and_then(|l| l.strip_prefix('+')) {
                content.push_str(body);
                content.push('\n');
                index += 1;
            }
            ops.push(PatchOp::Add { path: path.trim().to_owned(), content });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            ops.push(PatchOp::Delete { path: path.trim().to_owned() });
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            let mut move_to = None;
            if let Some(target) = lines.get(index).and_then(|l| l.strip_prefix("*** Move to: ")) {
                move_to = Some(target.trim().to_owned());
                index += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while let Some(line) = lines.get(index) {
                if line.starts_with("*** ") && *line != "*** End of File" {
                    break;
                }
                index += 1;
                if let Some(anchor) = line.strip_prefix("@@") {
                    hunks.push(Hunk { anchor: anchor.trim().to_owned(), old: Vec::new(), new: Vec::new() });
                    continue;
                }
                if *line == "*** End of File" {
                    continue;
                }
                if hunks.is_empty() {
                    hunks.push(Hunk { anchor: String::new(), old: Vec::new(), new: Vec::new() });
                }
                let hunk = hunks.last_mut().expect("pushed above");
                match line.chars().next() {
                    Some(' ') | None => {
                        let context = line.get(1..).unwrap_or("").to_owned();
                        hunk.old.push(context.clone());
                        hunk.new.push(context);
                    }
                    Some('-') => hunk.old.push(line[1..].to_owned()),
                    Some('+') => hunk.new.push(line[1..].to_owned()),
                    Some(_) => return Err(error(index, format!("unexpected line in a hunk: {line:?}"))),
                }
            }
            if hunks.iter().all(|h| h.old == h.new) && move_to.is_none() {
                return Err(error(number, format!("update of {} changes nothing", path.trim())));
            }
            ops.push(PatchOp::Update { path: path.trim().to_owned(), move_to, hunks });
        } else if !line.trim().is_empty() {
            return Err(error(number, format!("expected a file operation, found {line:?}")));
        }
    }
    if ops.is_empty() {
        return Err(error(first + 1, "the patch has no file operations"));
    }
    Ok(ops)
}

/// Reads `pre` with universal newlines: CRLF and lone CR become LF.
pub fn universal_lines(pre: &str) -> Vec<String> {
    let normalized = pre.replace("\r\n", "\n").replace('\r', "\n");
    let mut lines: Vec<String> = normalized.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop(); // the newline at end of file ends the last line
    }
    lines
}

fn find(lines: &[String], from: usize, wanted: &[String]) -> Option<usize> {
    if wanted.is_empty() {
        return Some(from.min(lines.len()));
    }
    let exact = |at: usize| lines[at..at + wanted.len()].iter().zip(wanted).all(|(a, b)| a == b);
    let loose = |at: usize| {
        lines[at..at + wanted.len()].iter().zip(wanted).all(|(a, b)| a.trim_end() == b.trim_end())
    };
    let last = lines.len().checked_sub(wanted.len())?;
    (from..=last).find(|&at| exact(at)).or_else(|| (from..=last).find(|&at| loose(at)))
}

/// Applies `hunks` in order to the universal-newline pre-state; the result is
/// LF-terminated lines.
pub fn apply_hunks(pre: &str, hunks: &[Hunk]) -> Result<String, PatchError> {
    let mut lines = universal_lines(pre);
    let mut cursor = 0;
    for (number, hunk) in hunks.iter().enumerate() {
        if !hunk.anchor.is_empty() {
            let anchor = std::slice::from_ref(&hunk.anchor);
            cursor = find(&lines, cursor, anchor).ok_or_else(|| {
                error(0, format!("hunk {}: anchor {:?} not found", number + 1, hunk.anchor))
            })?;
        }
        let at = find(&lines, cursor, &hunk.old)
            .ok_or_else(|| error(0, format!("hunk {}: its lines do not match the file", number + 1)))?;
        lines.splice(at..at + hunk.old.len(), hunk.new.iter().cloned());
        cursor = at + hunk.new.len();
    }
    let mut out = lines.join("\n");
    if !lines.is_empty() {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_surrounding_fence_is_unwrapped_and_nothing_else() {
        assert_eq!(unwrap_fence("```rust\nfn main() {}\n```\n"), "fn main() {}\n");
        assert_eq!(unwrap_fence("```\na\nb\n```"), "a\nb\n");
        assert_eq!(unwrap_fence("```\n```"), "");
        assert_eq!(unwrap_fence("plain\n"), "plain\n");
        assert_eq!(unwrap_fence("```inline```"), "```inline```");
        assert_eq!(unwrap_fence("```\nunclosed\n"), "```\nunclosed\n");
        assert_eq!(unwrap_fence("```\ncode``` trailing\n```x"), "```\ncode``` trailing\n```x");
        // Only the outer fence goes; an inner one stays.
        assert_eq!(unwrap_fence("```md\n```sh\nls\n```\n```\n"), "```sh\nls\n```\n");
    }

    #[test]
    fn edits_are_exact_and_keep_line_endings() {
        assert_eq!(apply_edit("a\r\nb\r\n", "b", "c", false).unwrap(), "a\r\nc\r\n");
        assert_eq!(apply_edit("x x", "x", "y", false), Err(EditError::Ambiguous(2)));
        assert_eq!(apply_edit("x x", "x", "y", true).unwrap(), "y y");
        assert_eq!(apply_edit("abc", "z", "y", false), Err(EditError::NotFound));
        assert_eq!(apply_edit("abc", "", "y", false), Err(EditError::EmptyOld));
        assert_eq!(apply_edit("abc", "a", "a", false), Err(EditError::NoChange));
    }

    const PATCH: &str = "*** Begin Patch\n*** Add File: new.txt\n+hello\n+world\n*** Update File: src/a.rs\n@@ // header\n fn main() {\n-    old();\n+    new();\n }\n*** Delete File: gone.txt\n*** End Patch\n";

    #[test]
    fn patches_parse_into_operations() {
        let ops = parse_patch(PATCH).unwrap();
        assert_eq!(ops[0], PatchOp::Add { path: "new.txt".into(), content: "hello\nworld\n".into() });
        assert_eq!(ops[2], PatchOp::Delete { path: "gone.txt".into() });
        let PatchOp::Update { path, hunks, move_to } = &ops[1] else { panic!("{ops:?}") };
        assert_eq!((path.as_str(), move_to), ("src/a.rs", &None));
        assert_eq!(hunks[0].anchor, "// header");
        assert_eq!(hunks[0].old, vec!["fn main() {", "    old();", "}"]);
        assert_eq!(hunks[0].new, vec!["fn main() {", "    new();", "}"]);
    }

    #[test]
    fn malformed_patches_say_where() {
        assert_eq!(parse_patch("").unwrap_err().line, 1);
        assert_eq!(parse_patch("hello\n").unwrap_err().line, 1);
        assert!(
            parse_patch("*** Begin Patch\n*** Add File: a\n+x\n").unwrap_err().message.contains("End Patch")
        );
        assert_eq!(parse_patch("*** Begin Patch\nnonsense\n*** End Patch\n").unwrap_err().line, 2);
        assert!(parse_patch("*** Begin Patch\n*** End Patch\n").is_err());
    }

    #[test]
    fn hunks_apply_to_the_universal_newline_pre_state() {
        let ops = parse_patch(PATCH).unwrap();
        let PatchOp::Update { hunks, .. } = &ops[1] else { unreachable!() };
        let crlf = "// header\r\nfn main() {\r\n    old();\r\n}\r\n";
        assert_eq!(apply_hunks(crlf, hunks).unwrap(), "// header\nfn main() {\n    new();\n}\n");
        let mismatch = apply_hunks("// header\nfn main() {\n    other();\n}\n", hunks).unwrap_err();
        assert!(mismatch.message.contains("do not match"), "{mismatch}");
        let no_anchor = apply_hunks("fn main() {\n    old();\n}\n", hunks).unwrap_err();
        assert!(no_anchor.message.contains("anchor"), "{no_anchor}");
    }
}
