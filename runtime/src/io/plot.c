/*
 * plot.c -- curves.png with cairo (plot.h). Why cairo and not plplot: cairo draws into a surface object the
 * caller owns (runs in several threads of one program each draw their own; plplot keeps its streams in global
 * state), writes PNG itself (no driver plug-ins loaded at run time from plplot's driver directory, which an
 * installed or static trainrun would have to find), gives anti-aliased text through fontconfig, and its text
 * extents let the layout below place every label without overlaps.
 */
#include "plot.h"

#include <cairo/cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

static const double TR_PLOT_PI = 3.14159265358979323846;

/* ------------------------------------------------------------------------------------------------ layout */

enum {
    LEFT = 118,          /* y tick labels and the rotated y title */
    RIGHT = 28,
    TOP = 52,            /* the figure's title                    */
    STRIP = 46,          /* a panel's title and legend (2 lines)  */
    AREA = 200,          /* a panel's plotting area               */
    TICKS = 38,          /* x tick labels under each panel        */
    BOTTOM = 34,         /* the x axis title                      */
    RUN_LINE = 22,       /* a line of the run legend (several runs) */
    N_PANELS = 4,
};
#define FONT "DejaVu Sans"

typedef struct series_def {
    const char *column;  /* history column */
    const char *label;
    double scale;        /* value multiplier (bytes to MiB) */
} series_def;

typedef struct panel_def {
    const char *title, *ylabel;
    const series_def *s;
    int n;
} panel_def;

static const series_def k_loss[] = {{"train_loss", "train", 1}, {"val_loss", "val", 1}, {"val_ema_loss", "val (EMA)", 1},
                                    {"test_loss", "test", 1}, {"test_ema_loss", "test (EMA)", 1}};
static const series_def k_acc[] = {{"train_accuracy", "train", 1}, {"val_accuracy", "val", 1},
                                   {"val_ema_accuracy", "val (EMA)", 1}, {"test_accuracy", "test", 1},
                                   {"test_ema_accuracy", "test (EMA)", 1}};
static const series_def k_f1[] = {{"val_micro_f1", "val micro-F1", 1}, {"val_macro_f1", "val macro-F1", 1},
                                  {"val_ema_micro_f1", "val (EMA) micro-F1", 1}, {"test_micro_f1", "test micro-F1", 1},
                                  {"test_macro_f1", "test macro-F1", 1}};
static const series_def k_err[] = {{"val_mse", "val MSE", 1}, {"val_mae", "val MAE", 1}, {"val_ema_mse", "val (EMA) MSE", 1},
                                   {"test_mse", "test MSE", 1}, {"test_mae", "test MAE", 1}};
static const series_def k_lr[] = {{"lr", "learning rate", 1}};
static const series_def k_mem[] = {{"allocated", "allocated", 1.0 / 1048576.0}, {"reserved", "reserved", 1.0 / 1048576.0}};

#define DEF(title, y, arr) {title, y, arr, (int)(sizeof arr / sizeof *arr)}

/* Colours: a run's (several runs) or a series' (one run). */
static const double k_palette[][3] = {{0.12, 0.47, 0.71}, {0.85, 0.37, 0.01}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                                      {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};
#define N_COLOURS (sizeof k_palette / sizeof *k_palette)

/* ------------------------------------------------------------------------------------------------ data */

typedef struct points {
    double *x, *y;
    size_t n;
} points;

/* The last step of history h (its length in steps), at least 1. */
static double last_step(const tr_history *h)
{
    double last = 1;
    for (size_t i = 0; i < h->n; i++)
        if ((double)h->r[i].step > last) last = (double)h->r[i].step;
    return last;
}

/* Column `s` of history h as (step, value) points, value scaled; NaN values are kept (they break the line). With
 * x_fraction the step is given as a fraction of the run's last step. */
static int collect(const tr_history *h, const series_def *s, points *p, int x_fraction)
{
    const double xdiv = x_fraction ? last_step(h) : 1.0;
    memset(p, 0, sizeof *p);
    size_t cap = 0;
    for (size_t i = 0; i < h->n; i++) {
        double v;
        if (!tr_hist_get(&h->r[i], s->column, &v)) continue;
        if (p->n == cap) {
            cap = cap ? 2 * cap : 64;
            double *x = realloc(p->x, cap * sizeof *x), *y = x ? realloc(p->y, cap * sizeof *y) : NULL;
            if (x) p->x = x;
            if (!x || !y) return -1;
            p->y = y;
        }
        p->x[p->n] = (double)h->r[i].step / xdiv;
        p->y[p->n] = v * s->scale;
        p->n++;
    }
    return 0;
}

static int finite_points(const points *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (isfinite(p->y[i])) return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ axes */

/* A "nice" step (1, 2 or 5 x 10^k) for about `want` intervals over span. */
static double nice_step(double span, int want)
{
    const double raw = span / want, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The axis range [lo, hi] widened to whole ticks; *step gets the tick step. */
static void nice_range(double *lo, double *hi, double *step, int want)
{
    if (!(*hi > *lo)) {
        const double pad = *lo != 0 ? fabs(*lo) * 0.1 : 1.0;
        *lo -= pad;
        *hi += pad;
    }
    *step = nice_step(*hi - *lo, want);
    *lo = floor(*lo / *step + 1e-9) * *step;
    *hi = ceil(*hi / *step - 1e-9) * *step;
}

static void tick_label(double v, double step, char *out, size_t n)
{
    if (fabs(v) < step * 1e-6) v = 0;
    const int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 4 || fabs(v) >= 1e7) snprintf(out, n, "%.2g", v);
    else snprintf(out, n, "%.*f", dec, v);
}

/* Selects the font at `size` (bold or not) on `cr` and measures `s` in it. */
static cairo_text_extents_t set_font_measure(cairo_t *cr, const char *s, double size, int bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e;
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double size, int bold, double ax, double ay)
{
    const cairo_text_extents_t e = set_font_measure(cr, s, size, bold);
    cairo_move_to(cr, x - ax * e.x_advance, y + ay * size * 0.72);
    cairo_show_text(cr, s);
}

static double text_width(cairo_t *cr, const char *s, double size, int bold)
{
    return set_font_measure(cr, s, size, bold).x_advance;
}

/* Line style k: solid, dashed, dotted, dash-dot, long dash. */
static void set_dash(cairo_t *cr, int k)
{
    static const double d1[] = {9, 5}, d2[] = {2, 4}, d3[] = {9, 4, 2, 4}, d4[] = {16, 6};
    switch (k % 5) {
    case 1: cairo_set_dash(cr, d1, 2, 0); break;
    case 2: cairo_set_dash(cr, d2, 2, 0); break;
    case 3: cairo_set_dash(cr, d3, 4, 0); break;
    case 4: cairo_set_dash(cr, d4, 2, 0); break;
    default: cairo_set_dash(cr, NULL, 0, 0); break;
    }
}

static void set_colour(cairo_t *cr, size_t k)
{
    const double *c = k_palette[k % N_COLOURS];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

/* The style of series `si` of run `ri` among `nruns`: one run: a colour per series, solid; several: a colour per
 * run, a dash per series. */
static void style(cairo_t *cr, int si, int ri, int nruns)
{
    set_colour(cr, (size_t)(nruns == 1 ? si : ri));
    set_dash(cr, nruns == 1 ? 0 : si);
}

/* A short line sample (and a marker when `marker`) at (x, y) for a legend. */
static void legend_sample(cairo_t *cr, double x, double y, int marker)
{
    cairo_set_line_width(cr, 2.2);
    cairo_move_to(cr, x, y);
    cairo_line_to(cr, x + 26, y);
    cairo_stroke(cr);
    if (marker) {
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_arc(cr, x + 13, y, 3.2, 0, 2 * TR_PLOT_PI);
        cairo_fill(cr);
    }
}

/* ------------------------------------------------------------------------------------------------ a panel */

typedef struct panel_data {
    const panel_def *def;
    points *p;           /* [nruns * def->n] */
    int *used;           /* [def->n]: some run has a finite point of that series */
} panel_data;

static int is_eval_series(const char *column) { return strncmp(column, "val_", 4) == 0 || strncmp(column, "test_", 5) == 0; }

int tr_plot_log_axis(double lo, double hi) { return lo > 0 && isfinite(hi) && hi / lo > 100.0; }

static void draw_panel(cairo_t *cr, const panel_data *pd, const tr_history *h, int nruns, double top, double xlo,
                       double xhi, double xstep, int last, int x_fraction)
{
    const panel_def *d = pd->def;
    const double x0 = LEFT, x1 = TR_PLOT_WIDTH - RIGHT, y0 = top + STRIP, y1 = y0 + AREA;
    /* the panel's title, then its legend, wrapped onto a second line when the first is full */
    cairo_set_source_rgb(cr, 0, 0, 0);
    text_at(cr, x0, top + 12, d->title, 15, 1, 0, 0.5);
    double lx = x0 + text_width(cr, d->title, 15, 1) + 24, ly = top + 12;
    for (int si = 0; si < d->n; si++) {
        if (!pd->used[si]) continue;
        const double w = 32 + text_width(cr, d->s[si].label, 13, 0) + 18;
        if (lx + w > x1) {
            lx = x0 + text_width(cr, d->title, 15, 1) + 24;
            ly += 20;
        }
        style(cr, si, 0, nruns);
        if (nruns > 1) cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        legend_sample(cr, lx, ly, is_eval_series(d->s[si].column));
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, lx + 32, ly, d->s[si].label, 13, 0, 0, 0.5);
        lx += w;
    }
    /* y range over every finite point */
    double ylo = INFINITY, yhi = -INFINITY;
    for (int k = 0; k < nruns * d->n; k++)
        for (size_t i = 0; i < pd->p[k].n; i++)
            if (isfinite(pd->p[k].y[i])) {
                if (pd->p[k].y[i] < ylo) ylo = pd->p[k].y[i];
                if (pd->p[k].y[i] > yhi) yhi = pd->p[k].y[i];
            }
    if (!isfinite(ylo)) ylo = 0, yhi = 1;
    if (d->s == k_mem && ylo > 0) ylo = 0; /* memory from zero: growth is read against the whole */
    /* the loss on a log axis when it spans more than two decades (every point > 0): a run that goes from 2.3 to
     * 1e-4 is then read at both ends, not as a cliff and a flat line */
    const int logy = d->s == k_loss && tr_plot_log_axis(ylo, yhi);
    double ystep = 1, llo = 0, lhi = 1;
    if (logy) {
        llo = floor(log10(ylo));
        lhi = ceil(log10(yhi));
        if (lhi <= llo) lhi = llo + 1;
    } else {
        nice_range(&ylo, &yhi, &ystep, 4);
    }
#define TR_PLOT_Y(v) (logy ? y1 - (log10(v) - llo) / (lhi - llo) * AREA : y1 - ((v)-ylo) / (yhi - ylo) * AREA)
    /* frame, grid, ticks */
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_set_line_width(cr, 1);
    char lab[64];
    const double tick_n = logy ? lhi - llo : (yhi - ylo) / ystep;
    for (int ti = 0; ti <= (int)(tick_n + 1e-6); ti++) {
        const double v = logy ? pow(10.0, llo + ti) : ylo + ti * ystep;
        const double y = TR_PLOT_Y(v);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, x0, floor(y) + 0.5);
        cairo_line_to(cr, x1, floor(y) + 0.5);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        if (logy) snprintf(lab, sizeof lab, "1e%d", (int)(llo + ti));
        else tick_label(v, ystep, lab, sizeof lab);
        text_at(cr, x0 - 8, y, lab, 12.5, 0, 1, 0.5);
    }
    for (double v = xlo; v <= xhi + xstep * 1e-6; v += xstep) {
        const double x = x0 + (v - xlo) / (xhi - xlo) * (x1 - x0);
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, floor(x) + 0.5, y0);
        cairo_line_to(cr, floor(x) + 0.5, y1);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        tick_label(v, xstep, lab, sizeof lab);
        text_at(cr, x, y1 + 15, lab, 12.5, 0, 0.5, 0.5);
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_rectangle(cr, x0 + 0.5, y0 + 0.5, x1 - x0 - 1, AREA - 1);
    cairo_stroke(cr);
    /* the y title, rotated, centred on the area */
    cairo_save(cr);
    cairo_translate(cr, 24, (y0 + y1) / 2);
    cairo_rotate(cr, -TR_PLOT_PI / 2);
    cairo_set_source_rgb(cr, 0, 0, 0);
    char ytitle[96];
    snprintf(ytitle, sizeof ytitle, "%s%s", d->ylabel, logy ? " (log scale)" : "");
    text_at(cr, 0, 0, ytitle, 13.5, 0, 0.5, 0.5);
    cairo_restore(cr);
    if (last) {
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, (x0 + x1) / 2, y1 + TICKS + 6,
                x_fraction ? "fraction of the run (step / its last step)" : "optimizer step", 14, 0, 0.5, 0.5);
    }
    /* resume points: a dotted line at each step a run resumed from (grey; its run colour when several),
     * labelled in the loss panel */
    for (int ri = 0; ri < nruns; ri++) {
        const double xdiv = x_fraction ? last_step(&h[ri]) : 1.0;
        for (size_t i = 0; i < h[ri].n; i++) {
            if (h[ri].r[i].type != TR_HIST_RESUME) continue;
            const double v = (double)h[ri].r[i].step / xdiv;
            if (v < xlo || v > xhi) continue;
            const double x = floor(x0 + (v - xlo) / (xhi - xlo) * (x1 - x0)) + 0.5;
            if (nruns > 1) set_colour(cr, (size_t)ri);
            else cairo_set_source_rgb(cr, 0.45, 0.45, 0.45);
            const double dots[] = {2.0, 3.0};
            cairo_set_dash(cr, dots, 2, 0);
            cairo_set_line_width(cr, 1.2);
            cairo_move_to(cr, x, y0);
            cairo_line_to(cr, x, y1);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
            if (d->s == k_loss) text_at(cr, x + 4, y0 + 10, "resumed", 11.5, 0, 0, 0.5);
        }
    }
    /* the series, clipped to the area */
    cairo_save(cr);
    cairo_rectangle(cr, x0 - 5, y0, x1 - x0 + 10, AREA); /* markers on the edges stay whole */
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int ri = 0; ri < nruns; ri++)
        for (int si = 0; si < d->n; si++) {
            const points *p = &pd->p[ri * d->n + si];
            if (!finite_points(p)) continue;
            style(cr, si, ri, nruns);
            cairo_set_line_width(cr, 2.0);
            int open = 0;
            for (size_t i = 0; i < p->n; i++) {
                if (!isfinite(p->y[i]) || (logy && p->y[i] <= 0)) {
                    open = 0;
                    continue;
                }
                const double x = x0 + (p->x[i] - xlo) / (xhi - xlo) * (x1 - x0);
                const double y = TR_PLOT_Y(p->y[i]);
                if (open) cairo_line_to(cr, x, y);
                else cairo_move_to(cr, x, y);
                open = 1;
            }
            cairo_stroke(cr);
            if (!is_eval_series(d->s[si].column) && p->n > 1) continue;
            cairo_set_dash(cr, NULL, 0, 0);
            for (size_t i = 0; i < p->n; i++) {
                if (!isfinite(p->y[i]) || (logy && p->y[i] <= 0)) continue;
                const double x = x0 + (p->x[i] - xlo) / (xhi - xlo) * (x1 - x0);
                const double y = TR_PLOT_Y(p->y[i]);
                cairo_arc(cr, x, y, 3.2, 0, 2 * TR_PLOT_PI);
                cairo_fill(cr);
            }
        }
    cairo_restore(cr);
#undef TR_PLOT_Y
}

/* ------------------------------------------------------------------------------------------------ the figure */

typedef struct png_buf {
    unsigned char *data;
    size_t len, cap;
} png_buf;

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int length)
{
    png_buf *b = closure;
    if (b->len + length > b->cap) {
        const size_t cap = (b->len + length) * 2;
        unsigned char *bigger = realloc(b->data, cap);
        if (!bigger) return CAIRO_STATUS_NO_MEMORY;
        b->data = bigger;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, length);
    b->len += length;
    return CAIRO_STATUS_SUCCESS;
}

/* The metric panel for what the histories hold: F1 (multi-label), MSE/MAE (regression), else accuracy. */
static panel_def metric_panel(const tr_history *h, int n)
{
    static const panel_def acc = DEF("Accuracy", "accuracy (fraction)", k_acc);
    static const panel_def f1 = DEF("F1", "F1 (fraction)", k_f1);
    static const panel_def err = DEF("Error", "MSE, MAE (target units)", k_err);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < h[r].n; i++) {
            double v;
            if (tr_hist_get(&h[r].r[i], "val_micro_f1", &v) || tr_hist_get(&h[r].r[i], "test_micro_f1", &v)) return f1;
            if (tr_hist_get(&h[r].r[i], "val_mse", &v) || tr_hist_get(&h[r].r[i], "test_mse", &v)) return err;
        }
    return acc;
}

int tr_plot_histories(const tr_history *h, const char *const *labels, int n, const char *out_path, int *width,
                      int *height, tr_error *err)
{
    return tr_plot_histories_with(h, labels, n, out_path, NULL, width, height, err);
}

int tr_plot_histories_with(const tr_history *h, const char *const *labels, int n, const char *out_path,
                           const tr_plot_options *opt, int *width, int *height, tr_error *err)
{
    const int x_fraction = opt && opt->x_fraction;
    const panel_def defs[N_PANELS] = {DEF("Loss", "loss (mean per sample)", k_loss), metric_panel(h, n),
                                      DEF("Learning rate", "learning rate", k_lr),
                                      DEF("Memory", "memory (MiB)", k_mem)};
    panel_data pd[N_PANELS];
    memset(pd, 0, sizeof pd);
    int rc = TR_OK;
    double xlo = INFINITY, xhi = -INFINITY;
    for (int k = 0; k < N_PANELS && !rc; k++) {
        pd[k].def = &defs[k];
        pd[k].p = calloc((size_t)(n * defs[k].n), sizeof *pd[k].p);
        pd[k].used = calloc((size_t)defs[k].n, sizeof *pd[k].used);
        if (!pd[k].p || !pd[k].used) rc = tr_error_set(err, TR_E_RUNTIME, "plot: out of memory");
        for (int r = 0; r < n && !rc; r++)
            for (int si = 0; si < defs[k].n && !rc; si++) {
                points *p = &pd[k].p[r * defs[k].n + si];
                if (collect(&h[r], &defs[k].s[si], p, x_fraction))
                    rc = tr_error_set(err, TR_E_RUNTIME, "plot: out of memory");
                if (finite_points(p)) pd[k].used[si] = 1;
                for (size_t i = 0; i < p->n; i++) {
                    if (p->x[i] < xlo) xlo = p->x[i];
                    if (p->x[i] > xhi) xhi = p->x[i];
                }
            }
    }
    if (!isfinite(xlo)) xlo = 0, xhi = 1;
    if (xlo > 0) xlo = 0;
    if (x_fraction) xhi = 1;
    double xstep;
    nice_range(&xlo, &xhi, &xstep, 8);
    /* several runs: a legend of run colours under the title, wrapped */
    cairo_surface_t *probe = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t *pc = cairo_create(probe);
    int run_lines = 0;
    if (n > 1) {
        double lx = LEFT;
        run_lines = 1;
        for (int r = 0; r < n; r++) {
            const double w = 32 + text_width(pc, labels[r], 13, 0) + 22;
            if (lx + w > TR_PLOT_WIDTH - RIGHT && lx > LEFT) lx = LEFT, run_lines++;
            lx += w;
        }
    }
    cairo_destroy(pc);
    cairo_surface_destroy(probe);
    const int W = TR_PLOT_WIDTH, H = TR_PLOT_HEIGHT + run_lines * RUN_LINE;
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    cairo_t *cr = cairo_create(surf);
    if (!rc && cairo_status(cr) != CAIRO_STATUS_SUCCESS)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: cairo: %s", out_path, cairo_status_to_string(cairo_status(cr)));
    if (!rc) {
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
        char title[512];
        if (n == 1) snprintf(title, sizeof title, "%s", labels[0]);
        else snprintf(title, sizeof title, "%d runs", n);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, LEFT, 26, title, 18, 1, 0, 0.5);
        double lx = LEFT, ly = TOP + RUN_LINE / 2.0 - 4;
        for (int r = 0; n > 1 && r < n; r++) {
            const double w = 32 + text_width(cr, labels[r], 13, 0) + 22;
            if (lx + w > W - RIGHT && lx > LEFT) lx = LEFT, ly += RUN_LINE;
            set_colour(cr, (size_t)r);
            cairo_set_dash(cr, NULL, 0, 0);
            legend_sample(cr, lx, ly, 0);
            cairo_set_source_rgb(cr, 0, 0, 0);
            text_at(cr, lx + 32, ly, labels[r], 13, 0, 0, 0.5);
            lx += w;
        }
        double top = TOP + run_lines * RUN_LINE;
        for (int k = 0; k < N_PANELS; k++) {
            draw_panel(cr, &pd[k], h, n, top, xlo, xhi, xstep, k == N_PANELS - 1, x_fraction);
            top += STRIP + AREA + TICKS;
        }
    }
    png_buf b = {0};
    if (!rc && cairo_surface_write_to_png_stream(surf, png_write, &b) != CAIRO_STATUS_SUCCESS)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: cairo could not encode the PNG", out_path);
    if (!rc) rc = tr_io_write_file_atomic(out_path, b.data, b.len, err);
    free(b.data);
    cairo_destroy(cr);
    cairo_surface_destroy(surf);
    for (int k = 0; k < N_PANELS; k++) {
        for (int i = 0; pd[k].p && i < n * defs[k].n; i++) {
            free(pd[k].p[i].x);
            free(pd[k].p[i].y);
        }
        free(pd[k].p);
        free(pd[k].used);
    }
    if (width) *width = W;
    if (height) *height = H;
    return rc;
}

int tr_plot_runs(const char *const *run_dirs, int n, const char *out_path, tr_error *err)
{
    return tr_plot_runs_with(run_dirs, n, out_path, NULL, err);
}

int tr_plot_runs_with(const char *const *run_dirs, int n, const char *out_path, const tr_plot_options *opt,
                      tr_error *err)
{
    tr_history *h = calloc((size_t)n, sizeof *h);
    const char **labels = calloc((size_t)n, sizeof *labels);
    char (*names)[256] = calloc((size_t)n, sizeof *names);
    int rc = h && labels && names ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "plot: out of memory");
    for (int r = 0; r < n && !rc; r++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/metrics.jsonl", run_dirs[r]);
        FILE *f = fopen(path, "r");
        if (!f) {
            rc = tr_error_set(err, TR_E_CONFIG, "%s: cannot read (not a run directory?)", path);
            break;
        }
        fclose(f);
        rc = tr_history_load(&h[r], path, err);
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", run_dirs[r]);
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
        const char *base = strrchr(dir, '/');
        snprintf(names[r], sizeof names[r], "%s", base && base[1] ? base + 1 : dir);
        labels[r] = names[r];
    }
    if (!rc) rc = tr_plot_histories_with(h, labels, n, out_path, opt, NULL, NULL, err);
    if (!rc && opt && opt->length_ratio && n > 1) { /* the longest run's length over the shortest's */
        double lo = INFINITY, hi = 0;
        for (int r = 0; r < n; r++) {
            const double l = last_step(&h[r]);
            lo = l < lo ? l : lo;
            hi = l > hi ? l : hi;
        }
        *opt->length_ratio = hi / lo;
    }
    for (int r = 0; h && r < n; r++) tr_history_free(&h[r]);
    free(h);
    free(labels);
    free(names);
    return rc;
}
