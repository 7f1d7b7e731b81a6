/*
 * config.c -- everything driven by the schema table (config_schema.c): defaults, strict YAML loading, key=value
 * overrides, validation, the effective-config YAML writer, the Markdown reference and differences (see config.h).
 *
 * There is no per-key code: each key is one tr_yf_field row (yaml_schema.h) holding its dotted path, type, offset
 * into tr_config, default, range and doc. Sections ("optim", "data", ...) are the path prefixes of the rows.
 */
#include "config.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "config_internal.h"
#include "suggest.h"
#include "yaml_schema.h"
#include "yaml_util.h"


/* ============================================================================================ schema lookups */

/** Row index of the key `path`, or -1. */
static int find_key(const char *path)
{
    for (size_t i = 0; i < tr_config_schema_n; i++)
        if (strcmp(tr_config_schema[i].name, path) == 0)
            return (int)i;
    return -1;
}

/** True when `path` is a section: a proper prefix of some key, followed by '.'. */
static bool is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < tr_config_schema_n; i++)
        if (strncmp(tr_config_schema[i].name, path, n) == 0 && tr_config_schema[i].name[n] == '.')
            return true;
    return false;
}

/**
 * Collect the distinct direct children of section `prefix` ("" = top level), in schema order, into
 * names[] (each a pointer into `store`, which holds TR_CONFIG_MAX_KEYS names of up to 64 bytes). Returns the count.
 */
static size_t section_children(const char *prefix, char store[][64], const char **names)
{
    size_t np = strlen(prefix), count = 0;
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        const char *k = tr_config_schema[i].name;
        if (np && (strncmp(k, prefix, np) != 0 || k[np] != '.'))
            continue;
        const char *rest = np ? k + np + 1 : k;
        size_t len = strcspn(rest, ".");
        if (len >= 64)
            len = 63;
        bool seen = false;
        for (size_t j = 0; j < count; j++)
            if (strlen(names[j]) == len && strncmp(names[j], rest, len) == 0)
                seen = true;
        if (seen)
            continue;
        memcpy(store[count], rest, len);
        store[count][len] = '\0';
        names[count] = store[count];
        count++;
    }
    return count;
}

/**
 * Report the unknown key `path` (= prefix + "." + word). Suggests a key with the same last component in another
 * section first ("lr" -> "optim.lr"), then the nearest key of the same section, else lists the section's keys.
 */
static int unknown_key(const tr_yctx *ctx, const yaml_node_t *at, const char *path, const char *prefix,
                       const char *word)
{
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        const char *k = tr_config_schema[i].name;
        const char *dot = strrchr(k, '.');
        if (strcmp(dot ? dot + 1 : k, word) == 0 && strcmp(k, path) != 0)
            return tr_yerr(ctx, at, path, "unknown key; did you mean '%s'?", k);
    }
    char store[TR_CONFIG_MAX_KEYS][64];
    const char *names[TR_CONFIG_MAX_KEYS];
    if (*prefix && !is_section(prefix)) {
        /* an override of "optm.lr": the section itself is unknown; try the nearest section */
        size_t n = section_children("", store, names);
        const char *best = tr_suggest(prefix, names, n);
        char cand[256];
        snprintf(cand, sizeof cand, "%s.%s", best ? best : "", word);
        if (best && find_key(cand) >= 0)
            return tr_yerr(ctx, at, path, "unknown key; did you mean '%s'?", cand);
        return unknown_key(ctx, at, path, "", prefix);
    }
    size_t n = section_children(prefix, store, names);
    char pre[80];
    snprintf(pre, sizeof pre, "%s%s", prefix, *prefix ? "." : "");
    return tr_yunknown(ctx, at, path, "key", word, names, n, pre);
}

/** Error for a section given a non-mapping value. */
static int section_error(const tr_yctx *ctx, const yaml_node_t *at, const char *path)
{
    char got[160];
    tr_ydescribe(at, got, sizeof got);
    return tr_yerr(ctx, at, path, "expected a mapping (a section of keys such as %s.KEY: VALUE), got %s", path, got);
}

/* ============================================================================================ loading */

/** Apply the mapping `map` of section `prefix` ("" = top level) onto cfg. */
/** A non-empty scalar value. */
static bool set_scalar(const yaml_node_t *v)
{
    return v && v->type == YAML_SCALAR_NODE && !tr_yis_null(v) && tr_ytext(v)[0];
}

/** Whether `path` is model.torchscript with a value while the same mapping gave model.spec one earlier (or the
 * other way round): the second of the two is the error, at its key. */
static bool both_models(yaml_document_t *doc, yaml_node_t *map, const char *path, const yaml_node_t *v)
{
    const char *other = strcmp(path, "model.torchscript") == 0 ? "spec" : strcmp(path, "model.spec") == 0 ? "torchscript" : NULL;
    if (!other || !set_scalar(v)) return false;
    for (size_t i = 0, n = tr_ymap_size(map); i < n; i++) {
        yaml_node_t *k = tr_ymap_key(doc, map, i), *w = tr_ymap_value(doc, map, i);
        if (w == v) return false; /* the other one comes later: it will report */
        if (strcmp(tr_ytext(k), other) == 0 && set_scalar(w)) return true;
    }
    return false;
}

static int load_mapping(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                        tr_config *cfg)
{
    if (tr_ymap_check(ctx, doc, map, prefix) != TR_OK)
        return TR_E_CONFIG;
    size_t n = tr_ymap_size(map);
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *k = tr_ymap_key(doc, map, i);
        yaml_node_t *v = tr_ymap_value(doc, map, i);
        char path[256];
        tr_ypath_join(path, sizeof path, prefix, tr_ytext(k));
        if (strchr(tr_ytext(k), '.')) /* "optim.lr: 1" would bypass the duplicate check of the nested form */
            return tr_yerr(ctx, k, path, "dotted keys are not allowed in a file; nest the key under its section");
        int row = find_key(path);
        if (row >= 0 && both_models(doc, map, path, v))
            return tr_yerr(ctx, k, path, "give exactly one of model.spec (a model YAML) and model.torchscript "
                                         "(a TorchScript archive), not both");
        if (row >= 0) {
            if (tr_yf_parse(ctx, doc, &tr_config_schema[row], v, path, cfg) != TR_OK)
                return TR_E_CONFIG;
        } else if (is_section(path)) {
            if (tr_yis_null(v))
                continue; /* an empty section keeps its defaults */
            if (v->type != YAML_MAPPING_NODE)
                return section_error(ctx, v, path);
            if (load_mapping(ctx, doc, v, path, cfg) != TR_OK)
                return TR_E_CONFIG;
        } else {
            return unknown_key(ctx, k, path, prefix, tr_ytext(k));
        }
    }
    return TR_OK;
}

/** Load YAML text over cfg (all or nothing); `source` becomes cfg->source. */
static int load_text(tr_config *cfg, const char *text, size_t len, const char *name, const char *source,
                     tr_error *err)
{
    tr_yctx ctx = {.name = name, .where = NULL, .err = err};
    if (strlen(source) >= TR_PATH_MAX)
        return tr_error_set(err, TR_E_CONFIG, "%s: path too long (at most %d bytes)", name, TR_PATH_MAX - 1);
    tr_config *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return tr_error_set(err, TR_E_CONFIG, "%s: out of memory", name);
    memcpy(tmp, cfg, sizeof *tmp);

    yaml_document_t doc;
    if (tr_ydoc_load(&ctx, NULL, text, len, &doc) != TR_OK) {
        free(tmp);
        return TR_E_CONFIG;
    }
    int rc = TR_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !tr_yis_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            char got[160];
            tr_ydescribe(root, got, sizeof got);
            rc = tr_yerr(&ctx, root, NULL, "expected a mapping of keys at the top level, got %s", got);
        } else {
            rc = load_mapping(&ctx, &doc, root, "", tmp);
        }
    }
    yaml_document_delete(&doc);
    if (rc == TR_OK) {
        memset(tmp->source, 0, sizeof tmp->source);
        memcpy(tmp->source, source, strlen(source));
        memcpy(cfg, tmp, sizeof *cfg);
    }
    free(tmp);
    return rc;
}

void tr_config_defaults(tr_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < tr_config_schema_n; i++)
        tr_yf_set_default(&tr_config_schema[i], cfg);
}

int tr_config_load_file(tr_config *cfg, const char *path, tr_error *err)
{
    char *text;
    size_t len;
    if (tr_read_text_file(path, &text, &len, err) != TR_OK)
        return TR_E_CONFIG;
    int rc = load_text(cfg, text, len, path, path, err);
    free(text);
    return rc;
}

int tr_config_load_string(tr_config *cfg, const char *yaml, const char *name, tr_error *err)
{
    return load_text(cfg, yaml, strlen(yaml), name ? name : "<string>", "", err);
}

/* ============================================================================================ overrides */

int tr_config_override(tr_config *cfg, const char *kv, tr_error *err)
{
    char where[TR_PATH_MAX + 32];
    snprintf(where, sizeof where, "override '%s'", kv);
    tr_yctx ctx = {.name = NULL, .where = where, .err = err};

    const char *eq = strchr(kv, '=');
    if (!eq)
        return tr_error_set(err, TR_E_CONFIG, "%s: expected KEY=VALUE (e.g. optim.lr=0.01)", where);
    /* key: trimmed of blanks */
    const char *ks = kv, *ke = eq;
    while (ks < ke && (*ks == ' ' || *ks == '\t'))
        ks++;
    while (ke > ks && (ke[-1] == ' ' || ke[-1] == '\t'))
        ke--;
    char key[256];
    if (ke == ks)
        return tr_error_set(err, TR_E_CONFIG, "%s: empty key (expected KEY=VALUE)", where);
    if ((size_t)(ke - ks) >= sizeof key)
        return tr_error_set(err, TR_E_CONFIG, "%s: key too long", where);
    memcpy(key, ks, (size_t)(ke - ks));
    key[ke - ks] = '\0';

    int row = find_key(key);
    if (row < 0) {
        if (is_section(key)) {
            char store[TR_CONFIG_MAX_KEYS][64];
            const char *names[TR_CONFIG_MAX_KEYS];
            size_t n = section_children(key, store, names);
            char list[512];
            tr_join(names, n, list, sizeof list);
            return tr_yerr(&ctx, NULL, key, "is a section; override one of its keys (%s)", list);
        }
        char prefix[256];
        const char *dot = strrchr(key, '.');
        snprintf(prefix, sizeof prefix, "%.*s", dot ? (int)(dot - key) : 0, key);
        return unknown_key(&ctx, NULL, key, prefix, dot ? dot + 1 : key);
    }

    const char *value = eq + 1;
    yaml_document_t doc;
    if (tr_ydoc_load(&ctx, key, value, strlen(value), &doc) != TR_OK)
        return TR_E_CONFIG;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = tr_yf_parse(&ctx, &doc, &tr_config_schema[row], root, key, cfg);
    yaml_document_delete(&doc);
    /* The model is one of two keys: naming one on the command line replaces the file's choice of the other. */
    if (rc == TR_OK && strcmp(key, "model.torchscript") == 0 && cfg->model.torchscript[0])
        memset(cfg->model.spec, 0, sizeof cfg->model.spec);
    if (rc == TR_OK && strcmp(key, "model.spec") == 0 && cfg->model.spec[0])
        memset(cfg->model.torchscript, 0, sizeof cfg->model.torchscript);
    return rc;
}

/* ============================================================================================ validation */

int tr_config_validate(const tr_config *cfg, tr_error *err)
{
    for (size_t i = 0; i < tr_config_schema_n; i++)
        if (tr_yf_check(&tr_config_schema[i], cfg, tr_config_schema[i].name, err) != TR_OK)
            return TR_E_CONFIG;
    if (cfg->data.n_mean != cfg->data.n_std)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.mean and data.std must have the same number of entries (got %d and %d)",
                            cfg->data.n_mean, cfg->data.n_std);
    if (cfg->optim.name == TR_OPTIM_SGD && cfg->optim.nesterov &&
        (!(cfg->optim.momentum > 0) || cfg->optim.dampening != 0)) {
        char m[64], d[64];
        tr_yfmt_float(cfg->optim.momentum, m, sizeof m);
        tr_yfmt_float(cfg->optim.dampening, d, sizeof d);
        return tr_error_set(err, TR_E_CONFIG,
                            "optim.nesterov: true requires optim.momentum > 0 and optim.dampening = 0 "
                            "(got momentum %s, dampening %s)",
                            m, d);
    }
    if (cfg->schedule.name == TR_SCHED_COSINE && cfg->schedule.min_lr > cfg->optim.lr) {
        char a[64], b[64];
        tr_yfmt_float(cfg->schedule.min_lr, a, sizeof a);
        tr_yfmt_float(cfg->optim.lr, b, sizeof b);
        return tr_error_set(err, TR_E_CONFIG,
                            "schedule.min_lr: %s is larger than optim.lr (%s); a cosine schedule decays to it", a, b);
    }
    if (cfg->watchdog.snapshot && strncmp(cfg->device, "cuda", 4) != 0)
        return tr_error_set(err, TR_E_CONFIG,
                            "watchdog.snapshot: true records the CUDA caching allocator's history and needs device: "
                            "cuda (this config's device is %s); on the CPU, watchdog.backtrace names allocation sites",
                            cfg->device);
    if (cfg->eval.weights != TR_WEIGHTS_LIVE && !cfg->ema.enabled)
        return tr_error_set(err, TR_E_CONFIG, "eval.weights: %s needs ema.enabled: true",
                            tr_config_weights[cfg->eval.weights]);
    if (cfg->eval.top_k > 0 && cfg->train.loss != TR_LOSS_CROSS_ENTROPY)
        return tr_error_set(err, TR_E_CONFIG, "eval.top_k: top-k accuracy needs train.loss: cross_entropy");
    if (cfg->schedule.name == TR_SCHED_MULTISTEP && cfg->schedule.n_milestones == 0)
        return tr_error_set(err, TR_E_CONFIG, "schedule.milestones: the multistep schedule needs at least one");
    for (int i = 1; i < cfg->schedule.n_milestones; i++)
        if (!(cfg->schedule.milestones[i] > cfg->schedule.milestones[i - 1]))
            return tr_error_set(err, TR_E_CONFIG, "schedule.milestones: must increase (entry %d)", i);
    if (cfg->data.format == TR_DATA_TEXT && !cfg->data.train_text[0])
        return tr_error_set(err, TR_E_CONFIG, "data.train_text: the text format needs at least one text file");
    if (cfg->data.format == TR_DATA_TOKENS && !cfg->data.train_tokens[0])
        return tr_error_set(err, TR_E_CONFIG, "data.train_tokens: the tokens format needs a token file");
    if ((cfg->data.format == TR_DATA_TEXT || cfg->data.format == TR_DATA_TOKENS) &&
        cfg->train.loss != TR_LOSS_CROSS_ENTROPY)
        return tr_error_set(err, TR_E_CONFIG, "train.loss: language modelling (data.format: %s) needs cross_entropy",
                            tr_config_formats[cfg->data.format]);
    if (cfg->data.format == TR_DATA_IMAGE_FOLDER && !cfg->data.train_root[0])
        return tr_error_set(err, TR_E_CONFIG, "data.train_root: the image_folder format needs the training folder");
    if (cfg->data.n_image_size != 0 && cfg->data.n_image_size != 2)
        return tr_error_set(err, TR_E_CONFIG, "data.image_size: [H, W] (2 entries) or []; got %d",
                            cfg->data.n_image_size);
    for (int i = 0; i < cfg->data.n_image_size; i++)
        if (cfg->data.image_size[i] != (double)(int64_t)cfg->data.image_size[i])
            return tr_error_set(err, TR_E_CONFIG, "data.image_size: entry %d (%g) is not a whole number of pixels", i,
                                cfg->data.image_size[i]);
    if (cfg->data.resize_shorter > 0 && cfg->data.n_image_size != 2)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.resize_shorter: needs data.image_size [H, W], the centre crop "
                            "taken after the resize");
    if (cfg->data.format == TR_DATA_IMAGE_FOLDER && cfg->train.loss != TR_LOSS_CROSS_ENTROPY)
        return tr_error_set(err, TR_E_CONFIG, "train.loss: image folders give class indices: cross_entropy");
    if (cfg->data.format == TR_DATA_CSV && !cfg->data.train_csv[0])
        return tr_error_set(err, TR_E_CONFIG, "data.train_csv: the csv format needs a training table");
    if (cfg->data.format == TR_DATA_NPY && (!cfg->data.train_inputs[0] || !cfg->data.train_targets[0]))
        return tr_error_set(err, TR_E_CONFIG, "%s: the npy format needs data.train_inputs and data.train_targets",
                            !cfg->data.train_inputs[0] ? "data.train_inputs" : "data.train_targets");
    if (cfg->data.format == TR_DATA_IDX && !cfg->data.train_labels[0])
        return tr_error_set(err, TR_E_CONFIG, "data.train_labels: the idx format needs the training labels file");
    if (cfg->data.format == TR_DATA_IDX && !cfg->data.test_labels[0] && cfg->eval.split == TR_EVAL_TEST)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.test_labels: eval.split: test evaluates on the test set, which "
                            "needs labels (data.test_labels empty: the test images alone, for trainrun predict)");
    if (cfg->data.format == TR_DATA_NPY && !cfg->data.test_inputs[0] && cfg->data.test_targets[0])
        return tr_error_set(err, TR_E_CONFIG,
                            "data.test_targets: the npy format needs data.test_inputs with it "
                            "(data.test_inputs alone: unlabeled inputs, for trainrun predict)");
    if (cfg->data.format == TR_DATA_NPY && cfg->data.test_inputs[0] && !cfg->data.test_targets[0] &&
        cfg->eval.split == TR_EVAL_TEST)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.test_targets: eval.split: test evaluates on the test set, which "
                            "needs targets (data.test_inputs alone is for trainrun predict)");
    if (cfg->data.format == TR_DATA_CSV || cfg->data.format == TR_DATA_NPY) {
        /* idx files hold class labels, but a run or trainer of the embedding API may bring float targets of its
         * own: that case is checked against the data at set-up (run.c). */
        const bool float_targets = cfg->data.target != TR_TARGET_CLASS;
        const bool float_loss = cfg->train.loss != TR_LOSS_CROSS_ENTROPY;
        if (float_targets != float_loss)
            return tr_error_set(err, TR_E_CONFIG,
                                "train.loss: %s needs %s targets (data.format: csv or npy with data.target: %s)",
                                tr_config_losses[cfg->train.loss], float_loss ? "float" : "class-index",
                                float_loss ? (cfg->train.loss == TR_LOSS_BCE_WITH_LOGITS ? "multi_hot" : "regression")
                                           : "class");
    }
    if (strchr(cfg->run.name, '/') || strcmp(cfg->run.name, ".") == 0 || strcmp(cfg->run.name, "..") == 0)
        return tr_error_set(err, TR_E_CONFIG, "run.name: '%s' must be a plain directory name (no '/')",
                            cfg->run.name);
    if (cfg->model.spec[0] == '\0' && cfg->model.torchscript[0] == '\0')
        return tr_error_set(err, TR_E_CONFIG, "model.spec: no model given (e.g. model.spec=../models/mlp.yaml)");
    for (int i = 0; i < cfg->model.n_input_shape; i++)
        if (cfg->model.input_shape[i] != floor(cfg->model.input_shape[i]))
            return tr_error_set(err, TR_E_CONFIG, "model.input_shape[%d]: %g is not a whole number", i,
                                cfg->model.input_shape[i]);
    if (cfg->model.n_input_shape > 0 && cfg->model.spec[0] != '\0')
        return tr_error_set(err, TR_E_CONFIG, "model.input_shape: only for model.torchscript (a model YAML gives "
                            "its own input)");
    if (cfg->model.init_method[0] != '\0' && cfg->model.spec[0] != '\0')
        return tr_error_set(err, TR_E_CONFIG, "model.init_method: only for model.torchscript (a model YAML is "
                            "initialised with PyTorch's default initialisers)");
    for (const char *c = cfg->model.init_method; *c; c++)
        if (!(isalpha((unsigned char)*c) || *c == '_' || (c > cfg->model.init_method && isdigit((unsigned char)*c))))
            return tr_error_set(err, TR_E_CONFIG, "model.init_method: '%s' is not a method name (letters, digits "
                                "and '_', not starting with a digit)", cfg->model.init_method);
    if (cfg->model.spec[0] != '\0' && cfg->model.torchscript[0] != '\0')
        return tr_error_set(err, TR_E_CONFIG, "model.torchscript: give exactly one of model.spec (%s) and "
                            "model.torchscript (%s), not both", cfg->model.spec, cfg->model.torchscript);
    if (cfg->run.dir[0] == '\0')
        return tr_error_set(err, TR_E_CONFIG, "run.dir: must not be empty");
    return TR_OK;
}

/* ============================================================================================ output */

/** Number of leading '.'-separated components shared by the sections (all but the last component) of a and b. */
static size_t common_sections(const char *a, const char *b)
{
    size_t shared = 0;
    for (;;) {
        const char *da = strchr(a, '.'), *db = strchr(b, '.');
        if (!da || !db || da - a != db - b || strncmp(a, b, (size_t)(da - a)) != 0)
            return shared;
        shared++;
        a = da + 1;
        b = db + 1;
    }
}

int tr_config_write_yaml(const tr_config *cfg, FILE *f)
{
    fputs("# trainrun effective configuration (every key; see the README for the reference)\n", f);
    const char *prev = "";
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        const char *path = tr_config_schema[i].name;
        size_t shared = common_sections(prev, path);
        /* open the sections this key needs beyond the shared ones */
        const char *p = path;
        size_t depth = 0;
        for (const char *dot = strchr(p, '.'); dot; dot = strchr(p, '.')) {
            if (depth >= shared) {
                if (depth == 0)
                    fputc('\n', f);
                fprintf(f, "%*s%.*s:\n", (int)(2 * depth), "", (int)(dot - p), p);
            }
            depth++;
            p = dot + 1;
        }
        if (depth == 0 && prev[0] && strchr(prev, '.'))
            fputc('\n', f);
        fprintf(f, "%*s%s: ", (int)(2 * depth), "", p);
        tr_yf_write_value(&tr_config_schema[i], cfg, f);
        fputc('\n', f);
        prev = path;
    }
    if (fflush(f) != 0 || ferror(f))
        return TR_E_RUNTIME;
    return TR_OK;
}

void tr_config_write_reference(FILE *f)
{
    fputs("| key | type | default | range | meaning |\n", f);
    fputs("|-----|------|---------|-------|---------|\n", f);
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        const tr_yf_field *k = &tr_config_schema[i];
        fprintf(f, "| `%s` | ", k->name);
        if (k->type == TR_YF_ENUM) {
            fputs("enum:", f);
            for (size_t j = 0; k->enum_names[j]; j++)
                fprintf(f, "%s `%s`", j ? "," : "", k->enum_names[j]);
        } else {
            fputs(tr_yf_type_name(k), f);
        }
        fputs(" | `", f);
        tr_yf_write_default(k, f);
        fputs("` | ", f);
        char rt[128];
        tr_yf_range_text(&k->range, rt, sizeof rt);
        if (k->type == TR_YF_FLOAT_LIST)
            fprintf(f, "1 to %zu entries%s%s", k->size, rt[0] ? ", each " : "", rt);
        else
            fputs(rt, f);
        fprintf(f, " | %s |\n", k->doc);
    }
}

/* ============================================================================================ differences */

/* Key i's value as tr_config_write_yaml writes it, into out[n] (cut when longer). */
static void value_text(const tr_config *cfg, size_t i, char *out, size_t n)
{
    FILE *f = fmemopen(out, n, "w");
    if (!f) {
        out[0] = '\0';
        return;
    }
    setvbuf(f, NULL, _IONBF, 0);
    tr_yf_write_value(&tr_config_schema[i], cfg, f);
    fclose(f);
    out[n - 1] = '\0';
}

/* Call fn(ctx, key, value in a, value in b) for each schema key (not skipped) whose value text differs between a
 * and b, in schema order; stops at the first nonzero fn result and returns it, else 0. */
static int each_difference(const tr_config *a, const tr_config *b, int (*skip)(const char *key),
                           int (*fn)(void *ctx, const char *key, const char *va, const char *vb), void *ctx)
{
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        const char *key = tr_config_schema[i].name;
        if (skip && skip(key)) continue;
        char va[TR_PATH_MAX + 8], vb[TR_PATH_MAX + 8];
        value_text(a, i, va, sizeof va);
        value_text(b, i, vb, sizeof vb);
        if (strcmp(va, vb) == 0) continue;
        const int rc = fn(ctx, key, va, vb);
        if (rc) return rc;
    }
    return 0;
}

int tr_config_each_key(const tr_config *cfg,
                       int (*fn)(void *ctx, const char *key, tr_config_kind kind, const char *value), void *ctx)
{
    for (size_t i = 0; i < tr_config_schema_n; i++) {
        char v[TR_PATH_MAX + 8];
        value_text(cfg, i, v, sizeof v);
        const int t = tr_config_schema[i].type;
        const tr_config_kind kind = t == TR_YF_INT || t == TR_YF_INT64 || t == TR_YF_UINT64 || t == TR_YF_FLOAT
                                        ? TR_CONFIG_NUMBER
                                    : t == TR_YF_BOOL ? TR_CONFIG_BOOL
                                                      : TR_CONFIG_TEXT;
        const int rc = fn(ctx, tr_config_schema[i].name, kind, v);
        if (rc) return rc;
    }
    return 0;
}

typedef struct diff_text {
    char *out;
    size_t n, len;
    int count;
} diff_text;

static int append_difference(void *ctx, const char *key, const char *va, const char *vb)
{
    diff_text *d = ctx;
    d->count++;
    if (d->len + 4 >= d->n) return 0;
    const int w = snprintf(d->out + d->len, d->n - d->len, "%s%s %s -> %s", d->len ? ", " : "", key, va, vb);
    if (w < 0 || (size_t)w >= d->n - d->len) {
        snprintf(d->out + (d->len < d->n - 4 ? d->len : d->n - 4), 4, "...");
        d->len = d->n;
    } else {
        d->len += (size_t)w;
    }
    return 0;
}

int tr_config_diff(const tr_config *a, const tr_config *b, int (*skip)(const char *key), char *out, size_t n)
{
    diff_text d = {.out = out, .n = n};
    if (n) out[0] = '\0';
    each_difference(a, b, skip, append_difference, &d);
    return d.count;
}

typedef struct override_list {
    char **list;
    int count;
} override_list;

static int append_override(void *ctx, const char *key, const char *va, const char *vb)
{
    (void)va;
    override_list *o = ctx;
    const size_t len = strlen(key) + strlen(vb) + 2;
    if (!(o->list[o->count] = malloc(len))) return -1;
    snprintf(o->list[o->count++], len, "%s=%s", key, vb);
    return 0;
}

int tr_config_overrides_between(const tr_config *base, const tr_config *cfg, int (*skip)(const char *key),
                                 char ***out)
{
    *out = NULL;
    override_list o = {.list = calloc(tr_config_schema_n + 1, sizeof(char *))};
    if (!o.list) return -1;
    if (each_difference(base, cfg, skip, append_override, &o)) {
        tr_config_overrides_free(o.list);
        return -1;
    }
    *out = o.list;
    return o.count;
}

void tr_config_overrides_free(char **list)
{
    if (!list) return;
    for (char **p = list; *p; p++) free(*p);
    free(list);
}

/* ============================================================================================ paths */

void tr_config_resolve_path(const tr_config *cfg, const char *rel, char *out)
{
    const char *slash = strrchr(cfg->source, '/');
    if (rel[0] == '/' || rel[0] == '\0' || cfg->source[0] == '\0' || !slash) {
        snprintf(out, TR_PATH_MAX, "%s", rel);
        return;
    }
    size_t dirlen = (size_t)(slash - cfg->source);
    if (dirlen == 0) /* "/x.yaml": the root directory */
        snprintf(out, TR_PATH_MAX, "/%s", rel);
    else
        snprintf(out, TR_PATH_MAX, "%.*s/%s", (int)dirlen, cfg->source, rel);
}

void tr_config_resolve_data_path(const tr_config *cfg, const char *name, char *out, size_t size)
{
    char base[TR_PATH_MAX];
    if (strncmp(name, "./", 2) == 0 || strncmp(name, "../", 3) == 0) {
        tr_config_resolve_path(cfg, name, base);
        snprintf(out, size, "%s", base);
    } else if (name[0] == '/') {
        snprintf(out, size, "%s", name);
    } else {
        tr_config_resolve_path(cfg, cfg->data.root, base);
        snprintf(out, size, "%s/%s", base, name);
    }
}

int tr_config_load_cli(tr_config *cfg, const char *path, char *const *overrides, int n, tr_error *err)
{
    tr_config_defaults(cfg);
    int rc = tr_config_load_file(cfg, path, err);
    for (int i = 0; rc == TR_OK && i < n; i++) {
        const size_t klen = strcspn(overrides[i], "=");
        for (int j = 0; j < i && rc == TR_OK; j++)
            if (strncmp(overrides[i], overrides[j], klen) == 0 && strcspn(overrides[j], "=") == klen)
                rc = tr_error_set(err, TR_E_CONFIG, "override '%s': %.*s is already set by '%s'", overrides[i],
                                  (int)klen, overrides[i], overrides[j]);
        if (rc == TR_OK) rc = tr_config_override(cfg, overrides[i], err);
    }
    if (rc == TR_OK) rc = tr_config_validate(cfg, err);
    return rc;
}

