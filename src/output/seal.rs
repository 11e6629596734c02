//! The seal of a restart file: the file's length and a CRC-32 of every byte after HDF5's user
//! block, written into that block once the file is complete, so that `-r` finds any damaged or edited byte before
//! libhdf5 parses the file. libhdf5 trusts its metadata: one flipped byte in a heap or a
//! B-tree can make it loop forever or crash, not fail.
//!
//! HDF5 tools and readers (h5py, yt, Parthenon's scripts) skip the user block: a sealed file
//! is an ordinary HDF5 file to them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes of the user block (HDF5 wants a power of two of at least 512).
pub const USER_BLOCK: u64 = 512;

/// The user block's first line.
const MAGIC: &str = "starhalo restart file";

/// The signature an HDF5 file without a user block starts with.
const HDF5_SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";

/// Why a file's seal does not hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SealError {
    /// An HDF5 file without a user block: a `.phdf` output, or another program's file.
    #[error("not a restart file of starhalo run (an HDF5 file without its seal: restart files come from file_type: rst outputs of this version)")]
    Unsealed,
    /// The first bytes are neither a seal nor HDF5's signature.
    #[error("not a restart file of starhalo run (its first {USER_BLOCK} bytes are not its seal)")]
    NotSealed,
    /// The seal is there, the rest of the file does not match it.
    #[error(
        "the file does not match its seal ({0}): it is damaged or was changed after it was written"
    )]
    Broken(String),
    /// The file could not be read.
    #[error("{0}")]
    Io(String),
}

/// Writes the seal of the complete HDF5 file at `path`, created with a user block of
/// [`USER_BLOCK`] bytes (checked: the seal must not overwrite HDF5's superblock).
pub fn seal(path: &Path) -> std::io::Result<()> {
    let mut f = File::options().read(true).write(true).open(path)?;
    let mut signature = [0u8; HDF5_SIGNATURE.len()];
    f.seek(SeekFrom::Start(USER_BLOCK))?;
    f.read_exact(&mut signature)?;
    if signature != HDF5_SIGNATURE {
        return Err(std::io::Error::other(
            "no HDF5 superblock after the user block to seal",
        ));
    }
    let (crc, len) = crc_after_user_block(&mut f)?;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&block(crc, len))?;
    f.sync_data()
}

/// The user block of a file of `len` bytes whose bytes after the block have CRC-32 `crc`.
fn block(crc: u32, len: u64) -> Vec<u8> {
    let text = format!("{MAGIC}\ncrc32 {crc:08x}\nbytes {len}\n");
    let mut block = vec![0u8; USER_BLOCK as usize];
    block[..text.len()].copy_from_slice(text.as_bytes());
    block
}

/// Checks the seal of the file at `path`; returns its CRC-32.
pub fn check(path: &Path) -> Result<u32, SealError> {
    let io = |e: std::io::Error| SealError::Io(e.to_string());
    let mut f = File::open(path).map_err(io)?;
    let mut stored = Vec::with_capacity(USER_BLOCK as usize);
    Read::by_ref(&mut f)
        .take(USER_BLOCK)
        .read_to_end(&mut stored)
        .map_err(io)?;
    if stored.starts_with(HDF5_SIGNATURE) {
        return Err(SealError::Unsealed);
    }
    let text = stored.split(|&b| b == 0).next().unwrap_or_default();
    let text = std::str::from_utf8(text).map_err(|_| SealError::NotSealed)?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(SealError::NotSealed);
    }
    let mut field = |key: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .ok_or_else(|| SealError::Broken(format!("no `{key}` line")))
    };
    let crc = u32::from_str_radix(field("crc32")?, 16)
        .map_err(|_| SealError::Broken("a `crc32` that is not hexadecimal".into()))?;
    let len: u64 = field("bytes")?
        .parse()
        .map_err(|_| SealError::Broken("a `bytes` that is not a number".into()))?;
    // Byte for byte as written: no other spelling of the numbers, nothing after the text.
    if stored != block(crc, len) {
        return Err(SealError::Broken("its block is not as written".into()));
    }
    let (found, actual) = crc_after_user_block(&mut f).map_err(io)?;
    if actual != len || len <= USER_BLOCK {
        return Err(SealError::Broken(format!(
            "{actual} bytes, the seal says {len}"
        )));
    }
    if found != crc {
        return Err(SealError::Broken(format!(
            "CRC-32 {found:08x}, the seal says {crc:08x}"
        )));
    }
    Ok(crc)
}

/// CRC-32 of the bytes after the user block, and the file's length.
fn crc_after_user_block(f: &mut File) -> std::io::Result<(u32, u64)> {
    f.seek(SeekFrom::Start(USER_BLOCK))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf)? {
            0 => break,
            n => crc.update(&buf[..n]),
        }
    }
    Ok((crc.finalize(), f.stream_position()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_finds_every_changed_byte_and_length() {
        let dir = std::env::temp_dir().join(format!("starhalo-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.rhdf");
        let body: Vec<u8> = HDF5_SIGNATURE
            .iter()
            .copied()
            .chain((0..5000u32).map(|i| (i * 7 % 251) as u8))
            .collect();
        let write = |bytes: &[u8]| std::fs::write(&path, bytes).unwrap();
        write(&[vec![0; USER_BLOCK as usize], body.clone()].concat());
        seal(&path).unwrap();
        let crc = check(&path).unwrap();
        assert_eq!(crc, crc32fast::hash(&body));
        let sealed = std::fs::read(&path).unwrap();
        assert!(sealed.starts_with(b"starhalo restart file\ncrc32 "));
        // Every byte counts, the block's too: an upper-case hex digit (the same number), the
        // first zero after the text.
        let text_end = sealed.iter().position(|&b| b == 0).unwrap();
        let hex_letter = 28
            + sealed[28..36]
                .iter()
                .position(u8::is_ascii_lowercase)
                .unwrap();
        for (at, bit) in [
            (0, 4),
            (30, 4),
            (hex_letter, 0x20),
            (text_end, 0x20),
            (511, 4),
        ]
        .into_iter()
        .chain([512, 3000, sealed.len() - 1].map(|at| (at, 4)))
        {
            let mut bad = sealed.clone();
            bad[at] ^= bit;
            write(&bad);
            assert!(check(&path).is_err(), "byte {at} flipped");
        }
        // Not a file to seal: no HDF5 superblock after the user block.
        write(&[0u8; 600]);
        assert!(seal(&path).is_err());
        write(&sealed[..sealed.len() - 1]);
        assert!(matches!(check(&path), Err(SealError::Broken(m)) if m.contains("bytes")));
        write(&[&sealed[..], b"x"].concat());
        assert!(check(&path).is_err(), "a byte appended");
        write(&[HDF5_SIGNATURE, &body].concat());
        assert_eq!(check(&path), Err(SealError::Unsealed));
        write(b"");
        assert_eq!(check(&path), Err(SealError::NotSealed));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
