// The CUDA driver and NVRTC, emulated on the host, for testing everything above the driver
// (device buffers, streams, events, staging, launches, MPI hand-over) where no GPU exists.
// Built as one shared library that `scripts/emulated-gpu` puts first on the library path as
// libcuda.so and libnvrtc.so; cudarc loads it as it would the real ones. Not a GPU: a test
// aid, whose device name says so.
//
// - "NVRTC" hands back the source as its "CUBIN" (behind a marker line); loading that module
//   compiles it with the host's c++ and the CUDA built-ins of host_emulate.h, as the kernel
//   unit tests do, into a shared object cached by source hash.
// - Device memory is host memory (from stream-ordered pools too). Work issued to a stream is
//   queued, and runs only when the host must see it: a stream or context synchronisation, an
//   event synchronisation or query (up to the event; a query first answers "not ready"
//   once), or a copy to pageable host memory (all host memory is taken as pageable). For
//   these calls that is the latest schedule CUDA's stream rules allow, so a missing
//   synchronisation shows up as stale values, not as luck. Frees are not synchronising, and
//   freed memory stays inaccessible: work still queued on it, or the host touching it, faults.
// - A call that needs a context fails on a thread where none is current, as with the driver;
//   launches keep to a GPU's grid and block limits; a misaligned access in a kernel stops
//   the process, where a GPU would fault.
// - Launches run blocks one after another, last first (a GPU promises no order), each of one
//   thread (every kernel strides over blockDim; races within a block are the kernel unit
//   tests' business), with the argument values copied at launch as the driver does.
// - Unless STARHALO_EMU_ORDER=0, a launch of more than one thread (but the atomic kernels')
//   runs twice from the same memory, one emulated block per thread of the launch (a
//   grid-stride loop then splits its items as the GPU's threads would), first block first,
//   then last first; where the memory its pointer arguments lie in differs between the two,
//   two threads or blocks race for one address (a non-atomic update of a repeated index,
//   overlapping boxes that write different values), which a GPU leaves to chance: the
//   process stops, naming the kernel. Each distinct launch is checked a few times only.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#ifndef SH_PRELUDE
#error "build with -DSH_PRELUDE=\"/path/to/host_emulate.h\""
#endif
#ifndef SH_KERNEL_FLAGS
#error "build with -DSH_KERNEL_FLAGS=\"$(cat kernels/host_cxx_flags)\""
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
enum : CUresult {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_IMAGE = 200,
    INVALID_CONTEXT = 201,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    NOT_READY = 600,
    CONTEXT_IS_DESTROYED = 709,
    UNKNOWN = 999,
};
static const char MARKER[] = "// starhalo host-emulated CUBIN\n";

namespace {
std::recursive_mutex mu;
using Lock = std::lock_guard<std::recursive_mutex>;

// Device memory: pages of one reserved range, never reused. A freed allocation becomes
// inaccessible, so a late access from the host (MPI still moving a freed buffer) faults.
// Under STARHALO_EMU_GUARD=1 the live ones are inaccessible too except while the emulated
// device itself works, so host code that dereferences a device address faults as it would
// with a GPU (only where no MPI is told it may move device memory).
const size_t PAGE = 4096, RESERVED = size_t(256) << 30, TOTAL = size_t(8) << 30;
// Reserved at the first allocation: the processes that only load the library (under
// LD_PRELOAD, every one the tests start) reserve nothing.
char *reserved = nullptr;
size_t bump = 0, allocated = 0;
std::map<CUdeviceptr, size_t> sizes;
// Allocations whose stream-ordered free is queued: freeing one again is an error at once.
std::set<CUdeviceptr> freeing;
const bool guard = [] {
    const char *v = getenv("STARHALO_EMU_GUARD");
    return v && *v == '1';
}();
int open_depth = 0;
size_t pages(size_t n) { return (n + PAGE - 1) / PAGE * PAGE; }
// A protection that cannot be set would leave the checks wrong either way: stop.
void set_prot(void *p, size_t n, int prot) {
    if (mprotect(p, pages(n), prot) != 0) {
        perror("host-emulated CUDA: mprotect");
        abort();
    }
}
// Opening makes the live allocations accessible, one call per run of them that lie back to
// back (a ping-pong opens a million times, its few buffers in one or two runs); freed pages
// stay inaccessible. Closing shuts the whole range at once.
void open_live() {
    char *run = nullptr;
    size_t len = 0;
    for (auto &[p, n] : sizes) {
        char *m = reinterpret_cast<char *>(p);
        if (run && run + len == m) {
            len += pages(n);
            continue;
        }
        if (run) set_prot(run, len, PROT_READ | PROT_WRITE);
        run = m;
        len = pages(n);
    }
    if (run) set_prot(run, len, PROT_READ | PROT_WRITE);
}
// Live device memory is accessible while one of these exists.
struct Open {
    Open() {
        if (guard && open_depth++ == 0) open_live();
    }
    ~Open() {
        if (guard && --open_depth == 0 && bump > 0) set_prot(reserved, bump, PROT_NONE);
    }
};

// One recording of an event: done once the work issued before it has run.
struct Mark {
    bool done = false;
    std::chrono::steady_clock::time_point at{};
};
using MarkPtr = std::shared_ptr<Mark>;

struct Stream {
    std::deque<std::function<void()>> queue;
    // Runs the queued work, all of it or up to `mark`.
    void flush(const MarkPtr &mark = nullptr) {
        if ((mark && mark->done) || queue.empty()) return;
        Open open;
        while (!queue.empty() && !(mark && mark->done)) {
            auto op = std::move(queue.front());
            queue.pop_front();
            op();
        }
    }
};
Stream null_stream;
// STARHALO_EMU_EAGER=1 runs work as it is issued: a failure that goes away then is a missing
// synchronisation, not a wrong kernel.
const bool eager = [] {
    const char *v = getenv("STARHALO_EMU_EAGER");
    return v && *v == '1';
}();
void enqueue(Stream *s, std::function<void()> op) {
    if (eager) {
        s->flush();
        Open open;
        op();
    } else {
        s->queue.push_back(std::move(op));
    }
}
Stream *of(void *s) { return s ? static_cast<Stream *>(s) : &null_stream; }

// An event's latest recording (a new one leaves earlier waits on the old mark, as in CUDA).
struct Event {
    Stream *stream = nullptr;
    MarkPtr mark = std::make_shared<Mark>(Mark{true, {}});
    bool told_not_ready = false;
};

struct Module {
    void *so;
    // Runs a closure over `grid` blocks of one thread, last block first (or, `forward`, first
    // first); `last` frees the closure.
    void (*exec)(void *closure, unsigned grid, int forward, int last);
};
struct Function {
    Module *module;
    void *(*bind)(void **params);
    // Writes up to `cap` of the pointer arguments behind `params` to `out`; returns how many
    // the kernel takes.
    int (*ptrs)(void **params, unsigned long long *out, int cap);
    std::string name;
};
// The block-order check (see the top of this file).
const bool order_check = [] {
    const char *v = getenv("STARHALO_EMU_ORDER");
    return !(v && *v == '0');
}();
// How many times one launch (kernel, shape and buffers) is checked: a benchmark's loop
// repeats one launch thousands of times, and copying its memory at each would cost more
// than all the tests that check.
constexpr int order_check_repeats = 4;
std::map<std::string, int> order_checked;

std::vector<Stream *> streams{&null_stream};
void flush_all() {
    for (Stream *s : streams) s->flush();
}
// The primary context, the only one. As with the driver, each thread has its own stack of
// current contexts, empty at first: a call that needs a context where none is current fails
// (cudarc binds the context before its calls; code that calls the driver itself must too).
int ctx_token = 1;
thread_local std::vector<void *> ctx_stack;
std::atomic<int> retained{0};
CUresult need_ctx() {
    if (ctx_stack.empty()) return INVALID_CONTEXT;
    return retained > 0 ? OK : CONTEXT_IS_DESTROYED;
}
#define NEED_CTX                                                                              \
    do {                                                                                      \
        if (CUresult r = need_ctx()) return r;                                                \
    } while (0)

// FNV-1a: a stable name for a compiled source.
unsigned long long fnv(const std::string &s) {
    unsigned long long h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// The kernel sources with the emulated built-ins, a binder per kernel (copies the argument
// values behind `params` into a closure) and `sh_emu_exec` (runs a closure over the grid).
// The prelude is copied in, so that the cache key covers its contents.
// The output of `cmd` (empty when it cannot run).
std::string output_of(const char *cmd) {
    std::string out;
    if (FILE *f = popen(cmd, "r")) {
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
        pclose(f);
    }
    return out;
}

std::string host_program(const std::string &src) {
    std::string prelude;
    if (FILE *f = fopen(SH_PRELUDE, "r")) {
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) prelude.append(buf, n);
        fclose(f);
    }
    if (prelude.empty()) fprintf(stderr, "host-emulated CUDA: cannot read %s\n", SH_PRELUDE);
    std::string out = prelude + "\n#include <functional>\n#include <tuple>\n"
                      "#include <type_traits>\n#include <utility>\n#line 1 \"kernels\"\n" + src;
    out += R"(
template <typename... A, std::size_t... I>
static void *sh_emu_bind(void (*f)(A...), void **p, std::index_sequence<I...>) {
    auto args = std::make_tuple(*static_cast<std::decay_t<A> *>(p[I])...);
    return new std::function<void()>([f, args] { std::apply(f, args); });
}
template <typename... A> static void *sh_emu_bind(void (*f)(A...), void **p) {
    return sh_emu_bind(f, p, std::index_sequence_for<A...>{});
}
template <typename T> static void sh_emu_ptr(void *p, unsigned long long *out, int cap, int &n) {
    if constexpr (std::is_pointer_v<T>) {
        if (n < cap) out[n] = (unsigned long long)*static_cast<T *>(p);
        ++n;
    }
}
template <typename... A, std::size_t... I>
static int sh_emu_ptrs(void (*)(A...), void **p, unsigned long long *out, int cap, std::index_sequence<I...>) {
    int n = 0;
    (sh_emu_ptr<std::decay_t<A>>(p[I], out, cap, n), ...);
    return n;
}
template <typename... A> static int sh_emu_ptrs(void (*f)(A...), void **p, unsigned long long *out, int cap) {
    return sh_emu_ptrs(f, p, out, cap, std::index_sequence_for<A...>{});
}
extern "C" void sh_emu_exec(void *c, unsigned grid, int forward, int last) {
    auto *f = static_cast<std::function<void()> *>(c);
    gridDim = {grid, 1, 1};
    blockDim = {1, 1, 1};
    threadIdx = {0, 0, 0};
    // Last block first by default: a GPU runs blocks in no promised order.
    for (unsigned i = 0; i < grid; ++i) {
        blockIdx = {forward ? i : grid - 1 - i, 0, 0};
        (*f)();
    }
    if (last) delete f;
}
)";
    // Entry points as exec/src/cuda/kernels.rs finds them.
    const std::string key = "extern \"C\" __global__ void ";
    for (size_t at = src.find(key); at != std::string::npos; at = src.find(key, at + 1)) {
        size_t b = at + key.size(), e = src.find('(', b);
        std::string name = src.substr(b, e - b);
        while (!name.empty() && name.back() == ' ') name.pop_back();
        out += "extern \"C\" void *sh_emu_bind_" + name + "(void **p) { return sh_emu_bind(" +
               name + ", p); }\n";
        out += "extern \"C\" int sh_emu_ptrs_" + name +
               "(void **p, unsigned long long *o, int cap) { return sh_emu_ptrs(" + name +
               ", p, o, cap); }\n";
    }
    return out;
}

// The block-order check of a launch of `threads` threads: one emulated block per thread, first
// first from a copy of the allocations its pointer arguments lie in, then last first from the
// same values (the run that counts); a difference stops the process.
void run_in_both_orders(Module *m, void *closure, unsigned threads,
                        const std::vector<CUdeviceptr> &args, const std::string &name) {
    std::vector<std::pair<char *, size_t>> regions;
    for (CUdeviceptr p : args) {
        auto it = sizes.upper_bound(p);
        if (it == sizes.begin()) continue;
        --it;
        if (p >= it->first + it->second) continue;
        std::pair<char *, size_t> r{reinterpret_cast<char *>(it->first), it->second};
        if (std::find(regions.begin(), regions.end(), r) == regions.end()) regions.push_back(r);
    }
    std::vector<std::vector<char>> before, first;
    for (auto &[a, n] : regions) before.emplace_back(a, a + n);
    m->exec(closure, threads, 1, 0);
    for (size_t i = 0; i < regions.size(); ++i) {
        auto [a, n] = regions[i];
        first.emplace_back(a, a + n);
        memcpy(a, before[i].data(), n);
    }
    m->exec(closure, threads, 0, 1);
    for (size_t i = 0; i < regions.size(); ++i) {
        auto [a, n] = regions[i];
        if (memcmp(a, first[i].data(), n) == 0) continue;
        size_t k = 0;
        while (a[k] == first[i][k]) ++k;
        fprintf(stderr,
                "host-emulated CUDA: `%s` over %u threads writes other values when its blocks run "
                "in another order (threads race for one address, which a GPU leaves to chance): "
                "byte %zu of the %zu-byte allocation at %p\n",
                name.c_str(), threads, k, n, static_cast<void *>(a));
        abort();
    }
}
} // namespace

extern "C" {
// ---- NVRTC -------------------------------------------------------------------------------
struct Program {
    std::string image;
};
int nvrtcVersion(int *major, int *minor) {
    *major = 12;
    *minor = 0;
    return 0;
}
const char *nvrtcGetErrorString(int r) { return r ? "NVRTC_ERROR (host emulation)" : "NVRTC_SUCCESS"; }
int nvrtcCreateProgram(void **prog, const char *src, const char *, int, const char *const *,
                       const char *const *) {
    if (!prog || !src) return 3;
    *prog = new Program{std::string(MARKER) + src};
    return 0;
}
// Architectures as CUDA 12's NVRTC knows them (sm_75 up); another is an invalid option, so
// that the fallback to older virtual architectures runs as with a real NVRTC.
int nvrtcCompileProgram(void *, int n, const char *const *opts) {
    const char *arch = "--gpu-architecture=";
    for (int i = 0; i < n; ++i) {
        if (strncmp(opts[i], arch, strlen(arch)) != 0) continue;
        const char *v = opts[i] + strlen(arch);
        const char *digits = !strncmp(v, "sm_", 3) ? v + 3 : !strncmp(v, "compute_", 8) ? v + 8 : nullptr;
        if (!digits || atoi(digits) < 75 || atoi(digits) > 90) return 5; // NVRTC_ERROR_INVALID_OPTION
    }
    return 0;
}
int nvrtcGetProgramLogSize(void *, size_t *n) {
    *n = 1;
    return 0;
}
int nvrtcGetProgramLog(void *, char *log) {
    log[0] = 0;
    return 0;
}
int nvrtcGetCUBINSize(void *p, size_t *n) {
    *n = static_cast<Program *>(p)->image.size() + 1;
    return 0;
}
int nvrtcGetCUBIN(void *p, char *out) {
    const std::string &s = static_cast<Program *>(p)->image;
    memcpy(out, s.c_str(), s.size() + 1);
    return 0;
}
int nvrtcGetPTXSize(void *p, size_t *n) { return nvrtcGetCUBINSize(p, n); }
int nvrtcGetPTX(void *p, char *out) { return nvrtcGetCUBIN(p, out); }
int nvrtcDestroyProgram(void **p) {
    delete static_cast<Program *>(*p);
    *p = nullptr;
    return 0;
}

// ---- Driver: device and context ----------------------------------------------------------
CUresult cuInit(unsigned) { return OK; }
CUresult cuDriverGetVersion(int *v) {
    *v = 12000;
    return OK;
}
CUresult cuDeviceGetCount(int *n) {
    *n = 1;
    return OK;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal != 0) return INVALID_VALUE;
    *d = 0;
    return OK;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice) {
    snprintf(name, len, "host emulation (no GPU)");
    return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice) {
    switch (attr) {
    case 75: *v = 9; break;    // compute capability major
    case 76: *v = 0; break;    // minor
    case 16: *v = 4; break;    // multiprocessors
    case 1: *v = 1024; break;  // threads per block
    case 10: *v = 32; break;   // warp size
    case 115: *v = 1; break;   // memory pools: stream-ordered allocation, as current GPUs
    default: *v = 0;           // everything else: not supported
    }
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice) {
    *b = TOTAL;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    NEED_CTX;
    Lock l(mu);
    *total = TOTAL;
    *free_b = TOTAL - allocated;
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice) {
    ++retained;
    *ctx = &ctx_token;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
    for (int n = retained; n > 0;)
        if (retained.compare_exchange_weak(n, n - 1)) return OK;
    return INVALID_CONTEXT;
}
bool is_ctx(void *ctx) { return ctx == &ctx_token; }
// Replaces the top of the thread's stack; no context pops it.
CUresult cuCtxSetCurrent(void *ctx) {
    if (!ctx) {
        if (!ctx_stack.empty()) ctx_stack.pop_back();
        return OK;
    }
    if (!is_ctx(ctx)) return INVALID_CONTEXT;
    if (ctx_stack.empty()) ctx_stack.push_back(ctx);
    else ctx_stack.back() = ctx;
    return OK;
}
CUresult cuCtxGetCurrent(void **ctx) {
    *ctx = ctx_stack.empty() ? nullptr : ctx_stack.back();
    return OK;
}
CUresult cuCtxGetDevice(CUdevice *d) {
    NEED_CTX;
    *d = 0;
    return OK;
}
CUresult cuCtxPushCurrent_v2(void *ctx) {
    if (!is_ctx(ctx)) return INVALID_CONTEXT;
    ctx_stack.push_back(ctx);
    return OK;
}
CUresult cuCtxPopCurrent_v2(void **ctx) {
    if (ctx_stack.empty()) return INVALID_CONTEXT;
    if (ctx) *ctx = ctx_stack.back();
    ctx_stack.pop_back();
    return OK;
}
CUresult cuCtxSynchronize() {
    NEED_CTX;
    Lock l(mu);
    flush_all();
    return OK;
}
const char *cuda_error_text(CUresult r) {
    switch (r) {
    case OK: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CONTEXT_IS_DESTROYED: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case NOT_READY: return "CUDA_ERROR_NOT_READY";
    default: return "CUDA_ERROR_UNKNOWN";
    }
}
CUresult cuGetErrorString(CUresult r, const char **s) {
    *s = cuda_error_text(r);
    return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) { return cuGetErrorString(r, s); }

// ---- Streams and events ------------------------------------------------------------------
CUresult cuStreamCreate(void **s, unsigned) {
    NEED_CTX;
    Lock l(mu);
    Stream *st = new Stream;
    streams.push_back(st);
    *s = st;
    return OK;
}
// Work still queued on a destroyed stream runs later, as on a GPU: the stream is kept (events
// and waits may still refer to it).
CUresult cuStreamDestroy_v2(void *) {
    NEED_CTX;
    return OK;
}
CUresult cuStreamSynchronize(void *s) {
    NEED_CTX;
    Lock l(mu);
    of(s)->flush();
    return OK;
}
CUresult cuStreamQuery(void *s) {
    NEED_CTX;
    Lock l(mu);
    if (of(s)->queue.empty()) return OK;
    of(s)->flush();
    return NOT_READY;
}
CUresult cuEventCreate(void **e, unsigned) {
    NEED_CTX;
    *e = new Event;
    return OK;
}
// Queued work holds the marks it sets, not the event: destroying an event is safe at once.
CUresult cuEventDestroy_v2(void *e) {
    NEED_CTX;
    Lock l(mu);
    delete static_cast<Event *>(e);
    return OK;
}
CUresult cuEventRecord(void *e, void *s) {
    NEED_CTX;
    Lock l(mu);
    Event *ev = static_cast<Event *>(e);
    ev->stream = of(s);
    ev->mark = std::make_shared<Mark>();
    ev->told_not_ready = false;
    enqueue(ev->stream, [m = ev->mark] {
        m->done = true;
        m->at = std::chrono::steady_clock::now();
    });
    return OK;
}
CUresult cuEventRecordWithFlags(void *e, void *s, unsigned) { return cuEventRecord(e, s); }
CUresult cuEventSynchronize(void *e) {
    NEED_CTX;
    Lock l(mu);
    Event *ev = static_cast<Event *>(e);
    if (ev->stream) ev->stream->flush(ev->mark);
    return OK;
}
CUresult cuEventQuery(void *e) {
    NEED_CTX;
    Lock l(mu);
    Event *ev = static_cast<Event *>(e);
    if (ev->mark->done) return OK;
    if (!ev->told_not_ready) {
        ev->told_not_ready = true;
        return NOT_READY;
    }
    ev->stream->flush(ev->mark);
    return OK;
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    NEED_CTX;
    Lock l(mu);
    Mark &x = *static_cast<Event *>(a)->mark, &y = *static_cast<Event *>(b)->mark;
    if (!x.done || !y.done) return NOT_READY;
    *ms = std::chrono::duration<float, std::milli>(y.at - x.at).count();
    return OK;
}
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { return cuEventElapsedTime(ms, a, b); }
// Later work on `s` waits for `e`'s latest recording: when `s` gets there, the recording
// stream runs up to it first. On the recording stream itself that order holds already.
CUresult cuStreamWaitEvent(void *s, void *e, unsigned) {
    NEED_CTX;
    Lock l(mu);
    Event *ev = static_cast<Event *>(e);
    Stream *from = ev->stream;
    if (!from || from == of(s) || ev->mark->done) return OK;
    enqueue(of(s), [from, m = ev->mark] { from->flush(m); });
    return OK;
}

// ---- Memory ------------------------------------------------------------------------------
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    NEED_CTX;
    Lock l(mu);
    if (n == 0) return INVALID_VALUE;
    if (!reserved) {
        void *r = mmap(nullptr, RESERVED, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return OUT_OF_MEMORY;
        reserved = static_cast<char *>(r);
    }
    if (allocated + n > TOTAL || bump + pages(n) > RESERVED) return OUT_OF_MEMORY;
    char *m = reserved + bump;
    bump += pages(n);
    set_prot(m, n, PROT_READ | PROT_WRITE);
    // Fresh device memory is not zero: a read before a write shows.
    memset(m, 0xA5, n);
    if (guard && open_depth == 0) set_prot(m, n, PROT_NONE);
    *p = reinterpret_cast<CUdeviceptr>(m);
    sizes[*p] = n;
    allocated += n;
    return OK;
}
void release(CUdeviceptr p) {
    auto it = sizes.find(p);
    if (it == sizes.end()) return;
    void *m = reinterpret_cast<void *>(p);
    set_prot(m, it->second, PROT_NONE);
    madvise(m, pages(it->second), MADV_DONTNEED);
    allocated -= it->second;
    sizes.erase(it);
}
// Not synchronising: work still queued on the memory faults when it runs.
CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_CTX;
    Lock l(mu);
    if (!sizes.count(p) || freeing.count(p)) return INVALID_VALUE;
    release(p);
    return OK;
}
// Stream-ordered pools: the memory is there at once (as early as allowed), and goes once the
// work issued before the free has run.
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *) {
    NEED_CTX;
    if (n == 0) {
        *p = 0;
        return OK;
    }
    return cuMemAlloc_v2(p, n);
}
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) {
    NEED_CTX;
    Lock l(mu);
    if (p == 0) return OK;
    if (!sizes.count(p) || !freeing.insert(p).second) return INVALID_VALUE;
    enqueue(of(s), [p] {
        freeing.erase(p);
        release(p);
    });
    return OK;
}
// Pageable host memory: the source is staged when the call is made, the copy itself queued.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
    NEED_CTX;
    Lock l(mu);
    auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    enqueue(of(s), [dst, staged] { memcpy((void *)dst, staged->data(), staged->size()); });
    return OK;
}
// To pageable host memory the call returns once the copy is done, after the stream's work.
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
    NEED_CTX;
    Lock l(mu);
    Open open;
    of(s)->flush();
    memcpy(dst, (const void *)src, n);
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
    NEED_CTX;
    Lock l(mu);
    enqueue(of(s), [=] { memmove((void *)dst, (const void *)src, n); });
    return OK;
}
// The synchronous forms run on the legacy null stream, which waits for its own work only
// (cudarc's streams are non-blocking).
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    NEED_CTX;
    Lock l(mu);
    null_stream.flush();
    Open open;
    memcpy((void *)dst, src, n);
    return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    NEED_CTX;
    Lock l(mu);
    null_stream.flush();
    Open open;
    memcpy(dst, (const void *)src, n);
    return OK;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    NEED_CTX;
    Lock l(mu);
    null_stream.flush();
    Open open;
    memmove((void *)dst, (const void *)src, n);
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
    NEED_CTX;
    Lock l(mu);
    enqueue(of(s), [=] { memset((void *)p, v, n); });
    return OK;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    NEED_CTX;
    Lock l(mu);
    null_stream.flush();
    Open open;
    memset((void *)p, v, n);
    return OK;
}

// ---- Modules and launches ----------------------------------------------------------------
CUresult cuModuleLoadData(void **module, const void *image) {
    NEED_CTX;
    Lock l(mu);
    const char *img = static_cast<const char *>(image);
    if (!img || strncmp(img, MARKER, strlen(MARKER)) != 0) return INVALID_IMAGE;
    std::string src(img + strlen(MARKER));
    const char *dir_env = getenv("STARHALO_EMU_DIR");
    std::string dir = dir_env && *dir_env ? dir_env : "/tmp/starhalo-cuda-emu-" + std::to_string(getuid());
    mkdir(dir.c_str(), 0700);
    std::string prog = host_program(src);
    // The flags of kernels/host_cxx_flags, as the Rust emulation's (a misaligned load or
    // store faults on a GPU; there the sanitizer stops the process).
    const std::string flags = SH_KERNEL_FLAGS " -shared -fPIC";
    char hash[32];
    // The compiler's identity, flags and the whole program (prelude included) name the cache entry.
    static const std::string compiler = output_of("c++ --version 2>&1");
    snprintf(hash, sizeof hash, "%016llx", fnv(compiler + flags + "\n" + prog));
    std::string so = dir + "/" + hash + ".so";
    struct stat st;
    if (stat(so.c_str(), &st) != 0) {
        static int built = 0;
        std::string tag = "." + std::to_string(getpid()) + "." + std::to_string(built++);
        std::string cpp = so + tag + ".cpp";
        FILE *f = fopen(cpp.c_str(), "w");
        if (!f) return UNKNOWN;
        fwrite(prog.data(), 1, prog.size(), f);
        fclose(f);
        std::string cmd = "c++ " + flags + " -o '" + so + tag + "' '" + cpp + "'";
        int rc = system(cmd.c_str());
        unlink(cpp.c_str());
        if (rc != 0 || rename((so + tag).c_str(), so.c_str()) != 0) {
            fprintf(stderr, "host-emulated CUDA: `%s` failed\n", cmd.c_str());
            return INVALID_IMAGE;
        }
    }
    void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "host-emulated CUDA: %s\n", dlerror());
        return INVALID_IMAGE;
    }
    auto exec = reinterpret_cast<void (*)(void *, unsigned, int, int)>(dlsym(h, "sh_emu_exec"));
    if (!exec) return INVALID_IMAGE;
    *module = new Module{h, exec};
    return OK;
}
CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned, void *, void **) {
    return cuModuleLoadData(module, image);
}
CUresult cuModuleUnload(void *) {
    NEED_CTX;
    // The shared object stays mapped: closures of queued launches may still refer to it.
    return OK;
}
CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    NEED_CTX;
    Module *m = static_cast<Module *>(module);
    std::string sym = std::string("sh_emu_bind_") + name;
    auto bind = reinterpret_cast<void *(*)(void **)>(dlsym(m->so, sym.c_str()));
    auto ptrs = reinterpret_cast<int (*)(void **, unsigned long long *, int)>(
        dlsym(m->so, (std::string("sh_emu_ptrs_") + name).c_str()));
    if (!bind || !ptrs) return NOT_FOUND;
    *f = new Function{m, bind, ptrs, name};
    return OK;
}
CUresult cuFuncGetAttribute(int *v, int, void *) {
    NEED_CTX;
    *v = 0;
    return OK;
}
CUresult cuFuncSetAttribute(void *, int, int) {
    NEED_CTX;
    return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *s, void **params, void **extra) {
    NEED_CTX;
    Lock l(mu);
    // The limits of every current GPU: grid y and z up to 65535, blocks of at most 1024
    // threads (z at most 64), dynamic shared memory up to 48 KiB unless a kernel opts in.
    if (extra || !params || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        gx > 0x7fffffffu || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
        bx * by * bz > 1024 || shared > 48 * 1024)
        return INVALID_VALUE;
    Function *fn = static_cast<Function *>(f);
    void *closure = fn->bind(params);
    Module *m = fn->module;
    unsigned grid = gx * gy * gz;
    unsigned long long threads = (unsigned long long)grid * (bx * by * bz);
    // Atomic kernels may combine in any order (sums round differently), which is allowed.
    bool check = order_check && threads > 1 && threads <= 0x7fffffffu &&
                 fn->name.find("atomic") == std::string::npos;
    if (!check) {
        enqueue(of(s), [m, closure, grid] { m->exec(closure, grid, 0, 1); });
        return OK;
    }
    unsigned long long p[64];
    int n = fn->ptrs(params, p, 64);
    std::vector<CUdeviceptr> args(p, p + (n < 64 ? n : 64));
    std::string key = fn->name + ' ' + std::to_string(grid) + ' ' + std::to_string(threads);
    for (CUdeviceptr a : args) key += ' ' + std::to_string(a);
    if (++order_checked[key] > order_check_repeats) {
        enqueue(of(s), [m, closure, grid] { m->exec(closure, grid, 0, 1); });
        return OK;
    }
    enqueue(of(s), [m, closure, threads, args, name = fn->name] {
        run_in_both_orders(m, closure, unsigned(threads), args, name);
    });
    return OK;
}
}

// Emulated device memory is host memory, which any MPI moves: loaded with LD_PRELOAD, the
// library also tells the program that its MPI is CUDA-aware, so that the GPU-aware path (device
// buffers handed to MPI, after one stream synchronisation) runs across ranks too.
extern "C" int MPIX_Query_cuda_support() { return 1; }
