/* fuzz_model_spec.c -- a model spec document (tr_model_spec_load_string): layers, options, the input shape and
 * the parameter budget. */
#include "fuzz_util.h"
#include "model_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    tr_model_spec spec;
    tr_error err = {0};
    if (tr_model_spec_load_string(text, "fuzz.yaml", &spec, &err) == TR_OK) tr_model_spec_free(&spec);
    free(text);
    return 0;
}
