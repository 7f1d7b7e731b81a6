// memory.cpp -- CPU memory accounting under libtorch: a caching allocator that keeps freed blocks in size-bucketed
// free lists (allocated = live tensor bytes, reserved = bytes held from the system), tags every live block with the
// step phase that allocated it (the C counterpart of torch.cuda.memory_snapshot), and the CUDA caching allocator's
// device statistics in CUDA builds. These numbers are what the watchdog watches.
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>
#include <unordered_map>
#include <vector>

#include "internal.hpp"

namespace {

// Every block is [header: kHeader bytes][data], data = block + kHeader. kHeader is the CPU allocator's alignment
// (c10::gAlignment, 64 bytes, as c10's alloc_cpu), so data is as aligned as libtorch's own blocks. The DataPtr's
// context is the data pointer itself, as libtorch's raw_allocate()/raw_deallocate() require (oneDNN's convolution
// path allocates through them), and freeing needs no lookup table.
constexpr size_t kHeader = c10::gAlignment;

// Size policy of the cache (c10/cuda/CUDACachingAllocator.cpp): requests round up to a multiple of kMinBlockSize
// (512 B), and from kMinLargeAlloc (10 MiB) on, blocks are whole multiples of kRoundLarge (2 MiB). A freed block
// is reused only by a request of the same rounded size: blocks are never split, because a training loop asks for
// the same sizes every step, so the exact bucket is found from the second step on and no block is ever carved into
// pieces that fragment. Large blocks are mapped directly (mmap, 2 MiB-aligned) with MADV_HUGEPAGE: the first touch
// of a 100 MB activation then takes 50 page faults instead of 25,600 (bench/MEMORY.md).
constexpr size_t kMinBlockSize = 512;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;
constexpr int kStackDepth = 32;

enum : uint32_t { kMapped = 1u };

struct Header {
    size_t requested;   // bytes the storage asked for: what `allocated` counts
    size_t block_bytes; // bytes held from the system for this block, header included: what `reserved` counts
    uint32_t phase;     // trs_mem_phase at allocation
    uint32_t flags;     // kMapped: mmap'd (munmap to free), else the base allocator's
    Header *prev, *next;  // the live list, oldest first (only while live)
    void **stack;       // watchdog.backtrace: stack[0] = frame count, frames follow (malloc'd), or NULL
};
static_assert(sizeof(Header) <= kHeader, "header must fit in the alignment padding");

struct KeyStat {
    int64_t bytes = 0, blocks = 0;
};

uint64_t key_of(uint32_t phase, size_t requested) { return (static_cast<uint64_t>(phase) << 48) | requested; }

// Process-wide allocator state. Heap-allocated and never destroyed: libtorch frees tensors held by static objects
// after main() returns, and those frees must still find a live allocator (they go straight back to the system
// once `exiting` is set by the atexit hook).
struct State {
    std::mutex mu;
    c10::Allocator *base = nullptr;
    c10::DeleterFnPtr base_deleter = nullptr;
    bool cache = true;
    std::atomic<bool> backtrace{false};
    int64_t cache_limit = 0;        // release the cache when reserved would exceed this; 0 = no limit
    int64_t allocated = 0, peak = 0, live = 0, total = 0;
    int64_t reserved = 0, peak_reserved = 0, cached = 0, cache_hits = 0, releases = 0;
    std::map<size_t, std::vector<Header *>> free_lists;             // by block_bytes
    Header *head = nullptr, *tail = nullptr;                        // live blocks, oldest first
};

State *g = nullptr;
std::atomic<bool> g_exiting{false};
std::atomic<int> g_phase{TRS_PHASE_OUTSIDE};  // the phase of the newest PhaseScope on any thread
thread_local int t_phase = -1;               // this thread's own, -1 = none (worker threads: g_phase)

int current_phase()
{
    const int p = t_phase;
    return p >= 0 ? p : g_phase.load(std::memory_order_relaxed);
}

size_t round_request(size_t n, bool cache)
{
    if (!cache) return n;
    if (n + kHeader >= kMinLargeAlloc) return (n + kHeader + kRoundLarge - 1) / kRoundLarge * kRoundLarge - kHeader;
    return n < kMinBlockSize ? kMinBlockSize : (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

// A fresh block of `data` bytes from the system (the state's lock is not held).
Header *system_alloc(State &s, size_t data, bool map)
{
    if (map) {  // a whole number of 2 MiB pages, 2 MiB-aligned so transparent huge pages can back all of it
        const size_t len = data + kHeader, span = len + kRoundLarge;
        void *p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        const uintptr_t a = reinterpret_cast<uintptr_t>(p), al = (a + kRoundLarge - 1) & ~(uintptr_t)(kRoundLarge - 1);
        if (al > a) munmap(p, al - a);
        if (a + span > al + len) munmap(reinterpret_cast<void *>(al + len), a + span - (al + len));
        void *b = reinterpret_cast<void *>(al);
#ifdef MADV_HUGEPAGE
        madvise(b, len, MADV_HUGEPAGE);
#endif
        Header *h = static_cast<Header *>(b);
        h->block_bytes = len;
        h->flags = kMapped;
        return h;
    }
    c10::DataPtr inner = s.base->allocate(data + kHeader);
    Header *h = static_cast<Header *>(inner.release_context());
    h->block_bytes = data + kHeader;
    h->flags = 0;
    return h;
}

void system_free(State &s, Header *h)
{
    if (h->flags & kMapped) munmap(h, h->block_bytes);
    else s.base_deleter(h);
}

// Take every cached block off the free lists (lock held); the caller frees them after unlocking.
void take_cached(State &s, std::vector<Header *> &out)
{
    for (auto &kv : s.free_lists) {
        out.insert(out.end(), kv.second.begin(), kv.second.end());
        kv.second.clear();
    }
    s.free_lists.clear();
    for (Header *h : out) s.reserved -= static_cast<int64_t>(h->block_bytes);
    s.cached = 0;
    if (!out.empty()) s.releases++;
}

void release_blocks(State &s, std::vector<Header *> &blocks)
{
    for (Header *h : blocks) system_free(s, h);
    blocks.clear();
}

// The caller's stack, without the allocator's own two frames (this function and allocate()).
__attribute__((noinline)) void **capture_stack()
{
    constexpr int kOwn = 2;
    void *frames[kStackDepth + kOwn];
    const int got = ::backtrace(frames, kStackDepth + kOwn);
    const int n = got > kOwn ? got - kOwn : 0;
    void **st = static_cast<void **>(std::malloc(sizeof(void *) * static_cast<size_t>(n + 1)));
    if (!st) return nullptr;
    st[0] = reinterpret_cast<void *>(static_cast<intptr_t>(n));
    std::memcpy(st + 1, frames + kOwn, sizeof(void *) * static_cast<size_t>(n));
    return st;
}

void caching_delete(void *data);

// Accounts a freshly allocated block as reserved from the system (lock held).
void account_reserved(State &s, int64_t bytes)
{
    s.reserved += bytes;
    s.peak_reserved = std::max(s.peak_reserved, s.reserved);
}


// The cached block for a request of `need` block bytes (lock held), or free_lists.end(). Small requests take
// their exact bucket. Large ones (>= kMinLargeAlloc) take the smallest cached block of at most twice their size:
// an activation of the second conv block (50 MB at batch 1000) then reuses a free 100 MB one of the first instead
// of mapping more, which keeps reserved near the peak of live bytes (c10 splits such blocks; we only allow a
// bounded oversize, since an unsplit block is held whole for as long as its tensor lives).
std::map<size_t, std::vector<Header *>>::iterator find_cached(State &s, size_t need)
{
    // Emptied buckets stay in the map (their vectors keep their capacity): a step frees into them again.
    if (need < kMinLargeAlloc) {
        auto it = s.free_lists.find(need);
        return it != s.free_lists.end() && !it->second.empty() ? it : s.free_lists.end();
    }
    for (auto it = s.free_lists.lower_bound(need); it != s.free_lists.end() && it->first <= 2 * need; ++it)
        if (!it->second.empty()) return it;
    return s.free_lists.end();
}

// Book a block as live (lock held): counts and the live list (nothing here allocates, so nothing can throw
// half-way; trs_memory_live_keys groups the live list by (phase, size) when a snapshot asks).
void take_live(State &s, Header *h)
{
    const auto bytes = static_cast<int64_t>(h->requested);
    s.allocated += bytes;
    s.peak = std::max(s.peak, s.allocated);
    s.live++;
    s.total++;
    h->prev = s.tail;
    h->next = nullptr;
    if (s.tail) s.tail->next = h;
    else s.head = h;
    s.tail = h;
}

class CachingAllocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) TRS_ALLOCATE_CONST override
    {
        State &s = *g;
        const uint32_t phase = static_cast<uint32_t>(current_phase());
        void **stack = s.backtrace.load(std::memory_order_relaxed) ? capture_stack() : nullptr;
        Header *h = nullptr;
        size_t data;
        bool cache;
        {
            std::lock_guard<std::mutex> lock(s.mu);
            cache = s.cache;
            data = round_request(n, cache);
            if (cache) {  // free lists are keyed by block bytes (data + header; mapped blocks: their mapping)
                auto it = find_cached(s, data + kHeader);
                if (it != s.free_lists.end()) {
                    h = it->second.back();
                    it->second.pop_back();
                    s.cached -= static_cast<int64_t>(h->block_bytes);
                    s.cache_hits++;
                    h->requested = n;
                    h->phase = phase;
                    h->stack = stack;
                    take_live(s, h);
                }
            }
        }
        if (!h) {
            std::vector<Header *> spill;
            {
                std::lock_guard<std::mutex> lock(s.mu);
                // Over the cache limit: give the cache back before asking the system for more (c10 frees its
                // cached blocks and retries when cudaMalloc fails; here the limit stands in for the failure).
                if (s.cache_limit > 0 && s.cached > 0 &&
                    s.reserved + static_cast<int64_t>(data + kHeader) > s.cache_limit)
                    take_cached(s, spill);
            }
            release_blocks(s, spill);
            try {
                h = system_alloc(s, data, cache && data + kHeader >= kMinLargeAlloc);
            } catch (...) {
                std::free(stack);
                throw;
            }
            h->requested = n;
            h->phase = phase;
            h->stack = stack;
            std::lock_guard<std::mutex> lock(s.mu);
            account_reserved(s, static_cast<int64_t>(h->block_bytes));
            take_live(s, h);
        }
        void *ptr = reinterpret_cast<char *>(h) + kHeader;
        return c10::DataPtr(ptr, ptr, &caching_delete, c10::Device(c10::DeviceType::CPU));
    }

    c10::DeleterFnPtr raw_deleter() const override { return &caching_delete; }

    // Pure virtual from libtorch 2.3 on; a plain member before.
    void copy_data(void *dest, const void *src, std::size_t count) const { std::memcpy(dest, src, count); }
};

void caching_delete(void *data)
{
    Header *h = reinterpret_cast<Header *>(static_cast<char *>(data) - kHeader);
    State &s = *g;
    void **stack = h->stack;
    bool to_system = true;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        const auto bytes = static_cast<int64_t>(h->requested);
        s.allocated -= bytes;
        s.live--;
        if (h->prev) h->prev->next = h->next;
        else s.head = h->next;
        if (h->next) h->next->prev = h->prev;
        else s.tail = h->prev;
        h->stack = nullptr;
        // Cache it, unless caching is off, the process is exiting or the limit says the cache is already too big.
        if (s.cache && !g_exiting.load(std::memory_order_relaxed) &&
            (s.cache_limit <= 0 || s.reserved <= s.cache_limit)) {
            try {
                s.free_lists[h->block_bytes].push_back(h);
                s.cached += static_cast<int64_t>(h->block_bytes);
                to_system = false;
            } catch (...) {  // no memory for the list's node (bad_alloc): the block goes back to the system instead,
                s.reserved -= static_cast<int64_t>(h->block_bytes);  // as nothing may leave a deleter
            }
        } else {
            s.reserved -= static_cast<int64_t>(h->block_bytes);
        }
    }
    std::free(stack);
    if (to_system) system_free(s, h);
}

CachingAllocator *g_allocator = nullptr;

int64_t rss_bytes()
{
    FILE *f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long long size = 0, resident = 0;
    const int got = std::fscanf(f, "%lld %lld", &size, &resident);
    std::fclose(f);
    return got == 2 ? resident * static_cast<long long>(sysconf(_SC_PAGESIZE)) : 0;
}

int64_t peak_rss_bytes()
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? static_cast<int64_t>(ru.ru_maxrss) * 1024 : 0;
}

}  // namespace

trs::PhaseScope::PhaseScope(int phase) : prev_thread(t_phase), prev_global(g_phase.load(std::memory_order_relaxed))
{
    t_phase = phase;
    g_phase.store(phase, std::memory_order_relaxed);
}

trs::PhaseScope::~PhaseScope()
{
    t_phase = prev_thread;
    g_phase.store(prev_global, std::memory_order_relaxed);
}

void trs::install_counting_allocator() noexcept
{
    static std::once_flag once;
    try {
        std::call_once(once, [] {
            // TRAINRUN_COUNTING=0 leaves libtorch's allocator alone (counts stay 0): only for measuring the
            // accounting's own cost (bench/watchdog_overhead.sh).
            const char *env = std::getenv("TRAINRUN_COUNTING");
            if (env && std::strcmp(env, "0") == 0) return;
            c10::Allocator *base = c10::GetCPUAllocator();
            // Only a base whose blocks are plain (context == data, freed by raw_deleter) can be wrapped this way;
            // libtorch's default CPU allocator is. Anything else is left alone and the counts stay 0.
            if (!base || !base->raw_deleter()) return;
            auto state = std::make_unique<State>();
            state->base = base;
            state->base_deleter = base->raw_deleter();
            // TRAINRUN_MEMORY_CACHE=0 starts with the cache off (the config's memory.cache sets it per run).
            const char *c = std::getenv("TRAINRUN_MEMORY_CACHE");
            if (c && std::strcmp(c, "0") == 0) state->cache = false;
            auto allocator = std::make_unique<CachingAllocator>();
            g = state.release();  // published before libtorch can route a block through the allocator
            std::atexit([] { g_exiting.store(true); });
            g_allocator = allocator.release();
            c10::SetCPUAllocator(g_allocator, /*priority=*/100);
        });
    } catch (...) {
        // Out of memory before anything was installed: libtorch's own allocator stays, the counts stay 0, and the
        // next entry point tries again (std::call_once does not mark a throwing call done). Nothing escapes into
        // a C caller.
    }
}

extern "C" trs_status trs_memory_stats_get(trs_memory_stats *s)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, s != nullptr, "stats is NULL");
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        *s = trs_memory_stats{};
        if (g) {
            std::lock_guard<std::mutex> lock(g->mu);
            s->allocated_bytes = g->allocated;
            s->peak_bytes = g->peak;
            s->live_allocations = g->live;
            s->total_allocations = g->total;
            s->reserved_bytes = g->reserved;
            s->peak_reserved_bytes = g->peak_reserved;
            s->cached_bytes = g->cached;
            s->cache_hits = g->cache_hits;
            s->cache_releases = g->releases;
            s->cache_enabled = g->cache ? 1 : 0;
        }
        s->rss_bytes = rss_bytes();
        s->peak_rss_bytes = std::max(peak_rss_bytes(), s->rss_bytes);  // ru_maxrss lags the page counters
        trs::cuda_memory_stats(s);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_memory_configure(int cache, int64_t cache_limit_bytes, int backtrace)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, cache_limit_bytes >= 0, "cache_limit_bytes must be >= 0");
    trs::install_counting_allocator();
    if (!g) return TRS_OK;
    std::vector<Header *> spill;
    {
        std::lock_guard<std::mutex> lock(g->mu);
        g->cache = cache != 0;
        g->cache_limit = cache_limit_bytes;
        g->backtrace.store(backtrace != 0);
        if (!g->cache || (g->cache_limit > 0 && g->reserved > g->cache_limit)) take_cached(*g, spill);
    }
    release_blocks(*g, spill);
    err.clear();
    return TRS_OK;
}

extern "C" trs_status trs_memory_empty_cache(int64_t *released_bytes)
{
    trs::install_counting_allocator();
    int64_t bytes = 0;
    if (g) {
        std::vector<Header *> spill;
        {
            std::lock_guard<std::mutex> lock(g->mu);
            bytes = g->cached;
            take_cached(*g, spill);
        }
        release_blocks(*g, spill);
    }
    if (released_bytes) *released_bytes = bytes;
    return TRS_OK;
}

extern "C" const char *trs_memory_phase_name(int phase)
{
    static const char *const names[TRS_PHASE_COUNT] = {
        "outside any step", "train forward", "backward", "optimizer step", "metrics", "eval", "EMA update",
        "checkpoint"};
    return phase >= 0 && phase < TRS_PHASE_COUNT ? names[phase] : "unknown phase";
}

extern "C" trs_status trs_memory_set_phase(int phase, int *previous)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, phase >= 0 && phase < TRS_PHASE_COUNT, "phase " + std::to_string(phase) + " is unknown");
    if (previous) *previous = t_phase >= 0 ? t_phase : TRS_PHASE_OUTSIDE;
    t_phase = phase == TRS_PHASE_OUTSIDE ? -1 : phase;
    g_phase.store(phase, std::memory_order_relaxed);
    return TRS_OK;
}

extern "C" trs_status trs_memory_live_keys(trs_memory_key *out, size_t cap, size_t *count)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, count != nullptr, "count is NULL");
    TRS_CHECK_ARG(err, out != nullptr || cap == 0, "out is NULL with cap > 0");
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        // Group the live list by (phase, size): O(live blocks) under the lock, once per snapshot (the watchdog's
        // baseline and reports), instead of a map updated on every allocation and free.
        std::unordered_map<uint64_t, KeyStat> keys;
        if (g) {
            std::lock_guard<std::mutex> lock(g->mu);
            for (const Header *h = g->head; h; h = h->next) {
                KeyStat &k = keys[key_of(h->phase, h->requested)];
                k.bytes += static_cast<int64_t>(h->requested);
                k.blocks++;
            }
        }
        std::vector<trs_memory_key> v;
        v.reserve(keys.size());
        for (const auto &kv : keys)
            v.push_back(trs_memory_key{static_cast<int>(kv.first >> 48),
                                       static_cast<int64_t>(kv.first & ((uint64_t{1} << 48) - 1)),
                                       kv.second.blocks, kv.second.bytes});
        std::sort(v.begin(), v.end(), [](const trs_memory_key &a, const trs_memory_key &b) {
            return a.phase != b.phase ? a.phase < b.phase : a.size < b.size;
        });
        *count = v.size();
        std::copy_n(v.begin(), std::min(cap, v.size()), out);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_memory_key_backtrace(int phase, int64_t size, char *buf, size_t cap, int *frames)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, buf != nullptr && cap > 0, "buf is NULL or cap is 0");
    trs::install_counting_allocator();
    buf[0] = '\0';
    if (frames) *frames = 0;
    if (!g) return TRS_OK;
    void *copy[kStackDepth];
    int n = 0;
    {
        std::lock_guard<std::mutex> lock(g->mu);
        for (Header *h = g->tail; h; h = h->prev)  // the newest live block of the key that has a stack
            if (h->phase == static_cast<uint32_t>(phase) && static_cast<int64_t>(h->requested) == size && h->stack) {
                n = static_cast<int>(reinterpret_cast<intptr_t>(h->stack[0]));
                std::memcpy(copy, h->stack + 1, sizeof(void *) * static_cast<size_t>(n));
                break;
            }
    }
    if (n == 0) return TRS_OK;
    // One line per frame, innermost first: "function (library+0xoffset)", C++ names demangled (dladdr sees the
    // dynamic symbol table: functions of shared libraries and of executables linked with -rdynamic).
    size_t used = 0;
    for (int i = 0; i < n && used + 1 < cap; i++) {
        Dl_info info{};
        const char *name = "??", *lib = "??";
        char *demangled = nullptr;
        uintptr_t off = reinterpret_cast<uintptr_t>(copy[i]);
        if (dladdr(copy[i], &info)) {
            if (info.dli_fname) {
                lib = std::strrchr(info.dli_fname, '/') ? std::strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
                off -= reinterpret_cast<uintptr_t>(info.dli_fbase);
            }
            if (info.dli_sname) {
                int status = 0;
                demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
                name = demangled && status == 0 ? demangled : info.dli_sname;
            }
        }
        const int w = std::snprintf(buf + used, cap - used, "%s (%s+0x%lx)\n", name, lib, static_cast<unsigned long>(off));
        std::free(demangled);
        if (w < 0) break;
        used += std::min(static_cast<size_t>(w), cap - used - 1);
    }
    if (frames) *frames = n;
    return TRS_OK;
}
