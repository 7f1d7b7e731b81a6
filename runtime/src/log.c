#include "log.h"

#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainrun_shim.h"

double tr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tr_log_open(tr_log *log, const tr_config *cfg, const char *run_dir, int64_t total_steps, tr_error *err)
{
    memset(log, 0, sizeof *log);
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    log->jsonl = fopen(path, "a");
    if (!log->jsonl) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open for writing", path);
    log->console = stderr;
    switch (cfg->log.progress) {
    case TR_PROGRESS_ALWAYS: log->live = 1; break;
    case TR_PROGRESS_NEVER: log->live = 0; break;
    default: log->live = isatty(fileno(stderr)); break;
    }
    log->total_steps = total_steps;
    log->t_start = tr_now();
    log->t_last_print = log->t_start;
    log->last_val_acc = -1.0;
    return TR_OK;
}

/* ,"allocated":A,"peak":P,"reserved":R,"rss":S for the record being written: live tensor bytes, their peak, bytes
 * the caching allocator holds from the system (live + cached), and the process's resident set */
static void write_memory_fields(FILE *f)
{
    trs_memory_stats m;
    if (trs_memory_stats_get(&m) != TRS_OK) memset(&m, 0, sizeof m);
    fprintf(f, ",\"allocated\":%lld,\"peak\":%lld,\"reserved\":%lld,\"rss\":%lld", (long long)m.allocated_bytes,
            (long long)m.peak_bytes, (long long)m.reserved_bytes, (long long)m.rss_bytes);
}

void tr_json_number(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.17g", v);
    else fputs("null", f);
}

void tr_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void tr_format_bytes(double b, char *out, size_t n)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    const double sign = b < 0 ? -1.0 : 1.0;
    b *= sign;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(out, n, "%.0f B", sign * b);
    else snprintf(out, n, "%.*f %s", b < 10 ? 2 : 1, sign * b, units[u]);
}

static void clear_line(tr_log *log)
{
    if (log->line_open) {
        fputs("\r\033[K", log->console);
        log->line_open = 0;
    }
}

static void format_duration(double s, char *out, size_t n)
{
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, n, "%lds", t);
}

void tr_log_train(tr_log *log, int64_t step, int64_t epoch, double loss, double accuracy, double lr,
                  double samples_per_s, int partial)
{
    const double now = tr_now();
    const double elapsed = now - log->t_start;
    if (log->jsonl) {
        fprintf(log->jsonl, "{\"type\":\"train\",\"step\":%lld,\"epoch\":%lld,\"loss\":", (long long)step,
                (long long)epoch);
        tr_json_number(log->jsonl, loss);
        fputs(",\"accuracy\":", log->jsonl);
        tr_json_number(log->jsonl, accuracy);
        fputs(",\"lr\":", log->jsonl);
        tr_json_number(log->jsonl, lr);
        fprintf(log->jsonl, ",\"samples_per_s\":%.6g,\"time_s\":%.6g", samples_per_s, elapsed);
        if (partial) fputs(",\"partial\":true", log->jsonl);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    // Live: at most ~5 refreshes a second. Plain: one line every 10 s, and always the last step.
    const double every = log->live ? 0.2 : 10.0;
    if (now - log->t_last_print < every && step != log->total_steps) return;
    log->t_last_print = now;
    char eta[32], val[32] = "";
    const double rate = step > 0 ? elapsed / (double)step : 0.0;
    format_duration(rate * (double)(log->total_steps - step), eta, sizeof eta);
    if (log->last_val_acc >= 0) snprintf(val, sizeof val, "  val_acc %.4f", log->last_val_acc);
    if (log->live) fputs("\r\033[K", log->console);
    fprintf(log->console, "step %lld/%lld  epoch %lld  loss %.4f  acc %.4f%s  lr %.3g  %.0f samples/s  ETA %s",
            (long long)step, (long long)log->total_steps, (long long)epoch, loss, accuracy, val, lr, samples_per_s,
            eta);
    if (log->live) {
        log->line_open = 1;
    } else {
        fputc('\n', log->console);
    }
    fflush(log->console);
}

void tr_log_eval(tr_log *log, const char *split, int64_t step, int64_t epoch, double loss, int64_t correct,
                 int64_t samples, double seconds)
{
    const double acc = samples > 0 ? (double)correct / (double)samples : 0.0;
    if (log->jsonl) {
        fprintf(log->jsonl, "{\"type\":\"eval\",\"split\":\"%s\",\"step\":%lld,\"epoch\":%lld,\"loss\":", split,
                (long long)step, (long long)epoch);
        tr_json_number(log->jsonl, loss);
        fprintf(log->jsonl, ",\"accuracy\":%.17g,\"correct\":%lld,\"samples\":%lld,\"seconds\":%.6g", acc,
                (long long)correct, (long long)samples, seconds);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    if (strcmp(split, "val") == 0) log->last_val_acc = acc;
    tr_log_message(log, "%-4s step %lld  epoch %lld  loss %.4f  accuracy %.4f (%lld/%lld)  %.2fs", split,
                   (long long)step, (long long)epoch, loss, acc, (long long)correct, (long long)samples, seconds);
}

void tr_log_eval_metrics(tr_log *log, const char *split, const char *weights, int64_t step, int64_t epoch,
                         const tr_metrics *m, int top_k, double seconds)
{
    const double acc = tr_metrics_accuracy(m), loss = tr_metrics_loss(m);
    if (log->jsonl) {
        fprintf(log->jsonl, "{\"type\":\"eval\",\"split\":\"%s\",\"step\":%lld,\"epoch\":%lld,\"weights\":\"%s\","
                            "\"loss\":", split, (long long)step, (long long)epoch, weights);
        tr_json_number(log->jsonl, loss);
        fprintf(log->jsonl, ",\"accuracy\":%.17g,\"correct\":%lld,\"samples\":%lld,\"seconds\":%.6g", acc,
                (long long)m->correct, (long long)m->samples, seconds);
        tr_metrics_write_json(m, top_k, log->jsonl);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    const int ema = strcmp(weights, "ema") == 0;
    if (strcmp(split, "val") == 0 && !ema) log->last_val_acc = acc;
    char extra[160] = "";
    switch (m->task) {
    case TR_TASK_CLASSIFY:
        if (top_k > 0) snprintf(extra, sizeof extra, "  top-%d %.4f", top_k, tr_metrics_topk_accuracy(m));
        break;
    case TR_TASK_MULTI_LABEL:
        snprintf(extra, sizeof extra, "  micro-F1 %.4f  macro-F1 %.4f", tr_metrics_micro_f1(m), tr_metrics_macro_f1(m));
        break;
    case TR_TASK_REGRESSION:
        snprintf(extra, sizeof extra, "  MSE %.5g  MAE %.5g", tr_metrics_mse(m), tr_metrics_mae(m));
        break;
    }
    tr_log_message(log, "%-4s%s step %lld  epoch %lld  loss %.4f  accuracy %.4f (%lld/%lld)%s  %.2fs", split,
                   ema ? " (EMA)" : "", (long long)step, (long long)epoch, loss, acc, (long long)m->correct,
                   (long long)m->samples, extra, seconds);
}

void tr_log_watchdog(tr_log *log, const tr_watchdog_report *r)
{
    static const char *names[] = {"none", "baseline", "warn", "limit"};
    const char *ev = names[r->event];
    if (log->jsonl) {
        fprintf(log->jsonl,
                "{\"type\":\"watchdog\",\"event\":\"%s\",\"step\":%lld,\"baseline\":%lld,\"limit\":%lld,"
                "\"growth_per_step\":%.6g,\"steps_left\":%.6g",
                ev, (long long)r->step, (long long)r->baseline, (long long)r->limit, r->growth_per_step,
                r->steps_left);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    char base[32], cur[32], lim[32] = "none", growth[32], left[48] = "", res[32], rss[32];
    tr_format_bytes((double)r->baseline, base, sizeof base);
    tr_format_bytes((double)r->current, cur, sizeof cur);
    tr_format_bytes((double)r->reserved, res, sizeof res);
    tr_format_bytes((double)r->rss, rss, sizeof rss);
    const double frag = r->current > 0 ? (double)r->reserved / (double)r->current : 0.0;
    if (r->limit > 0) tr_format_bytes((double)r->limit, lim, sizeof lim);
    tr_format_bytes(r->growth_per_step, growth, sizeof growth);
    if (r->steps_left >= 0) snprintf(left, sizeof left, ", reached in ~%.0f steps", r->steps_left);
    if (r->event == TR_WD_EV_BASELINE) {
        tr_log_message(log, "watchdog: baseline %s allocated at step %lld (reserved %s = %.2fx allocated, RSS %s); "
                            "limit %s", base, (long long)r->step, res, frag, rss, lim);
        return;
    }
    tr_log_message(log, "watchdog: %s at step %lld: allocated %s = %.2fx baseline %s; growth %s/step; limit %s%s; "
                        "reserved %s = %.2fx allocated, RSS %s",
                   r->event == TR_WD_EV_LIMIT ? "LIMIT" : "WARNING", (long long)r->step, cur,
                   r->baseline > 0 ? (double)r->current / (double)r->baseline : 0.0, base, growth, lim, left, res,
                   frag, rss);
}

void tr_log_checkpoint(tr_log *log, int64_t step, const char *reason, const char *path, int64_t bytes,
                       double seconds, double elapsed)
{
    if (log->jsonl) {
        fprintf(log->jsonl, "{\"type\":\"checkpoint\",\"step\":%lld,\"reason\":\"%s\",\"path\":", (long long)step,
                reason);
        tr_json_string(log->jsonl, path);
        fprintf(log->jsonl, ",\"bytes\":%lld,\"seconds\":%.6g,\"elapsed_s\":%.6g", (long long)bytes, seconds,
                elapsed);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    char size[32];
    tr_format_bytes((double)bytes, size, sizeof size);
    tr_log_message(log, "checkpoint step %lld (%s): %s, %s in %.2fs", (long long)step, reason, path, size, seconds);
}

void tr_log_resume(tr_log *log, int64_t step, int64_t epoch, int64_t pos, const char *path)
{
    if (log->jsonl) {
        fprintf(log->jsonl, "{\"type\":\"resume\",\"step\":%lld,\"epoch\":%lld,\"position\":%lld,\"checkpoint\":",
                (long long)step, (long long)epoch, (long long)pos);
        tr_json_string(log->jsonl, path);
        write_memory_fields(log->jsonl);
        fputs("}\n", log->jsonl);
        fflush(log->jsonl);
    }
    tr_log_message(log, "resuming from %s: step %lld, epoch %lld, position %lld", path, (long long)step,
                   (long long)epoch, (long long)pos);
}

void tr_log_message(tr_log *log, const char *fmt, ...)
{
    FILE *out = log && log->console ? log->console : stderr;
    if (log) clear_line(log);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

void tr_log_close(tr_log *log)
{
    clear_line(log);
    if (log->console == log->jsonl) log->console = NULL; /* a non-zero rank's /dev/null (dist.c) */
    if (log->jsonl) {
        fclose(log->jsonl);
        log->jsonl = NULL;
    }
}
