// export.cpp -- trs_model_save_torchscript (trainrun_shim_export.h): the loaded TorchScript module, its tensors as
// trained, written back as an archive torch.jit.load reads.
#include "internal.hpp"
#include "trainrun_shim_export.h"

extern "C" trs_status trs_model_save_torchscript(trs_model *model, const char *path)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, model != nullptr, "model is NULL");
    TRS_CHECK_ARG(err, path != nullptr && path[0] != '\0', "path is NULL or empty");
    TRS_GUARD(err, {
        if (!model->jit)
            throw trs::invalid("a model from a model YAML has no TorchScript code to write: its checkpoint's "
                               "model.safetensors holds the state_dict (docs/torchscript.md, \"Back to PyTorch\")");
        if (model->device.is_cpu()) {
            model->jit->save(path);
        } else {
            torch::jit::Module copy = model->jit->deepcopy();
            copy.to(torch::kCPU);
            copy.save(path);
        }
        return TRS_OK;
    });
}
