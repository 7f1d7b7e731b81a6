/*
 * tfevents.c -- CRC-32C, TFRecord framing and the Event messages trainrun writes (see tfevents.h).
 */
#define _XOPEN_SOURCE 700
#include "tfevents.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorboard/event.pb-c.h"
#include "tensorboard/hparams.pb-c.h"
#include "tensorboard/summary.pb-c.h"

/* ------------------------------------------------------------------------------------------------- CRC-32C */

/* Byte-at-a-time table of the reflected Castagnoli polynomial, built once (thread-safe: every thread computes
 * the same table, and a reader sees either zeros, which it rebuilds, or the finished values). */
static uint32_t g_table[256];
static volatile int g_table_ready;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        g_table[i] = c;
    }
    g_table_ready = 1;
}

uint32_t tr_crc32c(uint32_t crc, const void *buf, size_t n)
{
    if (!g_table_ready) make_table();
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = g_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t tr_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ------------------------------------------------------------------------------------------------- records */

static void le64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

static void le32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

int tr_tfevents_record(tr_tfevents *w, const uint8_t *data, size_t n, tr_error *err)
{
    if (!w->f || w->failed) return tr_error_set(err, TR_E_RUNTIME, "%s: not open for writing", w->path);
    uint8_t head[12], tail[4];
    le64(head, (uint64_t)n);
    le32(head + 8, tr_crc32c_mask(tr_crc32c(0, head, 8)));
    le32(tail, tr_crc32c_mask(tr_crc32c(0, data, n)));
    if (fwrite(head, 1, 12, w->f) != 12 || (n && fwrite(data, 1, n, w->f) != n) || fwrite(tail, 1, 4, w->f) != 4 ||
        fflush(w->f) != 0) {
        w->failed = 1;
        return tr_error_set(err, TR_E_RUNTIME, "%s: write failed: %s", w->path, strerror(errno));
    }
    return TR_OK;
}

/* Serialize `ev` and append it as one record. */
static int write_event(tr_tfevents *w, const Tensorboard__Event *ev, tr_error *err)
{
    const size_t n = tensorboard__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", w->path);
    tensorboard__event__pack(ev, buf);
    const int rc = tr_tfevents_record(w, buf, n, err);
    free(buf);
    return rc;
}

int tr_tfevents_create(tr_tfevents *w, const char *path, double wall_time, tr_error *err)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    if (!(w->f = fdopen(fd, "wb"))) {
        close(fd);
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    }
    Tensorboard__SourceMetadata src = TENSORBOARD__SOURCE_METADATA__INIT;
    src.writer = (char *)"trainrun";
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    ev.source_metadata = &src;
    return write_event(w, &ev, err);
}

void tr_tfevents_name(const char *dir, double wall_time, const char *host, long pid, char *out, size_t size)
{
    long long secs = (long long)floor(wall_time);
    DIR *d = opendir(dir);
    int n = 0;
    if (d) {
        const char prefix[] = "events.out.tfevents.";
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, prefix, sizeof prefix - 1) != 0) continue;
            const long long s = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
            if (s >= secs) secs = s + 1;
            n++;
        }
        closedir(d);
    }
    snprintf(out, size, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, secs, host, pid, n);
}

int tr_tfevents_scalars(tr_tfevents *w, double wall_time, int64_t step, const char *const *tags, const double *values,
                        int n, tr_error *err)
{
    Tensorboard__Summary__Value v[16], *pv[16];
    if (n < 0 || n > 16) return tr_error_set(err, TR_E_RUNTIME, "%s: %d scalars in one event (16 at most)", w->path, n);
    for (int i = 0; i < n; i++) {
        tensorboard__summary__value__init(&v[i]);
        v[i].tag = (char *)tags[i];
        v[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        v[i].simple_value = (float)values[i];
        pv[i] = &v[i];
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = pv;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(w, &ev, err);
}

int tr_tfevents_session_start(tr_tfevents *w, double wall_time, int64_t step, tr_error *err)
{
    Tensorboard__SessionLog log = TENSORBOARD__SESSION_LOG__INIT;
    log.status = TENSORBOARD__SESSION_LOG__SESSION_STATUS__START;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    return write_event(w, &ev, err);
}

int tr_tfevents_hparams(tr_tfevents *w, double wall_time, const tr_hparam *hp, int n, tr_error *err)
{
    Tensorboard__Hparams__Value *vals = calloc((size_t)(n > 0 ? n : 1), sizeof *vals);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry *ents = calloc((size_t)(n > 0 ? n : 1), sizeof *ents);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry **pents = calloc((size_t)(n > 0 ? n : 1), sizeof *pents);
    uint8_t *content = NULL;
    int rc = TR_OK;
    if (!vals || !ents || !pents) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", w->path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        tensorboard__hparams__value__init(&vals[i]);
        if (hp[i].kind == 0) {
            vals[i].kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_NUMBER_VALUE;
            vals[i].number_value = hp[i].number;
        } else if (hp[i].kind == 1) {
            vals[i].kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_BOOL_VALUE;
            vals[i].bool_value = hp[i].boolean != 0;
        } else {
            vals[i].kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE;
            vals[i].string_value = (char *)hp[i].text;
        }
        tensorboard__hparams__session_start_info__hparams_entry__init(&ents[i]);
        ents[i].key = (char *)hp[i].key;
        ents[i].value = &vals[i];
        pents[i] = &ents[i];
    }
    Tensorboard__Hparams__SessionStartInfo ssi = TENSORBOARD__HPARAMS__SESSION_START_INFO__INIT;
    ssi.n_hparams = (size_t)n;
    ssi.hparams = pents;
    ssi.start_time_secs = wall_time;
    Tensorboard__Hparams__HParamsPluginData pd = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
    pd.version = 0;
    pd.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
    pd.session_start_info = &ssi;
    const size_t len = tensorboard__hparams__hparams_plugin_data__get_packed_size(&pd);
    if (!(content = malloc(len ? len : 1))) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", w->path);
        goto done;
    }
    tensorboard__hparams__hparams_plugin_data__pack(&pd, content);

    Tensorboard__SummaryMetadata__PluginData plugin = TENSORBOARD__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    plugin.plugin_name = (char *)"hparams";
    plugin.content.data = content;
    plugin.content.len = len;
    Tensorboard__SummaryMetadata meta = TENSORBOARD__SUMMARY_METADATA__INIT;
    meta.plugin_data = &plugin;
    /* the null tensor TensorBoard's own hparams summaries carry: DT_FLOAT, shape [0] */
    Tensorboard__TensorShapeProto__Dim dim = TENSORBOARD__TENSOR_SHAPE_PROTO__DIM__INIT, *pdim = &dim;
    Tensorboard__TensorShapeProto shape = TENSORBOARD__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = &pdim;
    Tensorboard__TensorProto tensor = TENSORBOARD__TENSOR_PROTO__INIT;
    tensor.dtype = TENSORBOARD__DATA_TYPE__DT_FLOAT;
    tensor.tensor_shape = &shape;
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT, *pv = &v;
    v.tag = (char *)"_hparams_/session_start_info";
    v.metadata = &meta;
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = &tensor;
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = &pv;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    rc = write_event(w, &ev, err);
done:
    free(content);
    free(vals);
    free(ents);
    free(pents);
    return rc;
}

int tr_tfevents_close(tr_tfevents *w, tr_error *err)
{
    if (!w->f) return TR_OK;
    const int bad = ferror(w->f) || w->failed;
    const int closed = fclose(w->f) == 0;
    w->f = NULL;
    if (bad || !closed) return tr_error_set(err, TR_E_RUNTIME, "%s: some events could not be written", w->path);
    return TR_OK;
}
