/*
 * model_spec.c -- strict parser of models/NAME.yaml into the shim's trs_layer array (see model_spec.h).
 *
 * Each layer kind has a table of options (tr_yf_field rows pointing into trs_layer), so type, range, default,
 * duplicate and did-you-mean handling are the same code as the config loader's (yaml_schema.c).
 * Layer indices in messages are 0-based, matching the nn.Sequential parameter names ("0.weight").
 */
#include "model_spec.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sys.h" /* tr_memory_available */
#include "yaml_schema.h"
#include "yaml_util.h"

#define LOFF(m) offsetof(trs_layer, m)
#define O_I64(nm, m, req, def, rng) \
    {.name = nm, .type = TR_YF_INT64, .offset = LOFF(m), .required = (req), .def_int = (def), .range = rng}
#define O_F64(nm, m, def, rng) {.name = nm, .type = TR_YF_FLOAT, .offset = LOFF(m), .def_float = (def), .range = rng}
#define O_BOOL(nm, m, def) {.name = nm, .type = TR_YF_BOOL_INT, .offset = LOFF(m), .def_int = (def)}
#define O_PAIR(nm, m1, m2, rng) \
    {.name = nm, .type = TR_YF_INT64_PAIR, .offset = LOFF(m1), .aux_offset = LOFF(m2), .required = true, .range = rng}

static const tr_yf_field k_linear[] = {
    O_I64("in", in, true, 0, TR_YF_GE(1)),
    O_I64("out", out, true, 0, TR_YF_GE(1)),
    O_BOOL("bias", bias, 1),
};
static const tr_yf_field k_conv2d[] = {
    O_I64("in", in, true, 0, TR_YF_GE(1)),          O_I64("out", out, true, 0, TR_YF_GE(1)),
    O_I64("kernel", kernel, true, 0, TR_YF_GE(1)),  O_I64("stride", stride, false, 1, TR_YF_GE(1)),
    O_I64("padding", padding, false, 0, TR_YF_GE(0)), O_BOOL("bias", bias, 1),
};
static const tr_yf_field k_batchnorm[] = {
    O_I64("features", out, true, 0, TR_YF_GE(1)),
    O_F64("eps", eps, 1e-5, TR_YF_GT(0)),
    O_F64("momentum", momentum, 0.1, TR_YF_CC(0, 1)),
};
static const tr_yf_field k_layernorm[] = {
    O_I64("features", out, true, 0, TR_YF_GE(1)),
    O_F64("eps", eps, 1e-5, TR_YF_GT(0)),
};
static const tr_yf_field k_pool[] = {
    O_I64("kernel", kernel, true, 0, TR_YF_GE(1)),
    O_I64("stride", stride, false, 0, TR_YF_GE(0)),
    O_I64("padding", padding, false, 0, TR_YF_GE(0)),
};
static const tr_yf_field k_adaptive[] = {
    O_PAIR("out", out_h, out_w, TR_YF_GE(1)),
};
static const tr_yf_field k_dropout[] = {
    O_F64("p", p, 0.5, TR_YF_CO(0, 1)),
};

/** One layer kind: its YAML name, shim kind and options. */
typedef struct layer_def {
    const char *name;
    trs_layer_kind kind;
    const tr_yf_field *opts;
    size_t n_opts;
} layer_def;

#define LAYER(nm, k, tbl) {nm, k, tbl, sizeof tbl / sizeof tbl[0]}
#define LAYER0(nm, k) {nm, k, NULL, 0}

static const layer_def k_layers[] = {
    LAYER("linear", TRS_LAYER_LINEAR, k_linear),
    LAYER("conv2d", TRS_LAYER_CONV2D, k_conv2d),
    LAYER("batchnorm1d", TRS_LAYER_BATCHNORM1D, k_batchnorm),
    LAYER("batchnorm2d", TRS_LAYER_BATCHNORM2D, k_batchnorm),
    LAYER("layernorm", TRS_LAYER_LAYERNORM, k_layernorm),
    LAYER0("relu", TRS_LAYER_RELU),
    LAYER0("gelu", TRS_LAYER_GELU),
    LAYER("maxpool2d", TRS_LAYER_MAXPOOL2D, k_pool),
    LAYER("avgpool2d", TRS_LAYER_AVGPOOL2D, k_pool),
    LAYER("adaptive_avgpool2d", TRS_LAYER_ADAPTIVE_AVGPOOL2D, k_adaptive),
    LAYER("dropout", TRS_LAYER_DROPOUT, k_dropout),
    LAYER0("flatten", TRS_LAYER_FLATTEN),
};
#define N_LAYERS (sizeof k_layers / sizeof k_layers[0])

/** Parse the options mapping `opts` (may be NULL/null) of layer `def` into *out; kpath is "layers[i].kind". */
static int parse_options(const tr_yctx *ctx, yaml_document_t *doc, const layer_def *def, yaml_node_t *kind_node,
                         yaml_node_t *opts, const char *kpath, trs_layer *out)
{
    unsigned long given = 0;
    for (size_t j = 0; j < def->n_opts; j++)
        tr_yf_set_default(&def->opts[j], out);

    if (opts && !tr_yis_null(opts)) {
        if (opts->type != YAML_MAPPING_NODE) {
            char got[160];
            tr_ydescribe(opts, got, sizeof got);
            return tr_yerr(ctx, opts, kpath, "expected a mapping of options ({name: value, ...}), got %s", got);
        }
        if (tr_ymap_check(ctx, doc, opts, kpath) != TR_OK)
            return TR_E_CONFIG;
        const char *names[16];
        for (size_t j = 0; j < def->n_opts && j < 16; j++)
            names[j] = def->opts[j].name;
        for (size_t i = 0; i < tr_ymap_size(opts); i++) {
            yaml_node_t *k = tr_ymap_key(doc, opts, i);
            char path[256];
            tr_ypath_join(path, sizeof path, kpath, tr_ytext(k));
            size_t j = 0;
            while (j < def->n_opts && strcmp(def->opts[j].name, tr_ytext(k)) != 0)
                j++;
            if (j == def->n_opts) {
                if (def->n_opts == 0)
                    return tr_yerr(ctx, k, path, "unknown option; %s takes no options", def->name);
                return tr_yunknown(ctx, k, path, "option", tr_ytext(k), names, def->n_opts, "");
            }
            if (tr_yf_parse(ctx, doc, &def->opts[j], tr_ymap_value(doc, opts, i), path, out) != TR_OK)
                return TR_E_CONFIG;
            given |= 1ul << j;
        }
    }
    for (size_t j = 0; j < def->n_opts; j++)
        if (def->opts[j].required && !(given & (1ul << j)))
            return tr_yerr(ctx, kind_node, kpath, "missing required option '%s'", def->opts[j].name);

    if ((def->kind == TRS_LAYER_MAXPOOL2D || def->kind == TRS_LAYER_AVGPOOL2D) && out->padding * 2 > out->kernel) {
        char path[256];
        tr_ypath_join(path, sizeof path, kpath, "padding");
        return tr_yerr(ctx, kind_node, path, "%lld is more than half the kernel size (%lld)", (long long)out->padding,
                       (long long)out->kernel);
    }
    return TR_OK;
}

/** Parse sequence item `item` (layer `index`) into *out. */
static int parse_layer(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *item, size_t index, trs_layer *out)
{
    char lpath[64];
    tr_ypath_index(lpath, sizeof lpath, "layers", index);
    yaml_node_t *kind_node = NULL, *opts = NULL;
    char got[160];

    if (item->type == YAML_SCALAR_NODE && !tr_yis_null(item)) {
        kind_node = item;
    } else if (item->type == YAML_MAPPING_NODE && tr_ymap_size(item) == 1) {
        if (tr_ymap_check(ctx, doc, item, lpath) != TR_OK)
            return TR_E_CONFIG;
        kind_node = tr_ymap_key(doc, item, 0);
        opts = tr_ymap_value(doc, item, 0);
    } else if (item->type == YAML_MAPPING_NODE && tr_ymap_size(item) > 1) {
        if (tr_ymap_check(ctx, doc, item, lpath) != TR_OK)
            return TR_E_CONFIG;
        return tr_yerr(ctx, tr_ymap_key(doc, item, 1), lpath,
                       "a layer is one key (its kind) with its options nested under it, got %zu keys "
                       "(are the options of '%s' indented under it?)",
                       tr_ymap_size(item), tr_ytext(tr_ymap_key(doc, item, 0)));
    } else {
        tr_ydescribe(item, got, sizeof got);
        return tr_yerr(ctx, item, lpath, "expected a layer (e.g. 'relu' or 'linear: {in: 784, out: 10}'), got %s",
                       got);
    }

    const char *kind = tr_ytext(kind_node);
    char kpath[160];
    tr_ypath_join(kpath, sizeof kpath, lpath, kind);
    const layer_def *def = NULL;
    for (size_t i = 0; i < N_LAYERS; i++)
        if (strcmp(k_layers[i].name, kind) == 0)
            def = &k_layers[i];
    if (!def) {
        const char *names[N_LAYERS];
        for (size_t i = 0; i < N_LAYERS; i++)
            names[i] = k_layers[i].name;
        return tr_yunknown(ctx, kind_node, kpath, "layer", kind, names, N_LAYERS, "");
    }
    memset(out, 0, sizeof *out);
    out->kind = def->kind;
    return parse_options(ctx, doc, def, kind_node, opts, kpath, out);
}

/** Parse `input`: a sequence of 1 to 3 positive integers. */
static int parse_input(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *node, tr_model_spec *out)
{
    static const tr_yf_field dim = {.name = "input", .type = TR_YF_INT64, .offset = 0, .range = TR_YF_GE(1)};
    size_t n = tr_yseq_size(node);
    if (!node || node->type != YAML_SEQUENCE_NODE || (n < 1 || n > 3)) {
        char got[160];
        if (node && node->type == YAML_SEQUENCE_NODE)
            snprintf(got, sizeof got, "%zu entries", n);
        else
            tr_ydescribe(node, got, sizeof got);
        return tr_yerr(ctx, node, "input", "expected a list of 1 to 3 positive integers ([D], [T, D] or [C, H, W]), got %s",
                       got);
    }
    for (size_t i = 0; i < n; i++) {
        char path[32];
        tr_ypath_index(path, sizeof path, "input", i);
        if (tr_yf_parse(ctx, doc, &dim, tr_yseq_item(doc, node, i), path, &out->input_shape[i]) != TR_OK)
            return TR_E_CONFIG;
    }
    out->input_ndim = (int)n;
    return TR_OK;
}

/*
 * The parameter budget: a layer's parameters (float32) are checked before libtorch is asked for them, so an
 * absurd spec is refused naming the layer and the bytes instead of failing inside libtorch's allocator. Training
 * holds each parameter about four times (weights, gradients, two Adam moments), so the budget is a quarter of the
 * memory available (tr_memory_available: RAM, cgroup and RLIMIT_AS), or 16 GiB when that is unknown.
 */
static int64_t param_budget_bytes(void)
{
    const int64_t avail = tr_memory_available();
    return avail > 0 ? avail / 4 : (int64_t)16 << 30;
}

/* Parameters of one layer (weights and bias, or a norm's affine pair), or -1 when the count overflows int64. */
static int64_t layer_params(const trs_layer *l)
{
    int64_t n = 0, k2 = 0;
    switch (l->kind) {
    case TRS_LAYER_LINEAR:
        if (__builtin_mul_overflow(l->in, l->out, &n) || __builtin_add_overflow(n, l->bias ? l->out : 0, &n))
            return -1;
        return n;
    case TRS_LAYER_CONV2D:
        if (__builtin_mul_overflow(l->kernel, l->kernel, &k2) || __builtin_mul_overflow(k2, l->in, &n) ||
            __builtin_mul_overflow(n, l->out, &n) || __builtin_add_overflow(n, l->bias ? l->out : 0, &n))
            return -1;
        return n;
    case TRS_LAYER_BATCHNORM1D:
    case TRS_LAYER_BATCHNORM2D:
    case TRS_LAYER_LAYERNORM: return l->out > INT64_MAX / 4 ? -1 : 4 * l->out; /* + running mean and var */
    default: return 0;
    }
}

static int check_budget(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *layers, const tr_model_spec *s)
{
    const int64_t budget = param_budget_bytes();
    int64_t total = 0, in = 1;
    for (int i = 0; i < s->input_ndim; i++)
        if (__builtin_mul_overflow(in, s->input_shape[i], &in)) in = INT64_MAX;
    if (in > budget / 8) /* the dry forward of 2 samples, float32 */
        return tr_yerr(ctx, NULL, "input", "%lld values a sample: more than the memory budget of %lld bytes allows",
                       (long long)in, (long long)budget);
    for (size_t i = 0; i < s->n_layers; i++) {
        const int64_t n = layer_params(&s->layers[i]);
        const int64_t bytes = n < 0 || n > INT64_MAX / 4 ? -1 : 4 * n;
        char path[64];
        tr_ypath_index(path, sizeof path, "layers", i);
        yaml_node_t *node = tr_yseq_item(doc, layers, i);
        if (bytes < 0)
            return tr_yerr(ctx, node, path, "its parameter count overflows 64 bits");
        if (__builtin_add_overflow(total, bytes, &total) || total > budget)
            return tr_yerr(ctx, node, path,
                           "%lld parameters (%lld bytes as float32) bring the model to %lld bytes, over the parameter "
                           "budget of %lld bytes (a quarter of the memory available: training holds each parameter "
                           "about 4 times)",
                           (long long)n, (long long)bytes, (long long)(total < 0 ? INT64_MAX : total),
                           (long long)budget);
    }
    return TR_OK;
}

/** Parse the whole document into *out (which is zeroed on entry and freed by the caller on error). */
static int parse_spec(const tr_yctx *ctx, yaml_document_t *doc, tr_model_spec *out)
{
    static const char *const top_keys[] = {"input", "layers"};
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || tr_yis_null(root))
        return tr_yerr(ctx, root, NULL, "empty model spec (expected 'input:' and 'layers:')");
    if (root->type != YAML_MAPPING_NODE) {
        char got[160];
        tr_ydescribe(root, got, sizeof got);
        return tr_yerr(ctx, root, NULL, "expected a mapping with 'input:' and 'layers:' at the top level, got %s",
                       got);
    }
    if (tr_ymap_check(ctx, doc, root, "") != TR_OK)
        return TR_E_CONFIG;
    yaml_node_t *input = NULL, *layers = NULL;
    for (size_t i = 0; i < tr_ymap_size(root); i++) {
        yaml_node_t *k = tr_ymap_key(doc, root, i);
        const char *name = tr_ytext(k);
        if (strcmp(name, "input") == 0)
            input = tr_ymap_value(doc, root, i);
        else if (strcmp(name, "layers") == 0)
            layers = tr_ymap_value(doc, root, i);
        else
            return tr_yunknown(ctx, k, name, "key", name, top_keys, 2, "");
    }
    if (!input)
        return tr_yerr(ctx, root, "input", "missing (the per-sample input shape: [D], [T, D] or [C, H, W])");
    if (!layers)
        return tr_yerr(ctx, root, "layers", "missing (the list of layers)");
    if (parse_input(ctx, doc, input, out) != TR_OK)
        return TR_E_CONFIG;

    size_t n = tr_yseq_size(layers);
    if (layers->type != YAML_SEQUENCE_NODE || n == 0) {
        char got[160];
        tr_ydescribe(layers, got, sizeof got);
        if (layers->type == YAML_SEQUENCE_NODE)
            snprintf(got, sizeof got, "an empty list");
        return tr_yerr(ctx, layers, "layers", "expected a non-empty list of layers, got %s", got);
    }
    out->layers = calloc(n, sizeof *out->layers);
    if (!out->layers)
        return tr_yerr(ctx, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (parse_layer(ctx, doc, tr_yseq_item(doc, layers, i), i, &out->layers[i]) != TR_OK)
            return TR_E_CONFIG;
    }
    out->n_layers = n;
    return check_budget(ctx, doc, layers, out);
}

/** Shared body of the loaders. */
static int load_text(const char *text, size_t len, const char *name, tr_model_spec *out, tr_error *err)
{
    tr_yctx ctx = {.name = name, .where = NULL, .err = err};
    memset(out, 0, sizeof *out);
    yaml_document_t doc;
    if (tr_ydoc_load(&ctx, NULL, text, len, &doc) != TR_OK)
        return TR_E_CONFIG;
    int rc = parse_spec(&ctx, &doc, out);
    yaml_document_delete(&doc);
    if (rc != TR_OK)
        tr_model_spec_free(out);
    return rc;
}

int tr_model_spec_load(const char *path, tr_model_spec *out, tr_error *err)
{
    char *text;
    size_t len;
    memset(out, 0, sizeof *out);
    if (tr_read_text_file(path, &text, &len, err) != TR_OK)
        return TR_E_CONFIG;
    int rc = load_text(text, len, path, out, err);
    free(text);
    return rc;
}

int tr_model_spec_load_string(const char *yaml, const char *name, tr_model_spec *out, tr_error *err)
{
    return load_text(yaml, strlen(yaml), name ? name : "<string>", out, err);
}

void tr_model_spec_free(tr_model_spec *spec)
{
    if (!spec)
        return;
    free(spec->layers);
    memset(spec, 0, sizeof *spec);
}
