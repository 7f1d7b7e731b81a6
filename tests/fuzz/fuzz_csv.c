/* fuzz_csv.c -- the CSV reader (tr_csv_read) and the column-spec parser (tr_csv_columns): the first byte gives
 * the header lines, the input up to the first newline after it is a column spec, the rest the file. */
#include "csv.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int64_t header = data[0] & 3;
    const uint8_t *nl = memchr(data + 1, '\n', size - 1);
    const size_t spec_len = nl ? (size_t)(nl - (data + 1)) : 0;
    char *spec = fuzz_string(data + 1, spec_len);
    const size_t off = nl ? spec_len + 2 : 1;
    const char *path = fuzz_file("csv", data + off, size - off);
    tr_csv_table t;
    tr_error err = {0};
    if (tr_csv_read(path, header, &t, &err) == TR_OK) {
        int64_t *cols = NULL, n = 0;
        if (tr_csv_columns(spec, t.cols, "data.feature_columns", &cols, &n, &err) == TR_OK) {
            volatile double sum = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < t.rows; r++) sum += t.v[r * t.cols + cols[i]];
            free(cols);
        }
        tr_csv_table_free(&t);
    }
    free(spec);
    return 0;
}
