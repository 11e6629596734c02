//! A CUDA device as the rest of starhalo uses it: a context, one stream, kernels compiled
//! once per process (and kept on disk between processes), events for ordering.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, LaunchConfig};
use cudarc::nvrtc::sys::nvrtcResult as NvrtcResult;
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use super::cache;
use super::error::CudaError;
use super::ffi::{self, Arg};
use super::kernels::{signatures, ArgKind, KernelSet};

/// Runs a cudarc call, turning a panic (a symbol missing from an old driver library) into
/// an error that names the call.
fn guarded<R>(call: &'static str, f: impl FnOnce() -> R) -> Result<R, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "cudarc panicked".into());
        CudaError::Driver {
            call,
            why: format!("{why} (is the driver older than CUDA 12.0?)"),
        }
    })
}

pub(crate) fn driver(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        why: e.to_string(),
    }
}

/// Kernels of one set, loaded on one device.
struct Compiled {
    _module: Arc<CudaModule>,
    sigs: HashMap<String, (Vec<ArgKind>, CudaFunction)>,
}

/// One GPU with its primary context and the stream all starhalo work on it goes to.
///
/// Obtain it with [`Device::for_local_rank`] (device = local rank mod device count),
/// [`Device::process_default`] or [`Device::open`]; each ordinal is opened once per process
/// and shared. Work is asynchronous on the device's stream: order it against other streams
/// with [`Device::record`] and [`Device::wait`], and call [`Device::synchronize`] (one stream
/// synchronisation) before handing a device buffer to MPI.
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    name: String,
    cc: (i32, i32),
    sets: [OnceLock<Result<Arc<Compiled>, CudaError>>; KernelSet::ALL.len()],
    /// Kernels launched so far (benchmarks report launches per exchange).
    launches: AtomicU64,
    /// Copies issued so far, between host and device or within the device.
    copies: AtomicU64,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Device({} `{}`, sm_{}{})",
            self.ordinal, self.name, self.cc.0, self.cc.1
        )
    }
}

/// An ordering point recorded on a device's stream.
#[derive(Debug)]
pub struct Event(CudaEvent);

impl Event {
    /// True once all work recorded before it has finished.
    pub fn is_complete(&self) -> Result<bool, CudaError> {
        // cudarc's query leaves the context as it finds it: on a thread new to the driver
        // there is none current.
        self.0
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        self.0.try_is_complete().map_err(driver("cuEventQuery"))
    }

    /// Blocks the calling thread until the recorded work has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.0.synchronize().map_err(driver("cuEventSynchronize"))
    }
}

fn registry() -> &'static Mutex<HashMap<usize, Arc<Device>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

/// The node-local rank from the usual launcher variables (Open MPI, MPICH/Hydra, MVAPICH,
/// Cray PALS, Flux, Slurm), 0 when none is set (then `STARHALO_CUDA_DEVICE` picks the device).
pub fn local_rank_from_env() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "PMI_LOCAL_RANK",
        "PALS_LOCAL_RANKID",
        "FLUX_TASK_LOCAL_ID",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
    .unwrap_or(0)
}

impl Device {
    /// Number of CUDA devices, or why there is none to use.
    pub fn count() -> Result<usize, CudaError> {
        ffi::driver_present()?;
        let n = guarded("cuDeviceGetCount", CudaContext::device_count)?.map_err(|e| {
            CudaError::NoDevice {
                why: format!("cuInit/cuDeviceGetCount: {e}"),
            }
        })?;
        match usize::try_from(n) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(CudaError::NoDevice {
                why: "the device count is 0".into(),
            }),
        }
    }

    /// The device for node-local rank `local_rank`: ordinal `local_rank % count`.
    pub fn for_local_rank(local_rank: usize) -> Result<Arc<Device>, CudaError> {
        let n = Self::count()?;
        Self::open(local_rank % n)
    }

    /// The device of this process: `STARHALO_CUDA_DEVICE` if set, else the local rank (from
    /// the launcher's variables) mod the device count. Chosen once; the choice (or the reason
    /// there is none) is remembered.
    pub fn process_default() -> Result<Arc<Device>, CudaError> {
        static DEFAULT: OnceLock<Result<Arc<Device>, CudaError>> = OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                match std::env::var("STARHALO_CUDA_DEVICE")
                    .ok()
                    .map(|v| v.trim().parse())
                {
                    Some(Ok(ordinal)) => Self::open(ordinal),
                    Some(Err(_)) => Err(CudaError::Invalid(
                        "STARHALO_CUDA_DEVICE is not a device number".into(),
                    )),
                    None => Self::for_local_rank(local_rank_from_env()),
                }
            })
            .clone()
    }

    /// For a test with device work: the process's device, or `None` where no device opens
    /// (nothing to check), unless `STARHALO_TEST_GPU=1` says there is one.
    #[cfg(test)]
    pub(crate) fn for_test() -> Option<Arc<Device>> {
        match Self::process_default() {
            Ok(d) => Some(d),
            Err(e) => {
                let told = std::env::var("STARHALO_TEST_GPU").as_deref() == Ok("1");
                assert!(!told, "STARHALO_TEST_GPU=1 but no device: {e}");
                None
            }
        }
    }

    /// [`process_default`](Self::process_default) with every kernel set compiled: the
    /// device a run launches on, with compilation errors found before any work starts.
    pub fn process_default_compiled() -> Result<Arc<Device>, CudaError> {
        let dev = Self::process_default()?;
        dev.compile_all()?;
        Ok(dev)
    }

    /// Device `ordinal`, opened once per process.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, CudaError> {
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = reg.get(&ordinal) {
            return Ok(d.clone());
        }
        let n = Self::count()?;
        if ordinal >= n {
            return Err(CudaError::Invalid(format!(
                "device {ordinal} requested, {n} present"
            )));
        }
        let ctx = guarded("cuDevicePrimaryCtxRetain", || CudaContext::new(ordinal))?
            .map_err(driver("cuDevicePrimaryCtxRetain"))?;
        ffi::manual_stream_ordering(&ctx);
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        let name = ctx.name().map_err(driver("cuDeviceGetName"))?;
        let cc = ctx
            .compute_capability()
            .map_err(driver("cuDeviceGetAttribute"))?;
        let dev = Arc::new(Device {
            ctx,
            stream,
            ordinal,
            name,
            cc,
            sets: Default::default(),
            launches: AtomicU64::new(0),
            copies: AtomicU64::new(0),
        });
        reg.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// Kernels launched on this device by this process so far.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// Copies (host to device, device to host, device to device) issued on this device by
    /// this process so far.
    pub fn copies(&self) -> u64 {
        self.copies.load(Ordering::Relaxed)
    }

    /// The device's stream, for a copy about to be issued on it (counted).
    pub(crate) fn copy_stream(&self) -> &Arc<CudaStream> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        &self.stream
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The (major, minor) version of the NVRTC library that compiles the kernels.
    pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
        ffi::nvrtc_version()
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits until all work issued to this device's stream has finished: call it once before
    /// handing a device buffer written by kernels to MPI.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// Records the work issued so far, for [`Device::wait`] on another device handle or for
    /// polling from the host.
    pub fn record(&self) -> Result<Event, CudaError> {
        self.stream
            .record_event(None)
            .map(Event)
            .map_err(driver("cuEventRecord"))
    }

    /// Makes later work on this device's stream wait for `event` (no host blocking).
    pub fn wait(&self, event: &Event) -> Result<(), CudaError> {
        self.stream
            .wait(&event.0)
            .map_err(driver("cuStreamWaitEvent"))
    }

    /// Compiles every kernel set now (otherwise each is compiled at its first launch).
    pub fn compile_all(&self) -> Result<(), CudaError> {
        for set in KernelSet::ALL {
            self.compiled(set)?;
        }
        Ok(())
    }

    fn compiled(&self, set: KernelSet) -> Result<Arc<Compiled>, CudaError> {
        self.sets[set as usize]
            .get_or_init(|| self.compile(set).map(Arc::new))
            .clone()
    }

    /// Virtual architectures to fall back on, newest first: the device's own, then older
    /// ones an older NVRTC may still know.
    fn archs(&self) -> Vec<String> {
        let own = self.cc.0 * 10 + self.cc.1;
        let mut v = vec![own];
        // 75 is the oldest that CUDA 13's NVRTC still compiles for.
        v.extend([90, 80, 75].into_iter().filter(|&a| a < own));
        v.into_iter().map(|a| format!("compute_{a}")).collect()
    }

    /// Compiles `set` to machine code for this device (`sm_XX`), or takes it from the disk
    /// cache ([`cache`]); when this NVRTC does not know the device (a GPU newer than the
    /// toolkit), to PTX for the newest virtual architecture it knows, which the driver
    /// compiles at load.
    fn compile(&self, set: KernelSet) -> Result<Compiled, CudaError> {
        ffi::nvrtc_present()?;
        let parsed = signatures(set.source()).map_err(CudaError::Invalid)?;
        let name = format!("starhalo_{}.cu", set.name());
        let sm = format!("sm_{}{}", self.cc.0, self.cc.1);
        let opts = [format!("--gpu-architecture={sm}"), "--fmad=false".into()];
        let entry = cache::folder()
            .zip(ffi::nvrtc_version().ok())
            .map(|(dir, version)| cache::entry(&dir, set.name(), set.source(), &opts, version));
        let cached = entry.as_deref().and_then(cache::read);
        let cached = cached.and_then(|cubin| self.load(Ptx::from_binary(cubin), &sm).ok());
        let module = match cached {
            Some(module) => module,
            None => match guarded("nvrtcCompileProgram", || {
                ffi::compile_cubin(set.source(), &name, &opts)
            })? {
                Ok(cubin) => {
                    if let Some(entry) = &entry {
                        cache::write(entry, &cubin);
                    }
                    self.load(Ptx::from_binary(cubin), &sm)?
                }
                Err((NvrtcResult::NVRTC_ERROR_INVALID_OPTION, _)) => {
                    self.compile_ptx(set, &name)?
                }
                Err((nvrtc, log)) => {
                    return Err(CudaError::Compile {
                        kernels: set.name(),
                        why: format!("{nvrtc:?} for {sm}"),
                        log,
                    })
                }
            },
        };
        let mut sigs = HashMap::new();
        for (name, kinds) in parsed {
            let f = module
                .load_function(&name)
                .map_err(driver("cuModuleGetFunction"))?;
            sigs.insert(name, (kinds, f));
        }
        Ok(Compiled {
            _module: module,
            sigs,
        })
    }

    /// PTX for the newest virtual architecture this NVRTC accepts.
    fn compile_ptx(&self, set: KernelSet, name: &str) -> Result<Arc<CudaModule>, CudaError> {
        let mut last = None;
        for arch in self.archs() {
            let opts = CompileOptions {
                fmad: Some(false),
                options: vec![format!("--gpu-architecture={arch}")],
                name: Some(name.to_string()),
                ..Default::default()
            };
            match guarded("nvrtcCompileProgram", || {
                compile_ptx_with_opts(set.source(), opts)
            })? {
                Ok(ptx) => return self.load(ptx, &arch),
                Err(e) => {
                    let invalid_arch = matches!(&e, CompileError::CompileError { nvrtc, .. }
                        if nvrtc.0 == NvrtcResult::NVRTC_ERROR_INVALID_OPTION);
                    last = Some(compile_error(set, &arch, e));
                    if !invalid_arch {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or(CudaError::Invalid("no architecture to compile for".into())))
    }

    fn load(&self, image: Ptx, arch: &str) -> Result<Arc<CudaModule>, CudaError> {
        self.ctx.load_module(image).map_err(|e| CudaError::Driver {
            call: "cuModuleLoadData",
            why: format!(
                "{e} (code for {arch}; a driver older than the NVRTC library rejects its PTX)"
            ),
        })
    }

    /// Launches kernel `name` of `set` over `grid` blocks of `block` threads, after checking
    /// `args` against the kernel's parameter list.
    pub(crate) fn launch(
        &self,
        set: KernelSet,
        name: &str,
        grid: u32,
        block: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let c = self.compiled(set)?;
        let (kinds, f) = c
            .sigs
            .get(name)
            .ok_or_else(|| CudaError::Invalid(format!("no kernel `{name}`")))?;
        // Compared without collecting: a launch allocates nothing.
        if !args.iter().map(Arg::kind).eq(kinds.iter().copied()) {
            let given: Vec<ArgKind> = args.iter().map(Arg::kind).collect();
            return Err(CudaError::Invalid(format!(
                "kernel `{name}` takes {kinds:?}, given {given:?}"
            )));
        }
        if args.len() > super::kernels::MAX_ARGS {
            return Err(CudaError::Invalid(format!(
                "kernel `{name}` takes {} parameters, more than the {} a launch passes",
                args.len(),
                super::kernels::MAX_ARGS
            )));
        }
        let cfg = LaunchConfig {
            grid_dim: (grid.max(1), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        self.launches.fetch_add(1, Ordering::Relaxed);
        ffi::launch(&self.stream, f, cfg, args).map_err(|e| CudaError::Driver {
            call: "cuLaunchKernel",
            why: format!("{name}: {e}"),
        })
    }
}

fn compile_error(set: KernelSet, arch: &str, e: CompileError) -> CudaError {
    match e {
        CompileError::CompileError { nvrtc, log, .. } => CudaError::Compile {
            kernels: set.name(),
            why: format!("{nvrtc} for {arch}"),
            log: log.to_string_lossy().into_owned(),
        },
        other => CudaError::Compile {
            kernels: set.name(),
            why: format!("{other} for {arch}"),
            log: String::new(),
        },
    }
}

/// Grid size for a grid-stride loop over `n` items with `block` threads per block.
pub(crate) fn grid_for(n: usize, block: u32) -> u32 {
    let blocks = n.div_ceil(block as usize).max(1);
    blocks.min(1 << 16) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_cover_small_and_cap_large() {
        assert_eq!(grid_for(0, 256), 1);
        assert_eq!(grid_for(257, 256), 2);
        assert_eq!(grid_for(usize::MAX / 2, 256), 1 << 16);
    }

    #[test]
    fn no_driver_is_a_clear_error_not_a_panic() {
        // On a machine with a GPU this opens it; without a driver it must say why.
        match Device::for_local_rank(0) {
            Ok(d) => assert!(!d.name().is_empty()),
            Err(e) => {
                assert!(e.is_unavailable(), "{e}");
                let s = e.to_string();
                if ffi::driver_present().is_err() {
                    assert!(matches!(e, CudaError::NoDriver { .. }), "{s}");
                    assert!(
                        s.contains("libcuda.so") && s.contains("NVIDIA driver"),
                        "{s}"
                    );
                }
            }
        }
        // The process default remembers the same answer.
        let a = Device::process_default().map(|d| d.ordinal());
        let b = Device::process_default().map(|d| d.ordinal());
        assert_eq!(a, b);
    }

    /// The driver's current context belongs to a thread: every path (copies, launches,
    /// frees) makes it current on the calling thread, so a device opened on one thread serves
    /// threads that have never called the driver. Where no device opens, there is nothing to
    /// check, unless `STARHALO_TEST_GPU=1` says there is one.
    #[test]
    fn a_device_serves_threads_that_did_not_open_it() {
        use crate::buffer::Buffer;
        let Some(dev) = Device::for_test() else {
            return;
        };
        let b = Buffer::<f64>::from_host_to(&dev, &[1.0, 2.0, 3.0]).unwrap();
        let b = std::thread::spawn(move || {
            let mut b = b;
            b.fill(4.5).unwrap();
            assert_eq!(b.to_vec().unwrap(), [4.5; 3]);
            b
        })
        .join()
        .unwrap();
        // Made and freed on threads new to the driver, then used here.
        let d = dev.clone();
        std::thread::spawn(move || {
            drop(b);
            drop(Buffer::<f64>::from_host_to(&d, &[2.0]).unwrap());
        })
        .join()
        .unwrap();
        let c = Buffer::<f64>::from_host_to(&dev, &[7.0]).unwrap();
        assert_eq!(c.to_vec().unwrap(), [7.0]);
        // An event recorded here is polled and waited for on a thread new to the driver.
        let ev = dev.record().unwrap();
        std::thread::spawn(move || {
            while !ev.is_complete().unwrap() {}
            ev.synchronize().unwrap();
        })
        .join()
        .unwrap();
    }

    /// Where NVRTC is (no GPU needed): every kernel set compiles to machine code for the
    /// architectures of current GPUs, with no fused multiply-add nor single-precision atomic
    /// add in its PTX (the host's rounding, subnormals kept), and an architecture NVRTC does
    /// not know is the status `compile` falls back on. Without NVRTC, asking for it is the
    /// clear error.
    #[test]
    fn kernels_compile_to_machine_code_where_nvrtc_is() {
        if let Err(e) = ffi::nvrtc_present() {
            assert!(matches!(e, CudaError::NoNvrtc { .. }), "{e}");
            eprintln!("no NVRTC library: kernel compilation not checked ({e})");
            return;
        }
        let (major, minor) = ffi::nvrtc_version().unwrap();
        eprintln!("compiling with NVRTC {major}.{minor}");
        assert!(major >= 12, "NVRTC {major}.{minor}");
        for set in KernelSet::ALL {
            // Architectures both CUDA 12's and CUDA 13's NVRTC know (13 dropped sm_70).
            for sm in ["sm_75", "sm_80", "sm_90"] {
                let opts = [format!("--gpu-architecture={sm}"), "--fmad=false".into()];
                let bin = ffi::compile_cubin(set.source(), "t.cu", &opts)
                    .unwrap_or_else(|(r, log)| panic!("{} for {sm}: {r:?}\n{log}", set.name()));
                assert_eq!(&bin[..4], b"\x7fELF", "{} for {sm}", set.name());
            }
            let opts = CompileOptions {
                fmad: Some(false),
                options: vec!["--gpu-architecture=compute_90".into()],
                ..Default::default()
            };
            let ptx = compile_ptx_with_opts(set.source(), opts).unwrap().to_src();
            assert!(
                !ptx.contains("fma."),
                "{} has fused multiply-adds",
                set.name()
            );
            // The GPU's single-precision atomic add flushes subnormals to zero.
            let f32_atomic_add = ptx.lines().map(str::trim_start).any(|l| {
                (l.starts_with("atom.") || l.starts_with("red.")) && l.contains(".add.f32")
            });
            assert!(!f32_atomic_add, "{} adds f32 atomically", set.name());
            let entry = ptx.matches(".entry").count();
            assert_eq!(
                entry,
                signatures(set.source()).unwrap().len(),
                "{}",
                set.name()
            );
        }
        let bogus = ["--gpu-architecture=sm_1".to_string()];
        let e = ffi::compile_cubin(KernelSet::Sf.source(), "t.cu", &bogus).unwrap_err();
        assert_eq!(e.0, NvrtcResult::NVRTC_ERROR_INVALID_OPTION);
    }
}
