/*
 * schedule.h -- learning-rate schedules, as a pure function of the step (so a resumed run needs only the step).
 *
 * `step` is the 0-based index of the optimizer step about to be taken; `total` the planned number of steps.
 * The schedule's counter c is the step (schedule.interval: step) or the epoch step / steps_per_epoch
 * (schedule.interval: epoch; PyTorch Lightning's lr_scheduler "interval": "epoch", i.e. scheduler.step() once per
 * epoch); C is total or total / steps_per_epoch to match.
 *  - warm-up (any schedule, warmup_steps W > 0, always counted in steps): lr(step) = base * (step + 1) / W for
 *    step < W (linear, never 0; the shape of HuggingFace transformers' get_*_schedule_with_warmup, shifted one
 *    step so step 0 trains).
 *  - constant: base.
 *  - step: base * gamma^floor(c / step_size) (torch.optim.lr_scheduler.StepLR).
 *  - multistep: base * gamma^(number of milestones <= c) (torch.optim.lr_scheduler.MultiStepLR).
 *  - cosine: min_lr + (base - min_lr) * (1 + cos(pi * p)) / 2 with p = (c - W) / max(1, C - W) per step, or
 *    p = c / max(1, C) per epoch, clamped to [0, 1] (SGDR, Loshchilov & Hutter 2017, without restarts; torch
 *    CosineAnnealingLR with eta_min = min_lr).
 *  - plateau: the lr of torch.optim.lr_scheduler.ReduceLROnPlateau (1.13's rule), stepped once per evaluation
 *    with the value of schedule.monitor: better means value < best * (1 - threshold) (rel, min), value > best *
 *    (1 + threshold) (rel, max), value < best - threshold (abs, min) or value > best + threshold (abs, max); a
 *    better value becomes best and resets num_bad to 0, else num_bad += 1; during cooldown (cooldown_counter > 0)
 *    the counter is decremented and num_bad reset to 0; when num_bad > patience, lr = max(lr * factor, min_lr)
 *    (changed only when that moves it by more than 1e-8, torch's eps), cooldown_counter = cooldown, num_bad = 0.
 *    Warm-up scales the plateau's lr as it scales base.
 */
#ifndef TR_SCHEDULE_H
#define TR_SCHEDULE_H

#include <stdint.h>

#include "config.h"
#include "monitor.h"

/**
 * Learning rate for optimizer step `step` (0-based) of `total`, from cfg->optim.lr and cfg->schedule.
 * steps_per_epoch (>= 1) is used only with schedule.interval: epoch.
 */
double tr_schedule_lr(const tr_config *cfg, int64_t step, int64_t total, int64_t steps_per_epoch);

/** The same with the schedule's base lr given (the plateau schedule's current lr instead of optim.lr). */
double tr_schedule_lr_from(const tr_config *cfg, double base, int64_t step, int64_t total, int64_t steps_per_epoch);

/** The plateau schedule's state before any evaluation: lr = optim.lr, best = +inf (min) / -inf (max). */
void tr_plateau_init(const tr_config *cfg, tr_select_state *s);

/** One evaluation's value of schedule.monitor (rule above). Returns 1 when the lr was reduced. */
int tr_plateau_step(const tr_config *cfg, tr_select_state *s, double value);

#endif
