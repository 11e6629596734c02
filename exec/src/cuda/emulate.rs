//! The kernels run on the host, for tests where no GPU exists: every kernel source, with the
//! CUDA built-ins emulated (blocks one after another, of one thread or, under `sh_run_block`,
//! of many threads with `__syncthreads` a barrier), compiled by the host's C++
//! compiler together with a test's own `main`. `-ffp-contract=off` keeps every
//! floating-point expression rounding as NVRTC's `--fmad=false` does, so the kernels'
//! arithmetic can be compared with the host code's bit for bit.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::desc::HaloDesc;
use super::kernels::{ADVECT_SRC, HALO_SRC, SF_SRC};

/// The emulation prelude: CUDA built-ins for a host compiler, and `sh_read`/`sh_write` to move
/// binary values through standard input and output.
pub const PRELUDE: &str = include_str!("kernels/host_emulate.h");

/// How the host's `c++` builds emulated kernels, here and in the emulated driver
/// (`scripts/emulated-gpu` hands the same file to it): C++20, with the alignment sanitizer
/// fatal, since a misaligned access faults on a GPU.
pub const CXX_FLAGS: &str = include_str!("kernels/host_cxx_flags");

/// A program of the kernel sources and a test's `main`, built by the host's `c++`.
#[derive(Debug)]
pub struct Emulator {
    exe: PathBuf,
}

impl Emulator {
    /// Builds [`PRELUDE`], the three kernel sets and `main_src`; `Ok(None)` where no `c++`
    /// is installed (an error instead when `STARHALO_EMULATE=require`, as `make test` sets),
    /// `Err` with the compiler's messages where the build fails.
    pub fn build(main_src: &str) -> Result<Option<Self>, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let exe = std::env::temp_dir().join(format!(
            "starhalo_kernel_emu_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let src = [PRELUDE, SF_SRC, HALO_SRC, ADVECT_SRC, main_src].join("\n");
        let child = Command::new("c++")
            .args(CXX_FLAGS.split_whitespace())
            .args(["-x", "c++", "-", "-o"])
            .arg(&exe)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match std::env::var("STARHALO_EMULATE").as_deref() {
                    Ok("require") => Err("no c++ compiler, and STARHALO_EMULATE=require".into()),
                    _ => Ok(None),
                };
            }
            Err(e) => return Err(format!("cannot run c++: {e}")),
        };
        let mut stdin = child.stdin.take().ok_or("no stdin for c++")?;
        stdin.write_all(src.as_bytes()).map_err(|e| e.to_string())?;
        drop(stdin);
        let built = child.wait_with_output().map_err(|e| e.to_string())?;
        if !built.status.success() {
            return Err(String::from_utf8_lossy(&built.stderr).into_owned());
        }
        Ok(Some(Self { exe }))
    }

    /// Runs the program with `input` on its standard input; its standard output, or what it
    /// printed when it exits non-zero.
    pub fn run(&self, input: &[u8]) -> Result<Vec<u8>, String> {
        let mut child = Command::new(&self.exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        // A program that stops early closes its input: its exit status and output say why.
        let _ = stdin.write_all(input);
        drop(stdin);
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.exe);
    }
}

/// `values` as the native-endian bytes `sh_read` takes.
pub fn to_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// The values `sh_write` wrote.
pub fn from_bytes(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// `descs` as the bytes of the `sh_bnd_info` array the kernels read.
pub fn desc_bytes(descs: &[HaloDesc]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(descs));
    for d in descs {
        let words = [
            d.block, d.var, d.s[0], d.s[1], d.s[2], d.e[0], d.e[1], d.e[2],
        ];
        for w in words.into_iter().chain([d.buf_offset]) {
            out.extend(w.to_ne_bytes());
        }
        out.extend(d.flags.to_ne_bytes());
        out.extend(d.pad.to_ne_bytes());
    }
    out
}

/// Reproducible test values in (-1, 1) from `seed`, not multiples of a power of two (so
/// that a sum in another order rounds differently).
pub fn test_values(mut seed: u64) -> impl FnMut() -> f64 {
    move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) % 2_000_003) as f64 / 1_000_001.5 - 1.0
    }
}
