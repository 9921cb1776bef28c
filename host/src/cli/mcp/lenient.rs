//! What a lenient JSON-RPC peer may read a name as (EMB-1 extended): the
//! proxy's test for a method or a key that is not spelled as MCP spells it
//! but that an upstream normalizing names would take for it.
//!
//! A lenient upstream matches names after folding them: JavaScript's
//! `.toLowerCase()` and `.trim()`, Python's `.casefold()`, `.strip()` and
//! `unicodedata.normalize('NFKC')`, accents stripped, a C string cut at its
//! first NUL, a router that percent-decodes or treats a method as a path.
//! [`readings`] takes the union of those foldings (the per-character part
//! from the generated [`fold_table`](super::fold_table)), so the proxy can
//! refuse every spelling any of them reads as `tools/call` without
//! guessing which one the upstream applies. It only ever errs towards
//! "may read as": a name that folds to nothing MCP defines is passed on.
//!
//! Pure: strings in, strings out; it never decides what the proxy does.

use super::fold_table::{FOLDED, VANISHING};

/// Whether a lenient reader may read `name` as `target` (an ASCII,
/// lower-case name such as `tools/call`), `name` itself included.
pub fn may_read_as(name: &str, target: &str) -> bool {
    readings(name).iter().any(|reading| reading == target)
}

/// Whether `name` is spelled otherwise than `target` but a lenient reader
/// may read it as `target`.
pub fn reads_as_other(name: &str, target: &str) -> bool {
    name != target && may_read_as(name, target)
}

/// How many times over a router may percent-decode a name (twice is already
/// a bug; a bound keeps a name whose folding makes new escapes finite).
const DECODINGS: usize = 8;

/// The names a lenient reader may make of `name`: with a NUL dropped like
/// any control character, and cut at its first NUL as a C string is.
fn readings(name: &str) -> [String; 2] {
    let cut = name.split('\0').next().unwrap_or_default();
    [skeleton(name), skeleton(cut)]
}

/// `name` folded every way at once: characters that may vanish dropped
/// (anywhere, a superset of trimming), the rest folded to ASCII where any
/// folding makes ASCII of them and lower-cased, percent-escapes decoded
/// (up to [`DECODINGS`] times over), backslashes read as slashes, runs of
/// slashes as one, and slashes at either end dropped.
fn skeleton(name: &str) -> String {
    let mut folded = fold(name);
    for _ in 0..DECODINGS {
        match percent_decoded(&folded) {
            Some(decoded) => folded = fold(&decoded),
            None => break,
        }
    }
    let mut path = String::with_capacity(folded.len());
    for c in folded.chars().map(|c| if c == '\\' { '/' } else { c }) {
        if !(c == '/' && (path.is_empty() || path.ends_with('/'))) {
            path.push(c);
        }
    }
    while path.ends_with('/') {
        path.pop();
    }
    path
}

/// Drops what may vanish and folds what may become ASCII, lower-cased.
fn fold(name: &str) -> String {
    let mut folded = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii() {
            if !(c.is_ascii_whitespace() || c.is_ascii_control()) {
                folded.push(c.to_ascii_lowercase());
            }
        } else if !vanishes(c) {
            match folded_to(c) {
                Some(to) => folded.push_str(&to),
                None => folded.push(c),
            }
        }
    }
    folded
}

fn vanishes(c: char) -> bool {
    let code = u32::from(c);
    VANISHING
        .binary_search_by(|&(first, last)| {
            if last < code {
                std::cmp::Ordering::Less
            } else if first > code {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// What `c` may fold to in ASCII, if anything.
fn folded_to(c: char) -> Option<String> {
    let code = u32::from(c);
    let at = FOLDED.partition_point(|&(_, last, _, _)| last < code);
    let &(first, last, to, step) = FOLDED.get(at)?;
    if code < first || code > last {
        return None;
    }
    if step == 0 {
        return Some(to.to_owned());
    }
    let base = u32::from(to.chars().next()?);
    char::from_u32(base + (code - first)).map(String::from)
}

/// `name` with its `%XX` escapes decoded, or `None` when it has none.
fn percent_decoded(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut decoded = false;
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) =
                (bytes.get(i + 1).and_then(|&b| hex(b)), bytes.get(i + 2).and_then(|&b| hex(b)))
        {
            out.push(u8::try_from(high * 16 + low).expect("two hex digits make a byte"));
            decoded = true;
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    decoded.then(|| String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_a_lenient_upstream_reads_as_a_call() {
        for name in [
            "Tools/Call",
            "tools/call ",
            "TOOLS/CALL",
            "\ttools/call\r\n",
            "tools/call\0",
            "tools/call\0junk",
            "\u{feff}tools/call",
            "tools/\u{200b}call",
            "ｔｏｏｌｓ／ｃａｌｌ",
            "toolſ/call",
            "tools/㎈l",
            "tōols/càll",
            "𝐭𝐨𝐨𝐥𝐬/𝐜𝐚𝐥𝐥",
            "tools%2Fcall",
            "tools%252fcall",
            "%74ools/call",
            "/tools//call/",
            "tools\\call",
            "tools/cal\u{2113}",
        ] {
            assert!(reads_as_other(name, "tools/call"), "{name:?}");
        }
        assert!(!reads_as_other("tools/call", "tools/call"));
        assert!(may_read_as("tools/call", "tools/call"));
        for name in ["tools/list", "notifications/cancelled", "tools/calls", "tools.call", "ping", "", "\0"] {
            assert!(!may_read_as(name, "tools/call"), "{name:?}");
        }
    }

    #[test]
    fn keys_a_lenient_upstream_reads_as_members() {
        assert!(reads_as_other("Method", "method"));
        assert!(reads_as_other("METHOD", "method"));
        assert!(reads_as_other("ıd", "id"));
        assert!(reads_as_other("Arguments", "arguments"));
        assert!(!may_read_as("methods", "method"));
    }

    #[test]
    fn the_tables_are_sorted_and_disjoint() {
        for pair in FOLDED.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
        for pair in VANISHING.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
    }
}
