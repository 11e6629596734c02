//! The CUDA C sources of the kernels, and what the host knows of them.
//!
//! The sources are compiled at run time by NVRTC (at most one compile per kernel set, per
//! device, per process; the machine code is kept on disk for the next process). They are plain strings in every build, so that their entry points, their
//! parameter lists and the layout of the descriptor struct are checked by host tests even
//! where no CUDA toolkit exists. Each set starts with `kernels/common.cu` (the integer
//! types and helpers all use).

use crate::element::ScalarKind;

/// Star-forest gather (pack) and scatter (unpack with an operation) kernels.
pub const SF_SRC: &str = concat!(
    include_str!("kernels/common.cu"),
    include_str!("kernels/sf.cu")
);
/// Boundary kernels in one: pack, unpack, restriction, prolongation, physical fill, and the
/// flux correction's restriction and setting of face fluxes.
pub const HALO_SRC: &str = concat!(
    include_str!("kernels/common.cu"),
    include_str!("kernels/halo.cu")
);
/// Finite-volume advection: face fluxes, the conservative update of every block, and the
/// refinement measures.
pub const ADVECT_SRC: &str = concat!(
    include_str!("kernels/common.cu"),
    include_str!("kernels/advect.cu")
);

/// A set of kernels compiled together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelSet {
    /// [`SF_SRC`]
    Sf,
    /// [`HALO_SRC`]
    Halo,
    /// [`ADVECT_SRC`]
    Advect,
}

impl KernelSet {
    /// Every set.
    pub const ALL: [KernelSet; 3] = [KernelSet::Sf, KernelSet::Halo, KernelSet::Advect];

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Sf => "sf",
            KernelSet::Halo => "halo",
            KernelSet::Advect => "advect",
        }
    }

    /// Its CUDA C source.
    pub fn source(self) -> &'static str {
        match self {
            KernelSet::Sf => SF_SRC,
            KernelSet::Halo => HALO_SRC,
            KernelSet::Advect => ADVECT_SRC,
        }
    }

    /// The entry points the host launches from this set.
    pub fn entry_points(self) -> Vec<String> {
        match self {
            KernelSet::Sf => {
                let mut v = Vec::new();
                for kind in SF_KINDS {
                    for t in ScalarKind::ALL {
                        v.push(format!("sh_{kind}_{}", t.suffix()));
                    }
                }
                v.extend(["sh_fill_b32", "sh_fill_b64"].map(String::from));
                v
            }
            KernelSet::Halo => HALO_KERNELS.map(String::from).to_vec(),
            KernelSet::Advect => ADVECT_KERNELS.map(String::from).to_vec(),
        }
    }
}

/// The per-type star-forest kernel families.
pub const SF_KINDS: [&str; 5] = [
    "gather_box",
    "gather_list",
    "scatter_box",
    "scatter_list",
    "scatter_list_atomic",
];

/// The boundary kernels.
pub const HALO_KERNELS: [&str; 7] = [
    "sh_halo_pack",
    "sh_halo_unpack",
    "sh_restrict",
    "sh_prolongate",
    "sh_physical",
    "sh_flux_restrict",
    "sh_flux_set",
];

/// The advection kernels.
pub const ADVECT_KERNELS: [&str; 3] = ["sh_adv_flux", "sh_adv_update", "sh_adv_refine_measure"];

/// The kind of one kernel parameter, as the host passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// A device pointer (8 bytes).
    Ptr,
    /// `unsigned long long`
    U64,
    /// `unsigned int`
    U32,
    /// `int`
    I32,
    /// `double`
    F64,
}

/// The most parameters a kernel may take: a launch passes them from a fixed array (the
/// advection update has 19).
pub const MAX_ARGS: usize = 24;

/// Every `extern "C" __global__` function of `src` with its parameter kinds, in source order.
/// A parameter of a type the host cannot pass is an error naming it.
pub fn signatures(src: &str) -> Result<Vec<(String, Vec<ArgKind>)>, String> {
    const MARK: &str = "extern \"C\" __global__ void ";
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find(MARK) {
        rest = &rest[at + MARK.len()..];
        let open = rest.find('(').ok_or("kernel without a parameter list")?;
        let close = rest
            .find(')')
            .ok_or("kernel with an unclosed parameter list")?;
        let name = rest[..open].trim().to_string();
        let params = &rest[open + 1..close];
        let mut kinds = Vec::new();
        for p in params.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            kinds.push(param_kind(p).ok_or_else(|| format!("{name}: parameter `{p}`"))?);
        }
        out.push((name, kinds));
        rest = &rest[close..];
    }
    Ok(out)
}

fn param_kind(p: &str) -> Option<ArgKind> {
    if p.contains('*') {
        return Some(ArgKind::Ptr);
    }
    let ty: Vec<&str> = p.split_whitespace().collect();
    let ty = ty[..ty.len().saturating_sub(1)].join(" ");
    Some(match ty.as_str() {
        "u64" | "unsigned long long" => ArgKind::U64,
        "u32" | "unsigned int" => ArgKind::U32,
        "int" => ArgKind::I32,
        "double" => ArgKind::F64,
        _ => return None,
    })
}

/// The fields of `struct NAME { ... };` in `src` as (name, size in bytes, count), for the
/// scalar types the kernels use (`u64`, `u32`).
pub fn struct_fields(src: &str, name: &str) -> Option<Vec<(String, usize, usize)>> {
    let head = format!("struct {name} {{");
    let body = &src[src.find(&head)? + head.len()..];
    let body = &body[..body.find("};")?];
    let mut out = Vec::new();
    for decl in body.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let (ty, field) = decl.rsplit_once(' ')?;
        let size = match ty.trim() {
            "u64" | "unsigned long long" => 8,
            "u32" | "unsigned int" => 4,
            _ => return None,
        };
        let (field, count) = match field.split_once('[') {
            Some((f, n)) => (f, n.trim_end_matches(']').parse().ok()?),
            None => (field, 1),
        };
        out.push((field.to_string(), size, count));
    }
    Some(out)
}

/// C layout of `fields`: (name, offset) of each, and the struct's size.
pub fn c_layout(fields: &[(String, usize, usize)]) -> (Vec<(String, usize)>, usize) {
    let (mut off, mut align) = (0usize, 1usize);
    let mut out = Vec::new();
    for (name, size, count) in fields {
        off = off.next_multiple_of(*size);
        align = align.max(*size);
        out.push((name.clone(), off));
        off += size * count;
    }
    (out, off.next_multiple_of(align))
}

/// The value of `#define NAME value` in `src`.
pub fn define(src: &str, name: &str) -> Option<u64> {
    let head = format!("#define {name} ");
    let line = src.lines().find(|l| l.starts_with(&head))?;
    line[head.len()..].trim().trim_end_matches('u').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_declared_once_with_host_passable_parameters() {
        for set in KernelSet::ALL {
            let sigs = signatures(set.source()).unwrap();
            for name in set.entry_points() {
                let n = sigs.iter().filter(|(s, _)| *s == name).count();
                assert_eq!(n, 1, "{} kernels: `{name}` declared {n} times", set.name());
            }
            assert_eq!(sigs.len(), set.entry_points().len(), "{}", set.name());
            for (name, kinds) in &sigs {
                assert!(
                    kinds.len() <= MAX_ARGS,
                    "`{name}` takes {} parameters",
                    kinds.len()
                );
            }
        }
    }

    #[test]
    fn kernels_of_one_family_share_a_parameter_list() {
        let sigs = signatures(SF_SRC).unwrap();
        let of = |n: &str| sigs.iter().find(|(s, _)| s == n).unwrap().1.clone();
        use ArgKind::*;
        for t in ScalarKind::ALL.map(ScalarKind::suffix) {
            let gb = [Ptr, Ptr, U64, U64, U64, U64, U64, U64, U64, U64];
            assert_eq!(of(&format!("sh_gather_box_{t}")), gb);
            assert_eq!(
                of(&format!("sh_gather_list_{t}")),
                [Ptr, Ptr, U64, U64, U64, Ptr]
            );
            let sb = [Ptr, U64, Ptr, U64, U64, I32, U64, U64, U64, U64, U64];
            assert_eq!(of(&format!("sh_scatter_box_{t}")), sb);
            let sl = [Ptr, U64, Ptr, U64, U64, I32, Ptr];
            assert_eq!(of(&format!("sh_scatter_list_{t}")), sl);
            assert_eq!(of(&format!("sh_scatter_list_atomic_{t}")), sl);
        }
    }

    #[test]
    fn the_parser_refuses_what_the_host_cannot_pass() {
        let bad = "extern \"C\" __global__ void k(float x) {}";
        assert!(signatures(bad).unwrap_err().contains("float x"));
        let ok = "extern \"C\" __global__ void k(const double *a, u64 n, int op) {}";
        assert_eq!(
            signatures(ok).unwrap(),
            [(
                "k".to_string(),
                vec![ArgKind::Ptr, ArgKind::U64, ArgKind::I32]
            )]
        );
    }

    /// Without NVRTC, a host C++ compiler checks the sources' syntax and types against
    /// stand-ins for CUDA's built-ins (with CUDA's overload sets of the atomics). Skipped,
    /// saying so, where no `c++` is installed.
    #[test]
    fn sources_compile_as_host_cpp_against_cuda_stand_ins() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let prelude = include_str!("kernels/host_check.h");
        for set in KernelSet::ALL {
            let child = Command::new("c++")
                .args([
                    "-std=c++17",
                    "-fsyntax-only",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-x",
                    "c++",
                    "-",
                ])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let Ok(mut child) = child else {
                eprintln!("no host c++ compiler: kernel syntax not checked");
                return;
            };
            let src = format!("{prelude}\n{}", set.source());
            child
                .stdin
                .take()
                .unwrap()
                .write_all(src.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{} kernels:\n{}",
                set.name(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Runs the kernels serially on the host (one block of one thread, CUDA built-ins emulated)
    /// on small cases with known answers. Skipped, saying so, where no `c++` is installed.
    #[test]
    fn kernels_emulated_on_the_host_give_the_known_answers() {
        let Some(emu) =
            super::super::emulate::Emulator::build(include_str!("kernels/host_emulate_test.cpp"))
                .unwrap()
        else {
            eprintln!("no host c++ compiler: kernels not emulated");
            return;
        };
        if let Err(e) = emu.run(&[]) {
            panic!("{e}");
        }
    }

    #[test]
    fn op_codes_and_flags_are_defined_in_the_sources() {
        assert_eq!(define(SF_SRC, "SH_OP_REPLACE"), Some(0));
        assert_eq!(define(SF_SRC, "SH_OP_BXOR"), Some(9));
        assert_eq!(define(HALO_SRC, "SH_FLAG_ALLOCATED"), Some(2));
        assert_eq!(define(HALO_SRC, "SH_PROLONG_MINMOD"), Some(2));
        assert_eq!(define(HALO_SRC, "SH_FLAG_NORMAL0"), Some(32));
        assert_eq!(define(HALO_SRC, "NOPE"), None);
        assert_eq!(define(ADVECT_SRC, "SH_LIMIT_NONE"), Some(0));
        assert_eq!(define(ADVECT_SRC, "SH_LIMIT_MC"), Some(2));
        assert_eq!(define(ADVECT_SRC, "SH_MEASURE_THREADS"), Some(256));
    }
}
