//! Bounded reads of the inputs a surface or a loader is handed through a
//! capability (policy manifests and components, conformance vectors): nothing
//! an operator names is read without a bound, so a FIFO or a device given as
//! a file is a clear error, never exhausted memory. The CLI reads its own
//! arguments (scripts, key files) under the same bound.

use std::io::{BufRead, Read};

use cap_std::fs::Dir;

/// The largest input read whole (16 MiB): far above any real script,
/// manifest, vector or policy component, far below what would exhaust a host.
pub const INPUT_BOUND: u64 = 16 << 20;

/// Reads everything from `reader`, up to [`INPUT_BOUND`] bytes; more is an
/// `InvalidData` error that names the bound.
pub fn read_all(reader: impl Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    read_within_bound(reader, &mut bytes)?;
    Ok(bytes)
}

/// [`read_all`] into `bytes`, which keep what was read when it fails: the
/// first [`INPUT_BOUND`] bytes and one more of an input past the bound, for
/// a caller that must still tell what that input was (a hook event too
/// large to parse may name a tool about to run).
pub fn read_within_bound(reader: impl Read, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    reader.take(INPUT_BOUND + 1).read_to_end(bytes)?;
    if bytes.len() as u64 > INPUT_BOUND {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {INPUT_BOUND} bytes (16 MiB), the bound on any input read whole"),
        ));
    }
    Ok(())
}

/// One read of [`read_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundedLine {
    /// A line, with its line break (the last one may have none).
    Line,
    /// A line longer than the bound: not kept, the rest of it read and dropped.
    Overlong,
    /// The end of the input.
    End,
}

/// Reads one line of a line-framed protocol into `line` (cleared first): at
/// most `bound` bytes before its line break. A longer line is
/// [`BoundedLine::Overlong`]: its first bytes are left in `line`, the rest
/// is read and dropped without being kept, so the next read starts at the
/// next line.
pub fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>, bound: u64) -> std::io::Result<BoundedLine> {
    line.clear();
    if reader.take(bound + 1).read_until(b'\n', line)? == 0 {
        return Ok(BoundedLine::End);
    }
    if line.len() as u64 > bound && !line.ends_with(b"\n") {
        skip_line(reader)?;
        return Ok(BoundedLine::Overlong);
    }
    Ok(BoundedLine::Line)
}

/// Discards the rest of a line, up to and with its line break.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        let (done, used) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (true, at + 1),
            None => (false, buffer.len()),
        };
        reader.consume(used);
        if done {
            return Ok(());
        }
    }
}

/// [`Dir::read`] under [`INPUT_BOUND`].
pub fn read(dir: &Dir, name: &str) -> std::io::Result<Vec<u8>> {
    read_all(dir.open(name)?)
}

/// [`Dir::read_to_string`] under [`INPUT_BOUND`].
pub fn read_to_string(dir: &Dir, name: &str) -> std::io::Result<String> {
    String::from_utf8(read(dir, name)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_over_the_bound_is_dropped_whole_and_the_next_is_read() {
        let input = b"abcd\nabcde\nabcdefghij\nxy\nlast";
        let mut reader = std::io::BufReader::with_capacity(3, &input[..]);
        let mut line = Vec::new();
        let mut read =
            || (read_line(&mut reader, &mut line, 4).unwrap(), String::from_utf8(line.clone()).unwrap());
        assert_eq!(read(), (BoundedLine::Line, "abcd\n".to_owned()));
        assert_eq!(read().0, BoundedLine::Overlong);
        assert_eq!(read().0, BoundedLine::Overlong);
        assert_eq!(read(), (BoundedLine::Line, "xy\n".to_owned()));
        assert_eq!(read(), (BoundedLine::Line, "last".to_owned()));
        assert_eq!(read().0, BoundedLine::End);
    }

    #[test]
    fn at_the_bound_is_read_past_it_is_refused() {
        let at = std::io::repeat(b'x').take(INPUT_BOUND);
        assert_eq!(read_all(at).unwrap().len() as u64, INPUT_BOUND);
        let error = read_all(std::io::repeat(0)).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("16 MiB"), "{error}");
    }
}
