//! Reading the files a user names (decks, matrices, graphs, data): regular files only.

use std::path::Path;

/// The text of the regular file at `path`. Anything else (a device such as `/dev/zero`, a
/// FIFO, a directory) is refused before it is opened: reading one could block or never end.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    std::fs::read_to_string(path)
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
        let _ = std::fs::remove_file(&file);
    }
}
