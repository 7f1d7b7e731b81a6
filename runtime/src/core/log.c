#include "log.h"

#include "json_out.h"
#include "metrics.h"
#include "units.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "trainrun_shim.h"

double tr_clock_now(const tr_clock *c) { return c && c->now ? c->now(c->ctx) : tr_now(); }

void tr_log_reset(tr_log *log)
{
    const tr_log_sink sink = log->sink;
    void (*on_record)(void *, const char *) = log->on_record;
    void *record_ctx = log->record_ctx;
    const tr_clock clock = log->clock;
    memset(log, 0, sizeof *log);
    log->sink = sink;
    log->clock = clock;
    log->on_record = on_record;
    log->record_ctx = record_ctx;
}

int tr_log_open(tr_log *log, const tr_config *cfg, const char *run_dir, int64_t total_steps, tr_error *err)
{
    tr_log_reset(log);
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
    if (log->sink.set) log->live = 0; /* a sink gets plain lines */
    log->progress = cfg->log.progress != TR_PROGRESS_NEVER; /* never: no progress line, live or plain, anywhere */
    log->total_steps = total_steps;
    log->t_start = tr_clock_now(&log->clock);
    log->t_last_print = log->t_start;
    log->last_val_acc = -1.0;
    return TR_OK;
}

/* ,"allocated":A,"peak":P,"reserved":R,"rss":S for the record being written, of the run's device
 * (log->memory_device): live tensor bytes, their peak, the bytes the caching allocator holds (live + cached
 * blocks), and the process's resident set */
static void write_memory_fields(const tr_log *log, FILE *f)
{
    tr_memory m;
    tr_memory_read(&log->memory_device, &m);
    fprintf(f, ",\"allocated\":%lld,\"peak\":%lld", (long long)m.allocated, (long long)m.peak);
    if (m.reserved >= 0) fprintf(f, ",\"reserved\":%lld", (long long)m.reserved);
    fprintf(f, ",\"rss\":%lld", (long long)m.rss);
}

/* A record is composed in memory (record_begin), then appended to metrics.jsonl as one line and handed to the
 * record hook (record_end): the sinks that derive from the JSONL (metrics.csv) see exactly its bytes. */
typedef struct record {
    FILE *f;
    char *buf;
    size_t len;
} record;

static FILE *record_begin(const tr_log *log, record *r)
{
    memset(r, 0, sizeof *r);
    if (!log->jsonl) return NULL;
    r->f = open_memstream(&r->buf, &r->len);
    return r->f;
}

static void record_end(tr_log *log, record *r)
{
    if (!r->f) return;
    write_memory_fields(log, r->f);
    fputs("}\n", r->f);
    if (fclose(r->f) == 0 && r->buf) {
        fwrite(r->buf, 1, r->len, log->jsonl);
        fflush(log->jsonl);
        if (log->on_record) log->on_record(log->record_ctx, r->buf);
    }
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* A console write that failed (EPIPE from a closed pipe, EIO from a hung-up terminal) ends console output: the
 * run goes on, its records still go to metrics.jsonl, and no later write retries the dead descriptor. */
static void console_check(tr_log *log, FILE *out)
{
    if (fflush(out) != 0 || ferror(out)) {
        const int e = errno; /* the failed write's (stderr is unbuffered) or fflush's */
        clearerr(out);
        if (log && e != EINTR && e != EAGAIN) log->console_dead = 1; /* EPIPE, EIO: nobody reads it any more */
    }
}

static void clear_line(tr_log *log)
{
    if (log->line_open) {
        if (!log->console_dead) {
            fputs("\r\033[K", log->console);
            console_check(log, log->console);
        }
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

int tr_terminal_width(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    const long v = c ? strtol(c, NULL, 10) : 0;
    return v > 0 && v < 10000 ? (int)v : 80;
}

enum { F_STEP, F_BAR, F_EPOCH, F_LOSS, F_ACC, F_VAL, F_LR, F_RATE, F_ELAPSED, F_ETA, F_COUNT };

/* The fields' texts (empty: not shown). */
static void progress_fields(const tr_progress *p, char f[F_COUNT][48])
{
    char d[32];
    memset(f, 0, (size_t)F_COUNT * sizeof f[0]);
    snprintf(f[F_STEP], sizeof f[0], "step %lld/%lld", (long long)p->step, (long long)p->total);
    snprintf(f[F_EPOCH], sizeof f[0], "epoch %lld", (long long)p->epoch);
    snprintf(f[F_LOSS], sizeof f[0], "loss %.4f", p->loss);
    snprintf(f[F_ACC], sizeof f[0], "acc %.4f", p->accuracy);
    if (p->val_accuracy >= 0) snprintf(f[F_VAL], sizeof f[0], "val_acc %.4f", p->val_accuracy);
    snprintf(f[F_LR], sizeof f[0], "lr %.3g", p->lr);
    snprintf(f[F_RATE], sizeof f[0], "%.0f samples/s", p->samples_per_s);
    format_duration(p->elapsed_s, d, sizeof d);
    snprintf(f[F_ELAPSED], sizeof f[0], "elapsed %s", d);
    if (p->eta_s >= 0) format_duration(p->eta_s, d, sizeof d);
    else snprintf(d, sizeof d, "?");
    snprintf(f[F_ETA], sizeof f[0], "ETA %s", d);
}

size_t tr_progress_format(const tr_progress *p, int width, char *out, size_t n)
{
    if (n == 0) return 0;
    char f[F_COUNT][48];
    progress_fields(p, f);
    /* kept first to last; the bar is last of all and takes the room left, up to 30 columns */
    static const int priority[] = {F_STEP, F_LOSS, F_ETA, F_ELAPSED, F_VAL, F_LR, F_ACC, F_EPOCH, F_RATE};
    const int sep = 2, room = width - 1;
    int keep[F_COUNT] = {0}, used = 0;
    for (size_t i = 0; i < sizeof priority / sizeof *priority; i++) {
        const int k = priority[i], len = (int)strlen(f[k]);
        if (!len) continue;
        const int need = len + (used ? sep : 0);
        if (i >= 3 && used + need > room) break; /* strictly by priority: a lower field never displaces a higher */
        keep[k] = 1;
        used += need;
    }
    /* the bar: "[####......]  37%", 10 to 30 cells, when that much room is left */
    const int bar_extra = 2 + 5 + 1; /* brackets, " 100%", the separator's second blank */
    const int bar_cells = room - used - sep - bar_extra + 1 > 30 ? 30 : room - used - sep - bar_extra + 1;
    if (bar_cells >= 10) {
        const double frac = p->total > 0 ? (double)p->step / (double)p->total : 0.0;
        const int done = (int)(frac * bar_cells + 1e-9);
        char *b = f[F_BAR];
        int k = 0;
        b[k++] = '[';
        for (int i = 0; i < bar_cells; i++) b[k++] = i < done ? '#' : '.';
        b[k++] = ']';
        snprintf(b + k, sizeof f[0] - (size_t)k, " %3.0f%%", 100.0 * (frac < 1 ? frac : 1));
        keep[F_BAR] = 1;
    }
    size_t len = 0;
    out[0] = '\0';
    for (int k = 0; k < F_COUNT; k++) {
        if (!keep[k]) continue;
        const int w = snprintf(out + len, n - len, "%s%s", len ? "  " : "", f[k]);
        if (w < 0 || (size_t)w >= n - len) {
            len = n - 1;
            break;
        }
        len += (size_t)w;
    }
    if (room > 0 && len > (size_t)room) len = (size_t)room; /* a terminal too narrow even for step, loss, ETA */
    out[len] = '\0';
    return len;
}

size_t tr_progress_format_plain(const tr_progress *p, time_t wall, char *out, size_t n)
{
    char f[F_COUNT][48], stamp[32];
    progress_fields(p, f);
    struct tm tm;
    localtime_r(&wall, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    const int w = snprintf(out, n, "%s  %s  %s  %s  %s%s%s  %s  %s  %s  %s", stamp, f[F_STEP], f[F_EPOCH],
                           f[F_LOSS], f[F_ACC], f[F_VAL][0] ? "  " : "", f[F_VAL], f[F_LR], f[F_RATE],
                           f[F_ELAPSED], f[F_ETA]);
    return w < 0 ? 0 : (size_t)w < n ? (size_t)w : n - 1;
}

static void log_train(tr_log *log, int64_t step, int64_t epoch, double loss, double accuracy, double lr,
                  double samples_per_s, int partial)
{
    const double now = tr_clock_now(&log->clock);
    const double elapsed = now - log->t_start;
    record rec;
    FILE *out = record_begin(log, &rec);
    if (out) {
        fprintf(out, "{\"type\":\"train\",\"step\":%lld,\"epoch\":%lld,\"loss\":", (long long)step,
                (long long)epoch);
        tr_json_number(out, loss);
        fputs(",\"accuracy\":", out);
        tr_json_number(out, accuracy);
        fputs(",\"lr\":", out);
        tr_json_number(out, lr);
        fprintf(out, ",\"samples_per_s\":%.6g,\"time_s\":%.6g", samples_per_s, elapsed);
        if (partial) fputs(",\"partial\":true", out);
        record_end(log, &rec);
    }
    if (!log->progress || (log->console_dead && !log->sink.set)) return;
    // Live: at most ~5 refreshes a second. Plain: one line every 10 s, and always the last step.
    const double every = log->live ? 0.2 : 10.0;
    if (now - log->t_last_print < every && step != log->total_steps) return;
    log->t_last_print = now;
    /* ETA from this process's pace: steps done here over seconds spent here */
    const int64_t here = step - log->step0;
    const tr_progress pr = {.step = step, .total = log->total_steps, .epoch = epoch, .loss = loss,
                            .accuracy = accuracy, .val_accuracy = log->last_val_acc, .lr = lr,
                            .samples_per_s = samples_per_s, .elapsed_s = log->elapsed0 + elapsed,
                            .eta_s = here > 0 ? elapsed / (double)here * (double)(log->total_steps - step) : -1.0};
    char line[512];
    if (log->sink.set) {
        tr_progress_format_plain(&pr, time(NULL), line, sizeof line);
        if (log->sink.fn) log->sink.fn(log->sink.ctx, TR_LOG_PROGRESS, line);
        return;
    }
    if (log->live) {
        tr_progress_format(&pr, tr_terminal_width(fileno(log->console)), line, sizeof line);
        fprintf(log->console, "\r\033[K%s", line);
        log->line_open = 1;
    } else {
        tr_progress_format_plain(&pr, time(NULL), line, sizeof line);
        fprintf(log->console, "%s\n", line);
    }
    console_check(log, log->console);
}

static void log_eval_metrics(tr_log *log, const char *split, const char *weights, int64_t step, int64_t epoch,
                         const tr_metrics *m, int top_k, double seconds)
{
    const double acc = tr_metrics_accuracy(m), loss = tr_metrics_loss(m);
    record rec;
    FILE *out = record_begin(log, &rec);
    if (out) {
        fprintf(out, "{\"type\":\"eval\",\"split\":\"%s\",\"step\":%lld,\"epoch\":%lld,\"weights\":\"%s\","
                            "\"loss\":", split, (long long)step, (long long)epoch, weights);
        tr_json_number(out, loss);
        fprintf(out, ",\"accuracy\":%.17g,\"correct\":%lld,\"samples\":%lld,\"seconds\":%.6g", acc,
                (long long)m->correct, (long long)m->samples, seconds);
        tr_metrics_write_json(m, top_k, out);
        record_end(log, &rec);
    }
    const int ema = strcmp(weights, "ema") == 0;
    if (strcmp(split, "val") == 0 && !ema) log->last_val_acc = acc;
    char extra[160] = "";
    switch (m->task) {
    case TR_TASK_CLASSIFY:
        if (m->bits_name)
            snprintf(extra, sizeof extra, "  %s %.4f  perplexity %.3f", m->bits_name, tr_nats_to_bits(loss),
                     tr_perplexity(loss));
        else if (top_k > 0) snprintf(extra, sizeof extra, "  top-%d %.4f", top_k, tr_metrics_topk_accuracy(m));
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
                   (long long)(m->bits_name ? m->targets : m->samples), extra, seconds);
}

static void log_watchdog(tr_log *log, const tr_watchdog_report *r)
{
    static const char *names[] = {"none", "baseline", "warn", "limit"};
    const char *ev = names[r->event];
    record rec;
    FILE *out = record_begin(log, &rec);
    if (out) {
        fprintf(out,
                "{\"type\":\"watchdog\",\"event\":\"%s\",\"step\":%lld,\"baseline\":%lld,\"limit\":%lld,"
                "\"growth_per_step\":%.6g,\"steps_left\":%.6g",
                ev, (long long)r->step, (long long)r->baseline, (long long)r->limit, r->growth_per_step,
                r->steps_left);
        record_end(log, &rec);
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

static void log_checkpoint(tr_log *log, int64_t step, const char *reason, const char *path, int64_t bytes,
                       double seconds, double stall_seconds, double elapsed)
{
    record rec;
    FILE *out = record_begin(log, &rec);
    if (out) {
        fprintf(out, "{\"type\":\"checkpoint\",\"step\":%lld,\"reason\":\"%s\",\"path\":", (long long)step,
                reason);
        tr_json_string(out, path);
        fprintf(out, ",\"bytes\":%lld,\"seconds\":%.6g,\"stall_s\":%.6g,\"elapsed_s\":%.6g", (long long)bytes,
                seconds, stall_seconds, elapsed);
        record_end(log, &rec);
    }
    char size[32];
    tr_format_bytes((double)bytes, size, sizeof size);
    tr_log_message(log, "checkpoint step %lld (%s): %s, %s in %.2fs (the loop paused %.1f ms)", (long long)step,
                   reason, path, size, seconds, stall_seconds * 1e3);
}

static void log_resume(tr_log *log, int64_t step, int64_t epoch, int64_t pos, const char *path)
{
    record rec;
    FILE *out = record_begin(log, &rec);
    if (out) {
        fprintf(out, "{\"type\":\"resume\",\"step\":%lld,\"epoch\":%lld,\"position\":%lld,\"checkpoint\":",
                (long long)step, (long long)epoch, (long long)pos);
        tr_json_string(out, path);
        record_end(log, &rec);
    }
    tr_log_message(log, "resuming from %s: step %lld, epoch %lld, position %lld", path, (long long)step,
                   (long long)epoch, (long long)pos);
}

void tr_log_event(tr_log *log, const tr_event *ev)
{
    switch (ev->kind) {
    case TR_EV_TRAIN:
        log_train(log, ev->step, ev->epoch, ev->loss, ev->accuracy, ev->lr, ev->samples_per_s, ev->partial);
        break;
    case TR_EV_EVAL:
        log_eval_metrics(log, ev->split, ev->weights, ev->step, ev->epoch, ev->metrics, ev->top_k, ev->seconds);
        break;
    case TR_EV_CHECKPOINT:
        log_checkpoint(log, ev->step, ev->reason, ev->path, ev->bytes, ev->seconds, ev->stall_seconds, ev->elapsed);
        break;
    case TR_EV_WATCHDOG: log_watchdog(log, &ev->watchdog); break;
    case TR_EV_RESUME: log_resume(log, ev->step, ev->epoch, ev->position, ev->path); break;
    default: break; /* steps, the end of training and of the run: not in metrics.jsonl */
    }
}

void tr_log_message(tr_log *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (log && log->sink.set) {
        char line[2048];
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        if (log->sink.fn) log->sink.fn(log->sink.ctx, TR_LOG_MESSAGE, line);
        return;
    }
    if (log && log->console_dead) {
        va_end(ap);
        return;
    }
    FILE *out = log && log->console ? log->console : stderr;
    if (log) clear_line(log);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    console_check(log, out);
}

void tr_log_close(tr_log *log)
{
    clear_line(log);
    if (log->console == log->jsonl) log->console = NULL; /* a non-zero rank's /dev/null (dist.c) */
    if (log->jsonl) {
        /* records are flushed as written; one lost to a full disk is reported here, once */
        const int lost = ferror(log->jsonl);
        const int closed = fclose(log->jsonl) == 0;
        log->jsonl = NULL;
        if (lost || !closed) tr_log_message(log, "warning: metrics.jsonl: some records could not be written (disk full?)");
    }
}

void tr_log_window_add(tr_ckpt_progress *p, const trs_step_result *r)
{
    p->win_loss += r->loss;
    p->win_correct += r->correct;
    p->win_samples += r->samples;
    p->win_steps++;
}

tr_event tr_log_window_close(tr_ckpt_progress *p, double lr, double seconds, double labels_per_sample, int partial)
{
    const double counted = (double)p->win_samples * labels_per_sample;
    const tr_event ev = {.kind = TR_EV_TRAIN, .step = p->step, .epoch = p->epoch,
                         .loss = p->win_loss / (double)p->win_steps, .accuracy = (double)p->win_correct / counted,
                         .lr = lr, .partial = partial,
                         .samples_per_s = (double)p->win_samples / (seconds > 0 ? seconds : 1e-9)};
    p->win_loss = 0.0;
    p->win_correct = p->win_samples = p->win_steps = 0;
    return ev;
}
