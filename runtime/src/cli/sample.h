/*
 * sample.h -- `trainrun sample RUN_DIR_OR_CHECKPOINT [--tokens N] [--temperature T] [--top-k K] [--seed S]
 * [--prompt TEXT]`: prints the prompt and N tokens a language model trained with data.format text or tokens
 * generates after it (trainrun_trainer_generate: softmax of the last position's logits / T over the top K, one
 * draw per token from a generator seeded with S). The weights are the checkpoint given or the run directory's
 * newest that verifies; the vocabulary is that checkpoint's vocab.json (else the run directory's), so nothing
 * else is needed. Text runs: the prompt is text (each character must be in the vocabulary) and the output is
 * decoded text, control bytes but newline and tab written as \xNN; tokens runs: the prompt and output are
 * blank-separated token ids. Defaults: 500 tokens, temperature 0.8, top-k 200 (nanoGPT's sample.py), seed 0, the
 * prompt a newline (token id 0 for a tokens run). The same arguments print the same text.
 * Exit codes: 0; 1 (I/O, a checkpoint that does not verify, libtorch); 2 (usage, no vocab.json, a prompt character
 * outside the vocabulary, a model that is not a language model).
 */
#ifndef TR_SAMPLE_H
#define TR_SAMPLE_H

/** `trainrun sample ...`: argv[0] is "sample". */
int tr_cli_sample(int argc, char **argv);

#endif
