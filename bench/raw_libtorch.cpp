// raw_libtorch.cpp -- the limit for any harness: a plain libtorch C++ training loop, no trainrun code at all.
//
//   raw_libtorch WORKLOAD [--steps N] [--warmup W] [--threads T] [--data DIR] [--count-correct] [--optimizer-share]
//   WORKLOAD: mlp_256    784-256-10 MLP, batch 64
//             convnet    the Fashion-MNIST convnet of models/convnet.yaml, batch 128
//             data_bound 784-10 linear model, batch 1024 (the batch gather dominates)
//
// What it does is what a libtorch user would write, with trainrun's defaults: 1 intra-op thread (--threads),
// 1 inter-op thread, OpenBLAS pinned to 1 thread; Fashion-MNIST read from the IDX .gz files with zlib, scaled to
// [0, 1] and normalised with mean 0.2860 / std 0.3530 once, all 60000 training samples held in one tensor; every
// epoch a torch::randperm order, each batch an index_select of it (drop_last); AdamW(lr 1e-3, weight_decay 1e-4);
// each step: grads set to none, forward, cross_entropy, loss.item<double>(), backward, optimizer step.
// --count-correct adds what trainrun's step also computes, the batch's correct count (argmax, eq, sum, item under
// no_grad), so that the remaining difference to trainrun is the harness itself.
// W warm-up steps are run, then N steps are timed. It prints one line, the format bench/eager.py prints too:
//   RESULT form=raw workload=mlp_256 threads=1 batch=64 warmup=50 steps=2000 seconds=S steps_per_s=X
//          samples_per_s=Y data_share=D
// data_share is the fraction of the timed wall time spent making batches (randperm + index_select).
// --optimizer-share also times opt.step() (torch::optim::AdamW's step) on its own and appends optimizer_share=O, its
// fraction of the timed wall time (issue 20: what a fused optimizer step could save).
//
// Build: with CMake (cmake -S bench -B bench/.build && cmake --build bench/.build), as bench/run.sh does, or
// inside the main build with -DTRAINRUN_BUILD_BENCH=ON. Without CMake (Debian's libtorch-dev):
//   g++ -O2 -std=c++17 bench/raw_libtorch.cpp -o raw_libtorch -I/usr/include/torch/csrc/api/include -ltorch -ltorch_cpu -lc10 -lz -ldl
#include <torch/torch.h>

#include <dlfcn.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0)
{
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::vector<unsigned char> read_gz(const std::string &path)
{
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    std::vector<unsigned char> out;
    unsigned char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
    const bool bad = n < 0;
    gzclose(f);
    if (bad) throw std::runtime_error("read error in " + path);
    return out;
}

uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

// Images [N, 1, 28, 28] float32, normalised; labels [N] int64.
void load_fashion_mnist(const std::string &root, torch::Tensor &x, torch::Tensor &y)
{
    const auto img = read_gz(root + "/train-images-idx3-ubyte.gz");
    const auto lbl = read_gz(root + "/train-labels-idx1-ubyte.gz");
    if (img.size() < 16 || be32(img.data()) != 0x803) throw std::runtime_error("bad image file");
    if (lbl.size() < 8 || be32(lbl.data()) != 0x801) throw std::runtime_error("bad label file");
    const int64_t n = be32(img.data() + 4), h = be32(img.data() + 8), w = be32(img.data() + 12);
    if ((int64_t)be32(lbl.data() + 4) != n || (int64_t)img.size() != 16 + n * h * w || (int64_t)lbl.size() != 8 + n)
        throw std::runtime_error("image and label files do not match");
    x = torch::empty({n, 1, h, w}, torch::kFloat32);
    y = torch::empty({n}, torch::kInt64);
    float *xp = x.data_ptr<float>();
    int64_t *yp = y.data_ptr<int64_t>();
    const float mean = 0.2860f, stdev = 0.3530f;
    for (int64_t i = 0; i < n * h * w; i++) xp[i] = ((float)img[16 + i] / 255.0f - mean) / stdev;
    for (int64_t i = 0; i < n; i++) yp[i] = lbl[8 + i];
}

torch::nn::Sequential make_model(const std::string &workload, int64_t &batch)
{
    namespace nn = torch::nn;
    if (workload == "mlp_256") {
        batch = 64;
        return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
    }
    if (workload == "convnet") {
        batch = 128;
        return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                              nn::MaxPool2d(nn::MaxPool2dOptions(2)),
                              nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
                              nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(), nn::Linear(3136, 128),
                              nn::ReLU(), nn::Dropout(0.3), nn::Linear(128, 10));
    }
    if (workload == "data_bound") {
        batch = 1024;
        return nn::Sequential(nn::Flatten(), nn::Linear(784, 10));
    }
    throw std::invalid_argument("unknown workload '" + workload + "' (mlp_256, convnet, data_bound)");
}

// The timed loop, a function of its own so that callgrind can count its instructions alone
// (bench/callgrind_overhead.sh: --toggle-collect / inclusive cost of train_loop).
struct loop_result {
    double secs, data_s, opt_s, loss_sum;
    int64_t correct;
};

__attribute__((noinline)) loop_result train_loop(torch::nn::Sequential &model, torch::optim::AdamW &opt,
                                                 const torch::Tensor &x, const torch::Tensor &y, int64_t batch,
                                                 long warmup, long steps, bool count_correct, bool time_opt)
{
    const int64_t n = x.size(0);
    torch::Tensor perm;
    int64_t pos = n;  // start a new epoch at the first batch
    double data_s = 0.0, opt_s = 0.0, loss_sum = 0.0;
    int64_t correct = 0;
    clock_type::time_point t0 = clock_type::now();
    for (long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            t0 = clock_type::now();
            data_s = 0.0;
            opt_s = 0.0;
        }
        const auto d0 = clock_type::now();
        if (pos + batch > n) {  // drop_last
            perm = torch::randperm(n, torch::kInt64);
            pos = 0;
        }
        const torch::Tensor idx = perm.slice(0, pos, pos + batch);
        const torch::Tensor xb = x.index_select(0, idx), yb = y.index_select(0, idx);
        pos += batch;
        data_s += seconds_since(d0);

        for (auto &p : model->parameters()) p.mutable_grad() = torch::Tensor();
        const torch::Tensor logits = model->forward(xb);
        const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, yb);
        loss_sum += loss.item<double>();
        if (count_correct) {
            torch::NoGradGuard no_grad;
            correct += logits.argmax(1).eq(yb).sum().item<int64_t>();
        }
        loss.backward();
        if (time_opt) {
            const auto o0 = clock_type::now();
            opt.step();
            opt_s += seconds_since(o0);
        } else {
            opt.step();
        }
    }
    return {seconds_since(t0), data_s, opt_s, loss_sum, correct};
}

int usage()
{
    std::fprintf(stderr, "usage: raw_libtorch mlp_256|convnet|data_bound [--steps N] [--warmup W] [--threads T] "
                         "[--data DIR] [--count-correct] [--optimizer-share]\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const std::string workload = argv[1];
    long steps = -1, warmup = -1;
    int threads = 1;
    bool count_correct = false, time_opt = false;
    std::string root = "/usr/share/datasets/fashion-mnist";
    for (int i = 2; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--count-correct") {
            count_correct = true;
            continue;
        }
        if (a == "--optimizer-share") {
            time_opt = true;
            continue;
        }
        if (i + 1 >= argc) return usage();
        if (a == "--steps") steps = std::atol(argv[++i]);
        else if (a == "--warmup") warmup = std::atol(argv[++i]);
        else if (a == "--threads") threads = std::atoi(argv[++i]);
        else if (a == "--data") root = argv[++i];
        else return usage();
    }
    if (threads < 1) return usage();
    try {
        // trainrun's thread set-up (shim/src/core.cpp): BLAS pinned to 1, intra-op T, inter-op 1.
        using blas_set_fn = void (*)(int);
        if (auto set = reinterpret_cast<blas_set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
        torch::set_num_threads(threads);
        at::set_num_interop_threads(1);

        int64_t batch = 0;
        torch::manual_seed(0);
        auto model = make_model(workload, batch);
        if (steps < 0) steps = workload == "convnet" ? 120 : 2000;
        if (warmup < 0) warmup = workload == "convnet" ? 10 : 50;

        torch::Tensor x, y;
        load_fashion_mnist(root, x, y);
        torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
        model->train();

        const loop_result r = train_loop(model, opt, x, y, batch, warmup, steps, count_correct, time_opt);
        const double secs = r.secs, data_s = r.data_s, loss_sum = r.loss_sum;
        if (!std::isfinite(loss_sum)) throw std::runtime_error("non-finite loss");
        std::printf("RESULT form=%s workload=%s threads=%d batch=%lld warmup=%ld steps=%ld seconds=%.4f "
                    "steps_per_s=%.2f samples_per_s=%.1f data_share=%.4f",
                    count_correct ? "raw_acc" : "raw", workload.c_str(), threads, (long long)batch, warmup, steps, secs, steps / secs,
                    steps * (double)batch / secs, data_s / secs);
        if (time_opt) std::printf(" optimizer_share=%.4f", r.opt_s / secs);
        std::printf("\n");
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "raw_libtorch: %s\n", e.what());
        return 1;
    }
}
