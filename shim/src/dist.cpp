// dist.cpp -- process groups from libtorch's c10d: a TCPStore rendezvous from torchrun's environment variables,
// ProcessGroupGloo for host tensors and, in CUDA builds, ProcessGroupNCCL for CUDA tensors (a model on a CUDA
// device: its broadcast and gradient buckets), and the few collectives data-parallel training needs: broadcast of
// the model, bucketed gradient averaging, scalar all-reduce, barrier, all-gather of bytes.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

struct trs_dist {
    int rank = 0, world_size = 1, local_rank = 0;
#if TRS_HAVE_C10D
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
    std::chrono::milliseconds timeout{0};
#if TRS_HAVE_NCCL
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // CUDA tensors only; made by the first CUDA collective
#endif
#endif
    double allreduce_seconds = 0.0, grad_sync_seconds = 0.0;
    int64_t allreduce_calls = 0, allreduce_bytes = 0;
    std::string err;
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
// Wait for a collective; whatever it failed with becomes a comm_failure (TRS_E_DIST) naming the operation.
void wait_for(trs_dist &d, const c10::intrusive_ptr<c10d::Work> &work, const char *what)
{
    try {
        work->wait();
    } catch (const c10::Error &e) {
        throw trs::comm_failure(std::string(what) + " failed on rank " + std::to_string(d.rank) +
                                " (a peer died, closed its connection or timed out): " + e.what_without_backtrace());
    } catch (const std::exception &e) {
        throw trs::comm_failure(std::string(what) + " failed on rank " + std::to_string(d.rank) +
                                " (a peer died, closed its connection or timed out): " + e.what());
    }
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
#endif

}  // namespace

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
        d->timeout = timeout;
        const std::string where = std::string(addr) + ":" + std::to_string(port);
        try {
            // Under torchrun the agent already serves the store at MASTER_ADDR:MASTER_PORT and every worker is a
            // client under the prefix /worker/attempt_<restart count>, as torch.distributed's env:// does
            // (torch/distributed/rendezvous.py, _create_c10d_store); otherwise rank 0 serves it.
            const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
            const bool agent_store = agent && std::string(agent) == "True";
            d->store = connect_store(addr, port, !agent_store && d->rank == 0, static_cast<std::size_t>(d->world_size),
                                     timeout, deadline, timeout_seconds, should_stop, ctx, where);
            if (agent_store) {
                const char *attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
                d->store = c10::make_intrusive<c10d::PrefixStore>(
                    std::string("/worker/attempt_") + (attempt && *attempt ? attempt : "0"), d->store);
            }
            join(*d->store, d->world_size, deadline, timeout_seconds, should_stop, ctx, where);
            auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
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

extern "C" trs_status trs_dist_average_grads(trs_dist *dist, trs_model *model, size_t bucket_bytes, int *nonfinite)
{
    if (!dist) return TRS_E_INVALID;
    TRS_CHECK_ARG(dist->err, model != nullptr, "model is NULL");
    TRS_GUARD(dist->err, {
        trs::average_grads(checked(dist), *model, bucket_bytes, nonfinite);
        dist->err.clear();
        return TRS_OK;
    })
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
