// dist.cpp -- process groups from libtorch's c10d: a TCPStore rendezvous from torchrun's environment variables,
// ProcessGroupGloo for host tensors and, in CUDA builds, ProcessGroupNCCL for CUDA tensors (a model on a CUDA
// device: its broadcast and gradient buckets), and the few collectives data-parallel training needs: broadcast of
// the model, bucketed gradient averaging, scalar all-reduce, barrier, all-gather of bytes.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.hpp"

// Debian's libtorch (and the official bundles) export USE_C10D_GLOO with the torch target when c10d was built
// with Gloo; its header then needs Gloo's headers (Debian: libgloo-dev).
#if defined(USE_C10D_GLOO) && __has_include(<gloo/context.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#define TRS_HAVE_C10D 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(TRS_WITH_CUDA) && defined(USE_C10D_NCCL) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define TRS_HAVE_NCCL 1
#endif
#else
#define TRS_HAVE_C10D 0
#endif

#if TRS_HAVE_C10D
namespace
{
struct heartbeat;
}
#endif

struct trs_dist {
    int rank = 0, world_size = 1, local_rank = 0;
#if TRS_HAVE_C10D
    c10::intrusive_ptr<c10d::Store> store;
    std::shared_ptr<heartbeat> hb; // liveness of every rank, through the store (names a lost rank)
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
    std::chrono::milliseconds timeout{0};
#if TRS_HAVE_NCCL
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // CUDA tensors only; made by the first CUDA collective
#endif
#endif
    double allreduce_seconds = 0.0, grad_sync_seconds = 0.0;
    int64_t allreduce_calls = 0, allreduce_bytes = 0;
    std::string err;
#if TRS_HAVE_C10D
    std::thread hb_thread;
    ~trs_dist();
#endif
};

namespace {

constexpr size_t kDefaultBucketBytes = size_t{25} << 20;  // DistributedDataParallel's bucket_cap_mb = 25

double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An environment variable as an integer in [lo, hi]; `fallback` when unset and allowed (has_fallback).
long env_int(const char *name, long lo, long hi, bool has_fallback, long fallback)
{
    const char *v = std::getenv(name);
    if (!v || !*v) {
        if (has_fallback) return fallback;
        throw trs::invalid(std::string("environment variable ") + name + " is not set (torchrun sets RANK, " +
                           "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
    }
    char *end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        throw trs::invalid(std::string("environment variable ") + name + "='" + v + "' is not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}

#if TRS_HAVE_C10D
std::string lost_ranks(trs_dist &d);

// Wait for a collective; whatever it failed with becomes a comm_failure (TRS_E_DIST) naming the operation and, from
// the heartbeats, the rank that was lost.
void wait_for(trs_dist &d, const c10::intrusive_ptr<c10d::Work> &work, const char *what)
{
    std::string msg;
    try {
        work->wait();
        return;
    } catch (const c10::Error &e) {
        msg = e.what_without_backtrace();
    } catch (const std::exception &e) {
        msg = e.what();
    }
    throw trs::comm_failure(std::string(what) + " failed on rank " + std::to_string(d.rank) + ": " + lost_ranks(d) +
                            " (" + msg + ")");
}

// Run `op` on the backend for tensor `t`: NCCL for a CUDA tensor (in builds that have it), Gloo otherwise (Gloo
// also takes CUDA tensors, through the host, where NCCL is missing). NCCL's group is made on the first CUDA
// collective -- every rank makes it there, as every rank runs every collective -- because ProcessGroupNCCL refuses
// to exist on a machine without GPUs, where a CUDA build may still run `device: cpu`. Its store keys live under
// "nccl/", apart from Gloo's (torch.distributed gives each backend such a prefix).
template <typename Op>
c10::intrusive_ptr<c10d::Work> on_backend(trs_dist &d, const torch::Tensor &t, Op op)
{
#if TRS_HAVE_NCCL
    if (t.is_cuda()) {
        if (!d.nccl) {
            auto opts = c10d::ProcessGroupNCCL::Options::create();
            opts->timeout = d.timeout;
            d.nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl/", d.store),
                                                                 d.rank, d.world_size, opts);
        }
        return op(*d.nccl);
    }
#endif
    (void)t;
    return op(*d.gloo);
}

void allreduce_sum(trs_dist &d, torch::Tensor &t, const char *what)
{
    const double t0 = now_seconds();
    std::vector<torch::Tensor> ts{t};
    wait_for(d, on_backend(d, t, [&](auto &pg) { return pg.allreduce(ts); }), what);
    d.allreduce_seconds += now_seconds() - t0;
    d.allreduce_calls++;
    d.allreduce_bytes += static_cast<int64_t>(t.numel() * t.element_size());
}
#endif

trs_dist &checked(trs_dist *d)
{
    if (!d) throw trs::invalid("process group handle is NULL");
#if TRS_HAVE_C10D
    if (!d->gloo) throw trs::invalid("the process group was not created");
#endif
    return *d;
}

}  // namespace

extern "C" int trs_dist_available(void) { return TRS_HAVE_C10D; }

namespace
{
// torchrun's restart count (TORCHELASTIC_RESTART_COUNT), or NULL when unset or empty.
const char *attempt_env()
{
    const char *a = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return a && *a ? a : nullptr;
}
} // namespace

namespace {

// The rendezvous gave up because its caller asked it to stop (TRS_E_STOPPED).
struct stopped : std::runtime_error {
    using std::runtime_error::runtime_error;
};

using steady = std::chrono::steady_clock;

#if TRS_HAVE_C10D
// Whether something accepts TCP connections at addr:port within timeout_ms (a plain connect, closed at once; the
// store's server takes a client that leaves without a word).
bool port_answers(const char *addr, long port, int timeout_ms)
{
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(addr, std::to_string(port).c_str(), &hints, &res) != 0) return false;
    bool ok = false;
    for (addrinfo *a = res; a && !ok; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            pollfd pfd{fd, POLLOUT, 0};
            int soerr = 0;
            socklen_t len = sizeof soerr;
            ok =
                poll(&pfd, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

// The store at addr:port: rank 0 serves it (unless torchrun's agent does), the others connect to it. A client
// first waits for the port to answer -- probing every 100 ms until `deadline`, asking should_stop in between --
// and only then connects: libtorch's own connect loop would wait the whole timeout deaf to signals, logging each
// refused attempt.
c10::intrusive_ptr<c10d::Store> connect_store(const char *addr, long port, bool server, std::size_t world,
                                              std::chrono::milliseconds timeout, steady::time_point deadline,
                                              double timeout_seconds, int (*should_stop)(void *), void *ctx,
                                              const std::string &where)
{
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = server;
    so.numWorkers = world;
    so.waitWorkers = false; /* the join count below waits, bounded and stoppable */
    so.timeout = timeout;
    while (!server && !port_answers(addr, port, 100)) {
        if (should_stop && should_stop(ctx)) throw stopped("stopped while waiting for the store at " + where);
        if (steady::now() >= deadline) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%g", timeout_seconds);
            throw trs::comm_failure("nobody answered at " + where + " within dist.timeout_seconds (" + secs +
                                    " s): rank 0 did not start, or died");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!server) /* it answers: the rest of the time, at least a second, for the store's handshake */
        so.timeout = std::max(std::chrono::milliseconds(1000),
                              std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()));
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, so);
    store->setTimeout(timeout);
    return store;
}

// Every rank adds 1 to the store's join count and waits until it reaches `world`: at most until `deadline`, and
// asking should_stop every 20 ms. A rank that never started or died before joining fails it here, by name of the
// count, instead of leaving the others in Gloo's connect for another timeout.
void join(c10d::Store &store, int world, steady::time_point deadline, double timeout_seconds,
          int (*should_stop)(void *), void *ctx, const std::string &where)
{
    static const std::string key = "trainrun/joined";
    int64_t joined = store.add(key, 1);
    while (joined < world) {
        if (should_stop && should_stop(ctx))
            throw stopped("stopped during the rendezvous at " + where + " (" + std::to_string(joined) + " of " +
                          std::to_string(world) + " ranks had joined)");
        if (steady::now() >= deadline) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%g", timeout_seconds);
            throw trs::comm_failure("only " + std::to_string(joined) + " of " + std::to_string(world) +
                                    " ranks joined the rendezvous at " + where + " within dist.timeout_seconds (" +
                                    secs + " s): a rank did not start or died");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        joined = store.add(key, 0);
    }
}

// ---------------------------------------------------------------------------------------------- heartbeats
// Every rank beats through the store -- its own connection, from a thread of its own -- adding 1 to
// "trainrun/heartbeat/<rank>" every kBeat and reading every rank's count back. When a collective fails, the rank
// announces it ("trainrun/saw_failure/<rank>": alive, it saw the failure too) and watches the counts for at most
// kStale more: a peer that neither beats again nor announced is the one that was lost. A collective that timed out
// (a node whose link was cut) finds the lost ranks silent for the whole timeout and names them at once; a rank that
// cannot reach the store itself says so (the store's node, or the way to it, is what was lost).
constexpr auto kBeat = std::chrono::milliseconds(250);
constexpr auto kStale = std::chrono::milliseconds(1000);

struct heartbeat {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false, exited = false, failed = false, announced_failure = false;
    int rank = 0, world = 1;
    std::string addr, prefix, server; // the store's address, key prefix, who serves it (for messages)
    long port = 0;
    std::chrono::milliseconds io_timeout{5000};
    // Filled by the thread under mu: each round's counts, when each rank's count last changed, whether the rank
    // announced a failure, the number of completed rounds and when the last one started.
    std::vector<int64_t> beats;
    std::vector<steady::time_point> changed;
    std::vector<char> saw_failure;
    int64_t rounds = 0;
    steady::time_point round_started, store_ok, store_failed_at;
    std::string store_err;
};

c10::intrusive_ptr<c10d::Store> heartbeat_store(const heartbeat &h)
{
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(h.port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = h.io_timeout;
    c10::intrusive_ptr<c10d::Store> s = c10::make_intrusive<c10d::TCPStore>(h.addr, so);
    if (!h.prefix.empty()) s = c10::make_intrusive<c10d::PrefixStore>(h.prefix, s);
    return s;
}

void heartbeat_loop(std::shared_ptr<heartbeat> h)
{
    c10::intrusive_ptr<c10d::Store> store;
    const std::string beat = "trainrun/heartbeat/", saw = "trainrun/saw_failure/";
    std::vector<int64_t> counts(static_cast<size_t>(h->world)), flags(static_cast<size_t>(h->world));
    for (;;) {
        bool announce;
        {
            std::lock_guard<std::mutex> lk(h->mu);
            if (h->stop) break;
            announce = h->failed && !h->announced_failure;
        }
        const auto started = steady::now();
        std::string err;
        try {
            if (!store) store = heartbeat_store(*h);
            store->add(beat + std::to_string(h->rank), 1);
            if (announce) store->add(saw + std::to_string(h->rank), 1);
            for (int r = 0; r < h->world; r++) {
                counts[static_cast<size_t>(r)] = store->add(beat + std::to_string(r), 0);
                flags[static_cast<size_t>(r)] = store->add(saw + std::to_string(r), 0);
            }
        } catch (const c10::Error &e) {
            err = e.what_without_backtrace();
        } catch (const std::exception &e) {
            err = e.what();
        }
        if (!err.empty()) store.reset(); /* connect afresh next round: a timed-out connection is out of step */
        std::unique_lock<std::mutex> lk(h->mu);
        const auto now = steady::now();
        if (err.empty()) {
            for (size_t r = 0; r < counts.size(); r++) {
                if (counts[r] != h->beats[r]) h->changed[r] = now;
                h->beats[r] = counts[r];
                h->saw_failure[r] = flags[r] > 0;
            }
            if (announce) h->announced_failure = true;
            h->rounds++;
            h->round_started = started;
            h->store_ok = now;
        } else {
            h->store_err = err.substr(0, err.find('\n'));
            h->store_failed_at = now;
        }
        h->cv.notify_all();
        h->cv.wait_for(lk, kBeat, [&] { return h->stop || (h->failed && !h->announced_failure); });
    }
    std::lock_guard<std::mutex> lk(h->mu);
    h->exited = true;
    h->cv.notify_all();
}

std::string seconds_str(steady::duration d)
{
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(d).count());
    return b;
}

// What the heartbeats say about a collective that just failed on this rank (see above): "rank R was lost (no
// heartbeat for S)", "ranks R, Q were lost ...", that the store cannot be reached, or that every peer is alive. A
// peer is lost when its count stood still for kStale while this rank's rounds with the store went on; it is alive
// when it announced the failure or beat again after it. Waits at most kStale + 4 beats: not at all for peers silent
// that long already (a collective that timed out) or once this rank's own rounds fail (the store is gone), and
// about kStale after a peer died and failed the collective at once.
std::string lost_ranks(trs_dist &d)
{
    const std::shared_ptr<heartbeat> h = d.hb;
    if (!h) return "a peer died, closed its connection or timed out";
    std::unique_lock<std::mutex> lk(h->mu);
    const auto t_fail = steady::now();
    h->failed = true;
    h->cv.notify_all();
    const auto deadline = t_fail + kStale + 4 * kBeat;
    std::vector<int64_t> base; // the counts of the first round that started after the failure
    std::vector<int> lost;
    std::vector<steady::duration> silent;
    bool store_lost = false;
    for (;;) {
        const auto now = steady::now();
        if (base.empty() && h->rounds > 0 && h->round_started >= t_fail) base = h->beats;
        store_lost = now - h->store_ok >= kStale || h->store_failed_at >= t_fail;
        lost.clear();
        silent.clear();
        bool pending = false;
        for (int r = 0; r < h->world; r++) {
            const auto k = static_cast<size_t>(r);
            if (r == h->rank || h->saw_failure[k] || (!base.empty() && h->beats[k] > base[k])) continue; /* alive */
            if (h->store_ok - h->changed[k] >= kStale) {
                lost.push_back(r);
                silent.push_back(now - h->changed[k]);
            } else {
                pending = true;
            }
        }
        if (!pending || store_lost || now >= deadline) break;
        h->cv.wait_for(lk, std::chrono::milliseconds(50));
    }
    const auto now = steady::now();
    if (!lost.empty()) {
        std::string s = lost.size() == 1 ? "rank " : "ranks ";
        for (size_t i = 0; i < lost.size(); i++) s += (i ? ", " : "") + std::to_string(lost[i]);
        s += lost.size() == 1 ? " was lost (no heartbeat for " : " were lost (no heartbeat for ";
        for (size_t i = 0; i < silent.size(); i++) s += (i ? ", " : "") + seconds_str(silent[i]);
        return s + ")";
    }
    if (store_lost) {
        std::string s = "the store at " + h->addr + ":" + std::to_string(h->port) + ", which " + h->server +
                        " serves, has not answered this rank for " + seconds_str(now - h->store_ok);
        if (!h->store_err.empty()) s += " (" + h->store_err + ")";
        return s + ": " + h->server + ", or the network between this node and its node, was lost";
    }
    return "every peer is still alive (a connection was closed or a collective timed out)";
}

// Start this rank's heartbeat thread (after the rendezvous: every rank's keys exist by the first round).
void start_heartbeat(trs_dist &d, const std::string &addr, long port, const std::string &prefix, bool agent_store,
                     std::chrono::milliseconds timeout)
{
    auto h = std::make_shared<heartbeat>();
    h->rank = d.rank;
    h->world = d.world_size;
    h->addr = addr;
    h->port = port;
    h->prefix = prefix;
    h->server = agent_store ? "torchrun's agent" : "rank 0";
    h->io_timeout = std::max(std::chrono::milliseconds(1000), std::min(timeout, std::chrono::milliseconds(5000)));
    const auto now = steady::now();
    h->beats.assign(static_cast<size_t>(d.world_size), 0);
    h->changed.assign(static_cast<size_t>(d.world_size), now);
    h->saw_failure.assign(static_cast<size_t>(d.world_size), 0);
    h->store_ok = now;
    d.hb = h;
    d.hb_thread = std::thread(heartbeat_loop, h);
}
#endif

}  // namespace

#if TRS_HAVE_C10D
// Stop the heartbeat thread: joined when it ends within 200 ms; left to finish on its own otherwise (a round
// waiting on a store that no longer answers), holding its own references to what it uses.
trs_dist::~trs_dist()
{
    if (!hb_thread.joinable()) return;
    bool exited;
    {
        std::unique_lock<std::mutex> lk(hb->mu);
        hb->stop = true;
        hb->cv.notify_all();
        exited = hb->cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return hb->exited; });
    }
    if (exited) hb_thread.join();
    else hb_thread.detach();
}
#endif

extern "C" trs_status trs_dist_create_from_env(double timeout_seconds, int (*should_stop)(void *ctx), void *ctx,
                                               trs_dist **out)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, out != nullptr, "out is NULL");
    *out = nullptr;
    TRS_CHECK_ARG(err, timeout_seconds > 0, "timeout_seconds must be > 0, got " + std::to_string(timeout_seconds));
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        auto d = std::make_unique<trs_dist>();
        d->world_size = static_cast<int>(env_int("WORLD_SIZE", 1, 1 << 20, false, 0));
        d->rank = static_cast<int>(env_int("RANK", 0, d->world_size - 1, false, 0));
        d->local_rank = static_cast<int>(env_int("LOCAL_RANK", 0, 1 << 20, true, d->rank));
        const long port = env_int("MASTER_PORT", 1, 65535, false, 0);
        const char *addr = std::getenv("MASTER_ADDR");
        if (!addr || !*addr)
            throw trs::invalid("environment variable MASTER_ADDR is not set (torchrun sets RANK, WORLD_SIZE, "
                               "MASTER_ADDR and MASTER_PORT)");
#if TRS_HAVE_C10D
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0));
        const auto deadline = steady::now() + timeout;
        // A collective waits at most the timeout less a margin -- min(4 s, a third of it) -- that the rank keeps
        // for naming the lost rank (lost_ranks) and leaving: a rank whose peer hung is gone within timeout_seconds.
        // Measured with two nodes of two ranks on 2 cores (tests/multinode.sh linkcut): the message comes 0-0.4 s
        // after the collective's timeout, and the node's last rank exits 0.6-2.3 s after that.
        const auto collective_timeout = timeout - std::min(std::chrono::milliseconds(4000), timeout / 3);
        d->timeout = collective_timeout;
        const std::string where = std::string(addr) + ":" + std::to_string(port);
        try {
            // Under torchrun the agent already serves the store at MASTER_ADDR:MASTER_PORT and every worker is a
            // client under the prefix /worker/attempt_<restart count>, as torch.distributed's env:// does
            // (torch/distributed/rendezvous.py, _create_c10d_store); otherwise rank 0 serves it.
            const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
            const bool agent_store = agent && std::string(agent) == "True";
            d->store = connect_store(addr, port, !agent_store && d->rank == 0, static_cast<std::size_t>(d->world_size),
                                     timeout, deadline, timeout_seconds, should_stop, ctx, where);
            if (agent_store)
                d->store = c10::make_intrusive<c10d::PrefixStore>(
                    std::string("/worker/attempt_") + (attempt_env() ? attempt_env() : "0"), d->store);
            join(*d->store, d->world_size, deadline, timeout_seconds, should_stop, ctx, where);
            auto opts = c10d::ProcessGroupGloo::Options::create(collective_timeout);
            const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
            const std::string a(addr);
            if (ifname && *ifname)
                opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
            else if (a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1")
                opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(a == "localhost" ? "127.0.0.1" : a));
            else
                opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
            opts->threads = 2;
            d->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(d->store, d->rank, d->world_size, opts);
            start_heartbeat(*d, a, port,
                            agent_store ? std::string("/worker/attempt_") + (attempt_env() ? attempt_env() : "0") : "",
                            agent_store, timeout);
        } catch (const stopped &e) {
            trs::set_error(err, e.what());
            return TRS_E_STOPPED;
        } catch (const trs::comm_failure &e) {
            throw trs::comm_failure("rendezvous at " + where + " as rank " + std::to_string(d->rank) + " of " +
                                    std::to_string(d->world_size) + " failed: " + e.what());
        } catch (const c10::Error &e) {
            throw trs::comm_failure("rendezvous at " + where + " as rank " + std::to_string(d->rank) + " of " +
                                    std::to_string(d->world_size) + " failed: " + e.what_without_backtrace());
        } catch (const std::exception &e) {
            throw trs::comm_failure("rendezvous at " + where + " as rank " + std::to_string(d->rank) + " of " +
                                    std::to_string(d->world_size) + " failed: " + e.what());
        }
#else
        (void)port;
        (void)should_stop;
        (void)ctx;
        throw trs::invalid("this trainrun was built without c10d (libtorch without Gloo, or no Gloo headers): "
                           "distributed training is unavailable");
#endif
        *out = d.release();
        err.clear();
        return TRS_OK;
    })
}

extern "C" void trs_dist_free(trs_dist *dist)
{
    try {
        delete dist;
    } catch (...) {
    }
}

extern "C" const char *trs_dist_errmsg(const trs_dist *dist)
{
    return dist ? dist->err.c_str() : "process group handle is NULL";
}

extern "C" trs_status trs_dist_info(const trs_dist *dist, int *rank, int *world_size, int *local_rank)
{
    if (!dist) return TRS_E_INVALID;
    if (rank) *rank = dist->rank;
    if (world_size) *world_size = dist->world_size;
    if (local_rank) *local_rank = dist->local_rank;
    return TRS_OK;
}

extern "C" trs_status trs_dist_broadcast_model(trs_dist *dist, trs_model *model)
{
    if (!dist) return TRS_E_INVALID;
    TRS_CHECK_ARG(dist->err, model != nullptr, "model is NULL");
    TRS_GUARD(dist->err, {
        trs_dist &d = checked(dist);
#if TRS_HAVE_C10D
        torch::NoGradGuard no_grad;
        for (auto &kv : trs::state_dict(*model)) {
            torch::Tensor buf = kv.second.detach().contiguous().clone();
            std::vector<torch::Tensor> ts{buf};
            wait_for(d, on_backend(d, buf, [&](auto &pg) { return pg.broadcast(ts); }),
                     ("broadcast of " + kv.first).c_str());
            kv.second.copy_(buf);
        }
#else
        (void)d;
#endif
        d.err.clear();
        return TRS_OK;
    })
}

void trs::average_grads(trs_dist &d, trs_model &m, size_t bucket_bytes, int *nonfinite)
{
#if TRS_HAVE_C10D
    if (!d.gloo) throw trs::invalid("the process group was not created");
    const double t0 = now_seconds();
    torch::NoGradGuard no_grad;
    if (bucket_bytes == 0) bucket_bytes = kDefaultBucketBytes;
    std::vector<torch::Tensor> params = m.parameters();
    for (auto &p : params) {
        if (p.scalar_type() != torch::kFloat32)
            throw trs::invalid("gradient averaging handles float32 parameters only");
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
    // Buckets of consecutive parameters, each at most bucket_bytes (a larger parameter is a bucket of its own).
    std::vector<std::pair<size_t, size_t>> buckets;  // [begin, end) into params
    size_t begin = 0, bytes = 0;
    for (size_t i = 0; i < params.size(); i++) {
        const size_t b = static_cast<size_t>(params[i].numel()) * sizeof(float);
        if (i > begin && bytes + b > bucket_bytes) {
            buckets.emplace_back(begin, i);
            begin = i;
            bytes = 0;
        }
        bytes += b;
    }
    buckets.emplace_back(begin, params.size());
    for (size_t k = 0; k < buckets.size(); k++) {
        const bool last = k + 1 == buckets.size();
        std::vector<torch::Tensor> flat;
        for (size_t i = buckets[k].first; i < buckets[k].second; i++) flat.push_back(params[i].grad().reshape({-1}));
        if (last)  // the non-finite-loss count rides along as one more element
            flat.push_back(torch::full({1}, nonfinite ? static_cast<float>(*nonfinite) : 0.0f,
                                       torch::TensorOptions().dtype(torch::kFloat32).device(m.device)));
        torch::Tensor bucket = torch::cat(flat);
        allreduce_sum(d, bucket, "gradient all-reduce");
        int64_t off = 0;
        for (size_t i = buckets[k].first; i < buckets[k].second; i++) {
            torch::Tensor g = params[i].grad();
            const int64_t n = g.numel();
            // Sum, then divide by the world size: DistributedDataParallel's averaging (exact for powers of two).
            g.copy_(bucket.narrow(0, off, n).view(g.sizes()).div(static_cast<double>(d.world_size)));
            off += n;
        }
        if (last && nonfinite) *nonfinite = static_cast<int>(bucket[off].item<float>());
    }
    d.grad_sync_seconds += now_seconds() - t0;
#else
    (void)d;
    (void)m;
    (void)bucket_bytes;
    (void)nonfinite;
    throw trs::invalid("this trainrun was built without c10d");
#endif
}

namespace {
template <typename T>
trs_status allreduce_values(trs_dist *dist, T *values, size_t n, torch::ScalarType type)
{
    if (!dist) return TRS_E_INVALID;
    TRS_CHECK_ARG(dist->err, values != nullptr || n == 0, "values is NULL");
    TRS_GUARD(dist->err, {
        trs_dist &d = checked(dist);
        if (n == 0) return TRS_OK;
#if TRS_HAVE_C10D
        torch::Tensor t = torch::from_blob(values, {static_cast<int64_t>(n)}, type).clone();
        allreduce_sum(d, t, "scalar all-reduce");
        std::memcpy(values, t.data_ptr(), n * sizeof(T));
#else
        (void)type;
#endif
        d.err.clear();
        return TRS_OK;
    })
}
}  // namespace

extern "C" trs_status trs_dist_allreduce_double(trs_dist *dist, double *values, size_t n)
{
    return allreduce_values(dist, values, n, torch::kFloat64);
}

extern "C" trs_status trs_dist_allreduce_int64(trs_dist *dist, int64_t *values, size_t n)
{
    return allreduce_values(dist, values, n, torch::kInt64);
}

extern "C" trs_status trs_dist_barrier(trs_dist *dist)
{
    if (!dist) return TRS_E_INVALID;
    TRS_GUARD(dist->err, {
        trs_dist &d = checked(dist);
#if TRS_HAVE_C10D
        wait_for(d, d.gloo->barrier(), "barrier");
#endif
        d.err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_dist_allgather_bytes(trs_dist *dist, const void *src, size_t nbytes, void *dst)
{
    if (!dist) return TRS_E_INVALID;
    TRS_CHECK_ARG(dist->err, src != nullptr && dst != nullptr, "src or dst is NULL");
    TRS_CHECK_ARG(dist->err, nbytes > 0, "nbytes must be > 0");
    TRS_GUARD(dist->err, {
        trs_dist &d = checked(dist);
#if TRS_HAVE_C10D
        torch::Tensor in = torch::from_blob(const_cast<void *>(src), {static_cast<int64_t>(nbytes)}, torch::kUInt8).clone();
        std::vector<std::vector<torch::Tensor>> outs(1);
        for (int r = 0; r < d.world_size; r++) outs[0].push_back(torch::empty({static_cast<int64_t>(nbytes)}, torch::kUInt8));
        std::vector<torch::Tensor> ins{in};
        wait_for(d, d.gloo->allgather(outs, ins), "all-gather");
        for (int r = 0; r < d.world_size; r++)
            std::memcpy(static_cast<unsigned char *>(dst) + static_cast<size_t>(r) * nbytes, outs[0][r].data_ptr(), nbytes);
#endif
        d.err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_dist_stats(const trs_dist *dist, double *allreduce_seconds, double *grad_sync_seconds,
                                     int64_t *allreduce_calls, int64_t *allreduce_bytes)
{
    if (!dist) return TRS_E_INVALID;
    if (allreduce_seconds) *allreduce_seconds = dist->allreduce_seconds;
    if (grad_sync_seconds) *grad_sync_seconds = dist->grad_sync_seconds;
    if (allreduce_calls) *allreduce_calls = dist->allreduce_calls;
    if (allreduce_bytes) *allreduce_bytes = dist->allreduce_bytes;
    return TRS_OK;
}
