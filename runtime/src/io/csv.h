/*
 * csv.h -- numeric CSV tables as data sets (data.format: csv).
 *
 * A table is text, plain or gzip-compressed (detected by content, via zlib's gzread). The first `header_lines`
 * lines are skipped; blank lines are skipped; every other line is a row of numbers separated by commas (blanks
 * around them allowed) or, in a line without a comma, by runs of blanks and tabs (sklearn's diabetes and linnerud
 * files). Every row must have as many cells as the first data row.
 * Column lists ("0-29", "0,2,5-7", "-1") are 0-based, inclusive ranges; negative numbers count from the end
 * (-1 = the last column).
 * Errors name the file, the line (1-based, counting header lines) and the column: "FILE:LINE:COL: ..." where COL is
 * the 1-based character column of the cell, plus the cell's 1-based field number.
 */
#ifndef TR_CSV_H
#define TR_CSV_H

#include <stdint.h>

#include "config.h"
#include "data.h"
#include "error.h"

/** A parsed table: rows x cols doubles, row-major. */
typedef struct tr_csv_table {
    double *v;
    int64_t *line;     /**< [rows] the file line (1-based) each row came from */
    int64_t rows, cols;
} tr_csv_table;

/**
 * Read the table at `path`. Errors, naming the file: TR_E_CONFIG for what the file is (the user's input): no such
 * file, a cell that is not a finite number ("FILE:LINE:COL: field F: 'text' is not a number"), a ragged row
 * ("FILE:LINE: N fields; the first row (line L) has M"), no data rows; TR_E_RUNTIME for a read error or memory.
 */
int tr_csv_read(const char *path, int64_t header_lines, tr_csv_table *out, tr_error *err);

void tr_csv_table_free(tr_csv_table *t);

/**
 * Parse a column list against a table of `ncols` columns into a malloc'd array of 0-based indices (*out, count in
 * *n). `key` names the config key in messages. Errors: TR_E_CONFIG (syntax, a column outside the table, empty).
 */
int tr_csv_columns(const char *spec, int64_t ncols, const char *key, int64_t **out, int64_t *n, tr_error *err);

/**
 * A data set from a features table and a targets table (the same table when targets_path is NULL or equal).
 * feature_columns "" = every column not among the targets (same table) or every column (own table). target:
 * TR_TARGET_CLASS -- one column of non-negative integers (class indices, into y); TR_TARGET_MULTI_HOT -- one 0/1
 * column per class (into t); TR_TARGET_REGRESSION -- any numbers (into t). The data set has c = features, h = w = 1.
 * Errors: as tr_csv_read; TR_E_CONFIG for tables with different row counts or a bad class / multi-hot value
 * (naming file, line and column) and for bad column lists; TR_E_RUNTIME when memory runs out.
 */
int tr_csv_load(const char *features_path, const char *targets_path, int64_t header_lines,
                const char *feature_columns, const char *target_columns, tr_target_kind target, tr_dataset *out,
                tr_error *err);

/**
 * z-score each of the `cols` columns of ref ([n_ref, cols] float32, row-major) with its own mean and population
 * std (computed in double), and the same columns of the n_o arrays others[o] ([n_others[o], cols]; NULL entries
 * skipped) with ref's statistics. A constant column (std 0) is only centred.
 */
void tr_standardize_columns(float *ref, int64_t n_ref, float *const *others, const int64_t *n_others, int n_o,
                            int64_t cols);

/**
 * The end the csv and npy set-ups share once train, val and test are carved: with data.standardize, val's and
 * test's `features` input columns (and with a regression target their t_cols target columns) z-scored with the
 * training split's statistics (tr_standardize_columns, train too); then val's and test's num_classes raised to
 * training's, so a split that lacks the top class still has the model's output width.
 */
void tr_tabular_finish(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, int64_t features);

/**
 * The csv part of a run's data set-up: train (and test) tables from cfg->data, test carved by data.test_size
 * (with a test table too, those rows are held out and dropped: the training split stays the run's), validation carved by data.val_size, then data.standardize with the training
 * split's statistics. Messages lead with the config key that named the file ("data.train_csv: ./x.csv:3:5: field
 * 2: 'abc' is not a number"; data.train_targets, data.test_csv, data.test_targets likewise). A data.test_csv with
 * no data.test_targets whose column count is the training table's less its target columns (with
 * data.train_targets: the training features table's) is inputs alone: test->unlabeled = 1, the features read from
 * the training feature columns shifted past the missing target columns (what `trainrun predict` reads).
 */
int tr_csv_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err);

#endif
