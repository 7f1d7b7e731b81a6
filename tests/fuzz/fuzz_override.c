/* fuzz_override.c -- command-line overrides (tr_config_override): the input is split at newlines into up to 8
 * `key.path=value` arguments, applied in order over the defaults, then tr_config_validate. */
#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    static tr_config cfg;
    tr_error err = {0};
    tr_config_defaults(&cfg);
    char *save = NULL;
    int rc = TR_OK, k = 0;
    for (char *kv = strtok_r(text, "\n", &save); kv && rc == TR_OK && k < 8; kv = strtok_r(NULL, "\n", &save), k++)
        rc = tr_config_override(&cfg, kv, &err);
    if (rc == TR_OK) tr_config_validate(&cfg, &err);
    free(text);
    return 0;
}
