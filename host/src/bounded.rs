//! Bounded reads of the inputs a surface or a loader is handed through a
//! capability (policy manifests and components, conformance vectors): nothing
//! an operator names is read without a bound, so a FIFO or a device given as
//! a file is a clear error, never exhausted memory. The CLI reads its own
//! arguments (scripts, key files) under the same bound.

use std::io::Read;

use cap_std::fs::Dir;

/// The largest input read whole (16 MiB): far above any real script,
/// manifest, vector or policy component, far below what would exhaust a host.
pub const INPUT_BOUND: u64 = 16 << 20;

/// Reads everything from `reader`, up to [`INPUT_BOUND`] bytes; more is an
/// `InvalidData` error that names the bound.
pub fn read_all(reader: impl Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(INPUT_BOUND + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > INPUT_BOUND {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {INPUT_BOUND} bytes (16 MiB), the bound on any input read whole"),
        ));
    }
    Ok(bytes)
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
    fn at_the_bound_is_read_past_it_is_refused() {
        let at = std::io::repeat(b'x').take(INPUT_BOUND);
        assert_eq!(read_all(at).unwrap().len() as u64, INPUT_BOUND);
        let error = read_all(std::io::repeat(0)).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("16 MiB"), "{error}");
    }
}
