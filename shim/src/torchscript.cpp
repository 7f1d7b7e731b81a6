// torchscript.cpp -- TorchScript models: loading an archive saved by torch.jit.save(torch.jit.script(m)), the checks
// that refuse what cannot be trained, and the graph-executor setting every TorchScript forward runs under.
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "internal.hpp"

namespace {

// Largest archive a gzip'd file may inflate to: a bound on what a hostile .pt.gz can make us allocate.
constexpr uint64_t kMaxInflatedBytes = uint64_t{4} << 30;

// torch::jit::load of `file`, which is a TorchScript archive (a zip, as torch.jit.save writes it) or that archive
// compressed with gzip (`gzip -9 m.pt` -> m.pt.gz; told apart by gzip's magic bytes 1f 8b, not by the name). A
// gzip'd archive is inflated into memory (at most kMaxInflatedBytes). Either way the bytes are checked first and
// libtorch loads the checked archive from memory (trs::check_archive, archive.cpp).
torch::jit::Module load_archive(const std::string &file)
{
    unsigned char magic[2] = {0, 0};
    if (FILE *f = std::fopen(file.c_str(), "rb")) {
        const size_t got = std::fread(magic, 1, 2, f);
        std::fclose(f);
        if (got < 2) magic[0] = 0;
    }
    if (magic[0] != 0x1f || magic[1] != 0x8b) {
        std::string bytes; /* checked first (archive.cpp): libtorch's reader crashes on some malformed archives */
        FILE *f = std::fopen(file.c_str(), "rb");
        if (!f) throw trs::invalid(file + ": not a TorchScript archive: cannot open: " + std::strerror(errno));
        char chunk[1 << 16];
        for (size_t got; (got = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.append(chunk, got);
        std::fclose(f);
        std::istringstream in(
            trs::check_archive(file, reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size()));
        return torch::jit::load(in, torch::kCPU);
    }
    gzFile gz = gzopen(file.c_str(), "rb");
    if (!gz) throw trs::invalid(file + ": cannot open");
    std::string bytes;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(gz, buf, sizeof buf)) > 0) {
        if (bytes.size() + static_cast<size_t>(n) > kMaxInflatedBytes) {
            gzclose(gz);
            throw trs::invalid(file + ": gzip'd archive inflates to more than " +
                               std::to_string(kMaxInflatedBytes >> 30) + " GiB");
        }
        bytes.append(buf, static_cast<size_t>(n));
    }
    int zerr = Z_OK;
    const std::string why = n < 0 ? gzerror(gz, &zerr) : "";
    gzclose(gz);
    if (n < 0) throw trs::invalid(file + ": not a valid gzip file at inflated byte " + std::to_string(bytes.size()) +
                                  ": " + why);
    std::istringstream in(
        trs::check_archive(file, reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size()));
    return torch::jit::load(in, torch::kCPU);
}

std::string first_line(const std::string &s) { return s.substr(0, s.find('\n')); }

// The point of an error the TorchScript interpreter raised: its message is a TorchScript traceback ending with the
// original error ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x100 and 784x10)"); other errors'
// first line.
std::string error_summary(const std::string &s)
{
    if (s.find("Traceback of TorchScript") == std::string::npos) return first_line(s);
    size_t end = s.find_last_not_of(" \n");
    if (end == std::string::npos) return s;
    const size_t start = s.rfind('\n', end);
    return s.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// forward(self, x: Tensor, [more arguments with defaults]) -> Tensor, or a message saying what it is instead.
std::string check_forward_schema(const torch::jit::Module &m)
{
    auto method = m.find_method("forward");
    if (!method) return "it has no forward method";
    const c10::FunctionSchema &s = method->function().getSchema();
    const auto &args = s.arguments();  // args[0] is self
    std::ostringstream got;
    got << s;
    if (args.size() < 2 || args[1].type()->kind() != c10::TypeKind::TensorType)
        return "its forward must take one tensor, forward(self, x: Tensor) -> Tensor; it is " + got.str();
    for (size_t i = 2; i < args.size(); i++)
        if (!args[i].default_value())
            return "its forward must take one tensor, forward(self, x: Tensor) -> Tensor; argument '" +
                   args[i].name() + "' has no default: " + got.str();
    if (s.returns().size() != 1 || s.returns()[0].type()->kind() != c10::TypeKind::TensorType)
        return "its forward must return one tensor, forward(self, x: Tensor) -> Tensor; it is " + got.str();
    return "";
}

// Ops whose result depends on train/eval mode, and the index of their mode argument.
struct ModeOp {
    const char *name;
    size_t arg;
};
const ModeOp k_mode_ops[] = {{"aten::batch_norm", 5},           {"aten::dropout", 2},
                             {"aten::dropout_", 2},             {"aten::feature_dropout", 2},
                             {"aten::feature_dropout_", 2},     {"aten::alpha_dropout", 2},
                             {"aten::alpha_dropout_", 2},       {"aten::feature_alpha_dropout", 2},
                             {"aten::feature_alpha_dropout_", 2}};

void find_fixed_mode(const torch::jit::Block *b, std::map<std::string, int> &found)
{
    for (const torch::jit::Node *n : b->nodes()) {
        for (const auto &op : k_mode_ops) {
            if (std::string(n->kind().toQualString()) != op.name || n->inputs().size() <= op.arg) continue;
            if (n->inputs()[op.arg]->node()->kind() == c10::prim::Constant) found[op.name]++;
        }
        for (const torch::jit::Block *sub : n->blocks()) find_fixed_mode(sub, found);
    }
}

// "" or what shows the module was traced: BatchNorm / dropout ops whose training flag is a constant. torch.jit.trace
// records them in the mode the module had while tracing (torch.batch_norm(..., True, ...)), where torch.jit.script
// keeps the `self.training` test, so train()/eval() cannot switch a traced module's BatchNorm or dropout.
std::string check_mode_switchable(const torch::jit::Module &m)
{
    auto graph = m.get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    std::map<std::string, int> found;
    find_fixed_mode(graph->block(), found);
    if (found.empty()) return "";
    std::ostringstream o;
    o << "it looks traced (torch.jit.trace): ";
    bool first = true;
    for (const auto &kv : found) {
        o << (first ? "" : ", ") << kv.second << " x " << kv.first;
        first = false;
    }
    o << " with the train/eval flag fixed when it was recorded, so train() and eval() cannot switch BatchNorm or "
         "dropout; export it with torch.jit.save(torch.jit.script(m), FILE)";
    return o.str();
}

}  // namespace

// The graph executor setting of every TorchScript forward (README "Bring your own model", determinism): the
// optimizing executor off. With it on (libtorch's default), the profiling executor runs the first call(s) as
// profiling runs and then a specialised plan with differentiable subgraphs whose backward comes from the JIT's own
// gradient formulas -- so the step at which a process starts changes the numbers (a resumed run would differ from
// the uninterrupted one) and the gradients are not eager PyTorch's. Off, every call runs the same unoptimised plan
// op by op under autograd, exactly as eager PyTorch runs the Python module. The flag is thread-local in libtorch,
// hence a guard around each call rather than one setting at start-up. TRAINRUN_JIT_OPTIMIZE=1 turns it on, for
// measuring what it costs (bench only; it breaks bit-identical resume).
bool trs::jit_optimize()
{
    static const bool on = [] {
        const char *v = std::getenv("TRAINRUN_JIT_OPTIMIZE");
        return v && v[0] == '1';
    }();
    return on;
}

torch::Tensor trs::jit_forward(torch::jit::Module &m, const torch::Tensor &x)
{
    torch::jit::GraphOptimizerEnabledGuard guard(trs::jit_optimize());
    return m.forward({x}).toTensor();
}

extern "C" trs_status trs_model_load_torchscript(const char *path, const int64_t *input_shape, int input_ndim,
                                                 trs_model **out)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, out != nullptr, "out is NULL");
    *out = nullptr;
    TRS_CHECK_ARG(err, path != nullptr && path[0] != '\0', "path is NULL or empty");
    TRS_CHECK_ARG(err, input_shape != nullptr && input_ndim >= 1 && input_ndim <= TRS_MAX_DIMS - 1,
                  "input shape must have 1 to " + std::to_string(TRS_MAX_DIMS - 1) + " dimensions");
    for (int d = 0; d < input_ndim; d++)
        TRS_CHECK_ARG(err, input_shape[d] > 0, "input shape dimensions must be > 0");
    trs::install_counting_allocator();
    trs::install_cpu_kernels();
    TRS_GUARD(err, {
        const std::string file(path);
        auto m = std::make_unique<trs_model>();
        try {
            m->jit = std::make_unique<torch::jit::Module>(load_archive(file));
        } catch (const c10::Error &e) {
            throw trs::invalid(file + ": not a TorchScript archive (torch.jit.save of a scripted module): " +
                               first_line(e.what_without_backtrace()));
        }
        std::string why = check_forward_schema(*m->jit);
        if (why.empty() && m->parameters().empty())
            why = "it has no parameters to train (a torch.jit.freeze'd module keeps its weights as constants; "
                  "save the module before freezing it)";
        if (why.empty()) why = check_mode_switchable(*m->jit);
        if (!why.empty()) throw trs::invalid(file + ": " + why);
        m->input_shape.assign(input_shape, input_shape + input_ndim);
        m->jit->train(true);

        // Dry forward of a batch of 2 zeros in eval mode under no_grad: no running-stat update, no dropout draw,
        // so the default generator and every buffer stay as loaded. float32 zeros first (features); a forward that
        // fails on them and runs on int64 zeros takes token ids (an nn.Embedding refuses float indices), and the
        // steps then take int64 inputs only. When both fail, the float32 error is the one reported.
        std::vector<int64_t> shape{2};
        shape.insert(shape.end(), m->input_shape.begin(), m->input_shape.end());
        torch::Tensor y;
        {
            torch::NoGradGuard no_grad;
            trs::ModeRestore restore(*m);
            m->train(false);
            std::string float_error;
            try {
                y = m->forward(torch::zeros(shape));
            } catch (const c10::Error &e) {
                float_error = error_summary(e.what_without_backtrace());
            } catch (const std::exception &e) {  // the interpreter rethrows an op's error with its traceback
                float_error = error_summary(e.what());
            }
            if (!float_error.empty()) {
                std::string ids_error;
                try {
                    y = m->forward(torch::zeros(shape, torch::kInt64));
                    m->input_dtype = torch::kInt64;
                } catch (const c10::Error &e) {
                    ids_error = error_summary(e.what_without_backtrace());
                } catch (const std::exception &e) {
                    ids_error = error_summary(e.what());
                }
                // A module of token ids (its float32 error is an embedding's dtype complaint) is told its int64
                // error (a sequence longer than its position table, ...); any other module its float32 error.
                const bool takes_ids = float_error.find("indices") != std::string::npos ||
                                       float_error.find("Long") != std::string::npos;
                if (!ids_error.empty() && takes_ids)
                    throw trs::invalid(file + ": forward fails on a batch of int64 token ids of shape " +
                                       trs::shape_str(shape) + " (2 samples of the data's shape): " + ids_error);
                if (!ids_error.empty())
                    throw trs::invalid(file + ": forward fails on a batch of shape " + trs::shape_str(shape) +
                                       " (2 samples of the data's shape): " + float_error);
            }
        }
        if (y.scalar_type() != torch::kFloat32 || (y.dim() != 2 && y.dim() != 3) || y.size(0) != 2)
            throw trs::invalid(file + ": forward maps a batch of shape " + trs::shape_str(shape) + " to " +
                               trs::shape_str(y.sizes()) + " " + std::string(c10::toString(y.scalar_type())) +
                               "; trainrun needs float32 [N, outputs] or [N, T, classes]");
        m->output_shape.assign(y.sizes().begin() + 1, y.sizes().end());  // per sample, as trs_model_output_shape says
        m->output_dim = y.size(-1);
        *out = m.release();
        err.clear();
        return TRS_OK;
    })
}


extern "C" trs_status trs_model_run_init(trs_model *model, const char *method)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, model != nullptr, "model is NULL");
    TRS_CHECK_ARG(err, method != nullptr && method[0] != '\0', "method is NULL or empty");
    TRS_GUARD(err, {
        if (!model->jit) throw trs::invalid("an init method is for TorchScript models; this one is a sequential model");
        const std::string name(method);
        auto found = model->jit->find_method(name);
        if (!found)
            throw trs::invalid("the module has no method '" + name +
                               "' (define it in the nn.Module and mark it @torch.jit.export before scripting)");
        const c10::FunctionSchema &s = found->function().getSchema();
        for (size_t i = 1; i < s.arguments().size(); i++)
            if (!s.arguments()[i].default_value()) {
                std::ostringstream got;
                got << s;
                throw trs::invalid("method '" + name + "' must take no arguments besides self; it is " + got.str());
            }
        // What the method may change: values. Names, shapes and dtypes are the archive's (the optimizer, EMA and
        // checkpoints are built from them), so a method that re-binds an entry to another shape is refused.
        const auto before = trs::state_dict(*model);
        {
            torch::NoGradGuard no_grad;  // in-place draws on leaf parameters; nothing recorded
            torch::jit::GraphOptimizerEnabledGuard guard(trs::jit_optimize());
            try {
                found->operator()({});
            } catch (const c10::Error &e) {
                throw trs::invalid("method '" + name + "' failed: " + error_summary(e.what_without_backtrace()));
            } catch (const std::exception &e) {
                throw trs::invalid("method '" + name + "' failed: " + error_summary(e.what()));
            }
        }
        const auto after = trs::state_dict(*model);
        if (after.size() != before.size())
            throw trs::invalid("method '" + name + "' changed the number of state_dict entries (" +
                               std::to_string(before.size()) + " -> " + std::to_string(after.size()) + ")");
        for (size_t i = 0; i < after.size(); i++) {
            const auto &a = after[i], &b = before[i];
            if (a.first != b.first || !a.second.sizes().equals(b.second.sizes()) ||
                a.second.scalar_type() != b.second.scalar_type())
                throw trs::invalid("method '" + name + "' changed state_dict entry '" + b.first + "' " +
                                   trs::shape_str(b.second.sizes()) + " " + c10::toString(b.second.scalar_type()) +
                                   " into '" + a.first + "' " + trs::shape_str(a.second.sizes()) + " " +
                                   c10::toString(a.second.scalar_type()) + "; it may only change values");
            if (a.second.is_floating_point() && !torch::isfinite(a.second).all().item<bool>())
                throw trs::invalid("method '" + name + "' left non-finite values in '" + a.first + "'");
        }
        err.clear();
        return TRS_OK;
    })
}
