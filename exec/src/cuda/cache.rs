//! Compiled kernels kept on disk between processes, as the driver's own JIT cache keeps PTX
//! it compiled: NVRTC takes seconds per kernel set, and every rank of every run would
//! otherwise compile the same sources again.
//!
//! An entry is the machine code (CUBIN) of one kernel set for one architecture, named by a
//! hash of everything that decides it: the source, the NVRTC options and NVRTC's version.
//! The folder is `STARHALO_KERNEL_CACHE` when set (empty: no cache), else
//! `$XDG_CACHE_HOME/starhalo/kernels` or `$HOME/.cache/starhalo/kernels`. Entries are written
//! whole (a new temporary file renamed into place), so ranks that compile at once never read
//! a partial one. The cache is only ever a shortcut: a folder that cannot be made or written,
//! an NVRTC that does not say its version, or an entry the driver refuses, means compiling
//! as if it were not there. Only PTX (for a GPU newer than the NVRTC) is never kept. The
//! driver runs whatever machine code the folder holds: point it only at a folder that no
//! one else can write.

use std::ffi::OsString;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Fnv;

/// The cache folder, or `None` when caching is off or no folder can be named.
pub(crate) fn folder() -> Option<PathBuf> {
    folder_from(|k| std::env::var_os(k))
}

fn folder_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(v) = var("STARHALO_KERNEL_CACHE") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let set = |k| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = set("XDG_CACHE_HOME").or_else(|| set("HOME").map(|h| h.join(".cache")))?;
    Some(base.join("starhalo").join("kernels"))
}

/// The entry of kernel set `set` compiled from `source` with `options` by NVRTC
/// `version`.
pub(crate) fn entry(
    folder: &Path,
    set: &str,
    source: &str,
    options: &[String],
    version: (i32, i32),
) -> PathBuf {
    let mut h = Fnv::default();
    h.write(source.as_bytes());
    for o in options {
        h.write(&[0]);
        h.write(o.as_bytes());
    }
    h.write(format!("\0nvrtc {}.{}", version.0, version.1).as_bytes());
    folder.join(format!("{set}-{:016x}.cubin", h.finish()))
}

/// The entry's bytes, if it is there.
pub(crate) fn read(entry: &Path) -> Option<Vec<u8>> {
    std::fs::read(entry).ok().filter(|b| !b.is_empty())
}

/// Stores `image` as `entry`, creating the folder; a failure leaves nothing behind. The
/// temporary file is new (never one another writer has open: two devices of one process,
/// or processes with the same id on the nodes sharing the folder).
pub(crate) fn write(entry: &Path, image: &[u8]) {
    use std::io::Write as _;
    static N: AtomicUsize = AtomicUsize::new(0);
    let Some(dir) = entry.parent() else { return };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let tmp = entry.with_extension(format!(
        "tmp{}.{}.{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let stored = std::fs::create_dir_all(dir)
        .and_then(|()| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.write_all(image)
        })
        .and_then(|()| std::fs::rename(&tmp, entry));
    if stored.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_the_variable_else_the_user_cache() {
        fn env<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            |k| pairs.iter().find(|p| p.0 == k).map(|p| OsString::from(p.1))
        }
        let home = [("HOME", "/h")];
        assert_eq!(
            folder_from(env(&home)),
            Some("/h/.cache/starhalo/kernels".into())
        );
        let xdg = [("HOME", "/h"), ("XDG_CACHE_HOME", "/x")];
        assert_eq!(folder_from(env(&xdg)), Some("/x/starhalo/kernels".into()));
        let set = [("HOME", "/h"), ("STARHALO_KERNEL_CACHE", "/k")];
        assert_eq!(folder_from(env(&set)), Some("/k".into()));
        let off = [("HOME", "/h"), ("STARHALO_KERNEL_CACHE", "")];
        assert_eq!(folder_from(env(&off)), None);
        assert_eq!(folder_from(env(&[])), None);
    }

    #[test]
    fn an_entry_is_named_by_source_options_and_nvrtc_version() {
        let dir = Path::new("/c");
        let opts = ["--gpu-architecture=sm_90".to_string()];
        let e = entry(dir, "halo", "src", &opts, (12, 9));
        assert_eq!(e, entry(dir, "halo", "src", &opts, (12, 9)));
        assert!(e.starts_with(dir) && e.to_string_lossy().ends_with(".cubin"));
        for other in [
            entry(dir, "halo", "src ", &opts, (12, 9)),
            entry(
                dir,
                "halo",
                "src",
                &["--gpu-architecture=sm_80".into()],
                (12, 9),
            ),
            entry(dir, "halo", "src", &opts, (13, 0)),
            entry(dir, "sf", "src", &opts, (12, 9)),
            // Option boundaries count: ["ab"] is not ["a", "b"].
            entry(dir, "halo", "src", &["a".into(), "b".into()], (12, 9)),
        ] {
            assert_ne!(e, other);
        }
        assert_ne!(
            entry(dir, "halo", "src", &["ab".into()], (12, 9)),
            entry(dir, "halo", "src", &["a".into(), "b".into()], (12, 9))
        );
    }

    #[test]
    fn entries_are_stored_whole_and_a_bad_folder_is_no_cache() {
        let dir = std::env::temp_dir().join(format!("starhalo_cache_test_{}", std::process::id()));
        let e = entry(&dir.join("sub"), "sf", "src", &[], (12, 9));
        assert_eq!(read(&e), None);
        write(&e, b"cubin bytes");
        assert_eq!(read(&e).as_deref(), Some(&b"cubin bytes"[..]));
        // Nothing else is left in the folder (the temporary file was renamed).
        assert_eq!(std::fs::read_dir(e.parent().unwrap()).unwrap().count(), 1);
        // A folder under a file cannot be made: the write is dropped, nothing panics.
        let under_file = entry(&e.join("x"), "sf", "src", &[], (12, 9));
        write(&under_file, b"x");
        assert_eq!(read(&under_file), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
