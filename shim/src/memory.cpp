// memory.cpp -- allocated-memory accounting: a counting allocator over libtorch's default CPU allocator, and the
// CUDA caching allocator's device statistics in CUDA builds. These numbers are what the watchdog watches.
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "internal.hpp"

namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_live_allocs{0};
std::atomic<int64_t> g_total_allocs{0};

// Each counted allocation is the base allocator's block with a header in front that records the requested size:
//   [header: kHeader bytes, size_t n at the start][n bytes of data]  -- data = block + kHeader.
// The DataPtr's context is the data pointer itself, as libtorch's raw_allocate()/raw_deallocate() require
// (oneDNN's convolution path allocates through them), and freeing needs no lookup table. kHeader is the CPU
// allocator's alignment, so data stays as aligned as the base allocator's blocks.
constexpr size_t kHeader = c10::gAlignment;
c10::DeleterFnPtr g_base_deleter = nullptr;

void counted_delete(void *data)
{
    void *block = static_cast<char *>(data) - kHeader;
    const auto n = static_cast<int64_t>(*static_cast<size_t *>(block));
    g_live_bytes.fetch_sub(n, std::memory_order_relaxed);
    g_live_allocs.fetch_sub(1, std::memory_order_relaxed);
    g_base_deleter(block);
}

// Wraps libtorch's default CPU allocator and counts requested bytes: the CPU analogue of
// torch.cuda.memory_allocated(). Needs a base allocator whose blocks can be freed through raw_deleter().
class CountingAllocator final : public c10::Allocator {
  public:
    explicit CountingAllocator(c10::Allocator *base) : base_(base) {}

    c10::DataPtr allocate(size_t n) const override
    {
        c10::DataPtr inner = base_->allocate(n + kHeader);
        const c10::Device dev = inner.device();
        void *block = inner.release_context();
        *static_cast<size_t *>(block) = n;
        void *data = static_cast<char *>(block) + kHeader;
        const auto bytes = static_cast<int64_t>(n);
        const int64_t live = g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
        g_live_allocs.fetch_add(1, std::memory_order_relaxed);
        g_total_allocs.fetch_add(1, std::memory_order_relaxed);
        int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
        while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
        }
        return c10::DataPtr(data, data, &counted_delete, dev);
    }

    c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

    // Pure virtual from libtorch 2.3 on; a plain member before.
    void copy_data(void *dest, const void *src, std::size_t count) const { std::memcpy(dest, src, count); }

  private:
    c10::Allocator *base_;
};

}  // namespace

void trs::install_counting_allocator()
{
    static std::once_flag once;
    std::call_once(once, [] {
        // TRAINRUN_COUNTING=0 leaves libtorch's allocator alone (counts stay 0): only for measuring the
        // accounting's own cost (bench/watchdog_overhead.sh).
        const char *env = std::getenv("TRAINRUN_COUNTING");
        if (env && std::strcmp(env, "0") == 0) return;
        c10::Allocator *base = c10::GetCPUAllocator();
        // Only a base whose blocks are plain (context == data, freed by raw_deleter) can be wrapped this way;
        // libtorch's default CPU allocator is. Anything else is left alone and the counts stay 0.
        if (!base || !base->raw_deleter()) return;
        g_base_deleter = base->raw_deleter();
        static CountingAllocator counting(base);
        c10::SetCPUAllocator(&counting, /*priority=*/100);
    });
}

extern "C" trs_status trs_memory_stats_get(trs_memory_stats *s)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, s != nullptr, "stats is NULL");
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        *s = trs_memory_stats{};
        s->allocated_bytes = g_live_bytes.load(std::memory_order_relaxed);
        s->peak_bytes = g_peak_bytes.load(std::memory_order_relaxed);
        s->live_allocations = g_live_allocs.load(std::memory_order_relaxed);
        s->total_allocations = g_total_allocs.load(std::memory_order_relaxed);
        trs::cuda_memory_stats(s);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_memory_reset_peak(void)
{
    trs::install_counting_allocator();
    g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::string &err = trs::last_error();
    TRS_GUARD(err, {
        trs::cuda_reset_peak();
        return TRS_OK;
    })
}
