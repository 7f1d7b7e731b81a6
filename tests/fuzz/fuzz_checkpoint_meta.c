/* fuzz_checkpoint_meta.c -- a checkpoint's JSON as untrusted input: trainer.json (tr_ckpt_parse_trainer, with
 * the directory's step from the first byte, then tr_ckpt_validate) and MANIFEST.json (tr_ckpt_parse_manifest).
 * Whatever they accept must hold the documented bounds: the loop's arithmetic on those fields must not overflow. */
#include <math.h>

#include "checkpoint.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int64_t dir_step = data[0] == 0xff ? -1 : data[0];
    char *text = fuzz_string(data + 1, size - 1);
    tr_ckpt_progress p;
    tr_ckpt_meta m;
    tr_error err = {0};
    if (tr_ckpt_parse_trainer(text, "trainer.json", dir_step, &p, &m, &err) == TR_OK) {
        if (p.step < 0 || p.step > TR_CKPT_MAX_STEP || p.epoch < 0 || p.epoch > p.step || p.pos < 0 ||
            p.win_steps < 0 || p.win_steps > p.step || p.world_size < 1 || p.world_size > TR_CKPT_MAX_WORLD ||
            !(p.elapsed >= 0) || m.n_groups < 1 || (dir_step >= 0 && p.step != dir_step))
            abort();
        const tr_select_state *sel = &p.sel; /* the selection state a resume relies on (monitor.h) */
        if (sel->topk.n < 0 || sel->topk.n > TR_TOPK_MAX || sel->es.wait < 0 || sel->es.best_step > p.step ||
            (sel->plateau_metric[0] && !(sel->plateau.lr > 0)) || sel->plateau.bad < 0 || sel->plateau.cooldown < 0)
            abort();
        for (int i = 0; i < sel->topk.n; i++)
            if (sel->topk.step[i] < 0 || sel->topk.step[i] > p.step || !isfinite(sel->topk.score[i])) abort();
        volatile int64_t next = p.epoch + 1 + p.step * 1024 + p.pos + p.samples_total + p.win_samples; /* no UB */
        (void)next;
        /* and as a whole (no saving config, no checkpoints beside it): whatever it accepts agrees with itself */
        if (tr_ckpt_validate(&p, &m, NULL, "/nonexistent/run/checkpoints/step-0000000001", "trainer.json", &err) ==
            TR_OK) {
            if (p.win_loss < 0 || (p.win_steps == 0 && p.win_samples != 0) || (p.win_samples == 0 && p.win_correct) ||
                p.step_seconds > p.elapsed * (1 + 1e-9) + 1e-9)
                abort();
        }
        tr_ckpt_meta_free(&m);
    }
    static tr_ckpt_manifest man;
    if (tr_ckpt_parse_manifest(text, "MANIFEST.json", &man, &err) == TR_OK)
        for (int i = 0; i < man.n; i++)
            if (strchr(man.files[i].name, '/') || man.files[i].size < 0 || strlen(man.files[i].digest) != tr_hash_hex_len(man.algo)) abort();
    free(text);
    return 0;
}
