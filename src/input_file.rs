//! Reading the files a user names (decks, matrices, graphs, data): regular files only.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The files every rank reads for itself, each with the CRC-32 of its contents, in the order
/// read: ranks compare them ([`crate::run::collective::same_inputs`]), since ranks given
/// different contents under one name (node-local copies) would set up different runs and
/// wait on each other forever.
static READ_BY_EVERY_RANK: Mutex<Vec<(PathBuf, u32)>> = Mutex::new(Vec::new());

/// Notes that this rank read `contents` from `path` (see [`READ_BY_EVERY_RANK`]).
pub fn note_read(path: &Path, crc: u32) {
    let mut read = READ_BY_EVERY_RANK.lock().unwrap_or_else(|e| e.into_inner());
    read.push((path.to_path_buf(), crc));
}

/// The files noted by [`note_read`] so far.
pub fn read_so_far() -> Vec<(PathBuf, u32)> {
    READ_BY_EVERY_RANK
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// The line (from 1) of byte `at` of a file's `bytes`.
pub fn line_at(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The text of the regular file at `path`. Anything else (a device such as `/dev/zero`, a
/// FIFO, a directory) is refused before it is opened: reading one could block or never end.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    String::from_utf8(std::fs::read(path)?).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = line_at(bytes, at);
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {line}: not UTF-8 text (byte 0x{:02x})", bytes[at]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read() {
        for special in ["/dev/zero", "/dev/null", "/"] {
            let e = read_text(Path::new(special)).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file", "{special}");
        }
        let e = read_text(Path::new("/nonexistent/deck.yaml")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let file = std::env::temp_dir().join(format!("read_text_{}", std::process::id()));
        std::fs::write(&file, "nx1: 8\n").unwrap();
        assert_eq!(read_text(&file).unwrap(), "nx1: 8\n");
        // Latin-1 `é` on the third line.
        std::fs::write(&file, b"a: 1\nb: 2\n# caf\xe9\n").unwrap();
        let e = read_text(&file).unwrap_err();
        assert_eq!(e.to_string(), "line 3: not UTF-8 text (byte 0xe9)");
        let _ = std::fs::remove_file(&file);
    }
}
