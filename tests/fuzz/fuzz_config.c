/* fuzz_config.c -- a config document (tr_config_load_string) over the defaults, then tr_config_validate and the
 * effective config written back (tr_config_write_yaml), as a run does with every config it accepts. */
#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    static tr_config cfg;
    tr_error err = {0};
    tr_config_defaults(&cfg);
    if (tr_config_load_string(&cfg, text, "fuzz.yaml", &err) == TR_OK && tr_config_validate(&cfg, &err) == TR_OK) {
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            tr_config_write_yaml(&cfg, f);
            fclose(f);
        }
    }
    free(text);
    return 0;
}
