/*
 * test_csv.c -- the numeric CSV reader: comma and blank separated rows, gzip, header lines, column lists, class /
 * multi-hot / regression targets from the same or a second table, and errors naming file, line and column.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "csv.h"
#include "support.h"

#define SKLEARN "/usr/lib/python3/dist-packages/sklearn/datasets/data"

TestSuite(csv, .init = support_tmp_init, .fini = support_tmp_fini);

static void expect_read_error(const char *text, const char *want)
{
    support_write_file(support_path("t.csv"), text);
    tr_csv_table t;
    tr_error err = {0};
    cr_assert_eq(tr_csv_read(support_path("t.csv"), 1, &t, &err), TR_E_CONFIG, "accepted: %s", text);
    char full[512];
    snprintf(full, sizeof full, "%s:%s", support_path("t.csv"), want);
    cr_expect_str_eq(err.msg, full);
}

Test(csv, errors_name_file_line_and_column)
{
    expect_read_error("a,b,c\n1,2,3\n4,x5,6\n", "3:3: field 2: 'x5' is not a number");
    expect_read_error("a,b,c\n1,2,3\n4, 5 ,6e\n", "3:7: field 3: '6e' is not a number");
    expect_read_error("a,b,c\n1,2,3\n4,,6\n", "3:3: field 2: '' is not a number");
    expect_read_error("a,b,c\n1,2,3\n\n4,5\n", "4: 2 fields; the first row (line 2) has 3");
    expect_read_error("h\n1 2 3\n4 5 6 7\n", "3: 4 fields; the first row (line 2) has 3");
    expect_read_error("h\n1 2 inf\n", "2:5: field 3: 'inf' is not a finite number");
    expect_read_error("h\n", " no data rows (after 1 header lines)");
    /* text in the first row read: a header the config does not skip (issue 18); later rows get no such hint */
    expect_read_error("# exported\nsepal,petal,class\n1,2,0\n",
                      "2:1: field 1: 'sepal' is not a number (a header row? set data.header_lines: 2 to skip it)");
}

Test(csv, comma_and_blank_tables_and_gzip)
{
    support_write_file(support_path("a.csv"), "x,y,z\n1, 2.5 ,-3\r\n4,5e-1,6\n\n");
    tr_csv_table t;
    tr_error err = {0};
    cr_assert_eq(tr_csv_read(support_path("a.csv"), 1, &t, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(t.rows, 2);
    cr_expect_eq(t.cols, 3);
    const double want[6] = {1, 2.5, -3, 4, 0.5, 6};
    for (int i = 0; i < 6; i++) cr_expect_eq(t.v[i], want[i]);
    cr_expect_eq(t.line[1], 3);
    tr_csv_table_free(&t);

    gzFile g = gzopen(support_path("b.csv.gz"), "wb");
    gzputs(g, "7 8\t9\n  10   11 12\n");
    gzclose(g);
    cr_assert_eq(tr_csv_read(support_path("b.csv.gz"), 0, &t, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(t.rows, 2);
    cr_expect_eq(t.cols, 3);
    cr_expect_eq(t.v[5], 12);
    tr_csv_table_free(&t);
}

Test(csv, column_lists)
{
    int64_t *c = NULL, n = 0;
    tr_error err = {0};
    cr_assert_eq(tr_csv_columns("0-2, 5,-1", 8, "k", &c, &n, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(n, 5);
    const int64_t want[5] = {0, 1, 2, 5, 7};
    for (int i = 0; i < 5; i++) cr_expect_eq(c[i], want[i]);
    free(c);
    cr_expect_eq(tr_csv_columns("9", 8, "data.target_columns", &c, &n, &err), TR_E_CONFIG);
    cr_expect_str_eq(err.msg, "data.target_columns: '9': column 9 is outside the table's 8 columns (0 to 7)");
    cr_expect_eq(tr_csv_columns("a", 8, "k", &c, &n, &err), TR_E_CONFIG);
    cr_expect_eq(tr_csv_columns("", 8, "k", &c, &n, &err), TR_E_CONFIG);
}

Test(csv, targets_class_multi_hot_and_regression)
{
    support_write_file(support_path("d.csv"), "f1,f2,t1,t2\n1,2,0,1\n3,4,2,0\n5,6,1,1\n");
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_csv_load(support_path("d.csv"), NULL, 1, "0-1", "2", TR_TARGET_CLASS, &ds, &err), TR_OK, "%s",
                 err.msg);
    cr_expect_eq(ds.n, 3);
    cr_expect_eq(ds.c, 2);
    cr_expect_eq(ds.num_classes, 3);
    cr_expect_eq(ds.y[1], 2);
    cr_expect_eq(ds.x[5], 6.0f);
    cr_expect_null(ds.t);
    tr_dataset_free(&ds);

    cr_assert_eq(tr_csv_load(support_path("d.csv"), NULL, 1, "", "2-3", TR_TARGET_MULTI_HOT, &ds, &err), TR_E_CONFIG);
    char want[512];
    snprintf(want, sizeof want, "%s:3: field 3: 2 is not a multi-hot value (0 or 1)", support_path("d.csv"));
    cr_expect_str_eq(err.msg, want);
    cr_assert_eq(tr_csv_load(support_path("d.csv"), NULL, 1, "", "2-3", TR_TARGET_REGRESSION, &ds, &err), TR_OK);
    cr_expect_eq(ds.c, 2);
    cr_expect_eq(ds.t_cols, 2);
    cr_expect_eq(ds.t[2], 2.0f);
    tr_dataset_free(&ds);

    /* targets in a second table, row for row */
    support_write_file(support_path("y.csv"), "a b\n1 0\n0 1\n");
    cr_assert_eq(tr_csv_load(support_path("d.csv"), support_path("y.csv"), 1, "", "0-1", TR_TARGET_MULTI_HOT, &ds, &err),
                 TR_E_CONFIG);
    cr_expect(strstr(err.msg, "has 2 rows but") != NULL, "%s", err.msg);
}

Test(csv, sklearn_tables_load)
{
    tr_dataset ds;
    tr_error err = {0};
    if (tr_csv_load(SKLEARN "/breast_cancer.csv", NULL, 1, "", "-1", TR_TARGET_MULTI_HOT, &ds, &err) != TR_OK)
        support_skip("python3-sklearn's data is not installed: %s", err.msg);
    cr_expect_eq(ds.n, 569);
    cr_expect_eq(ds.c, 30);
    cr_expect_eq(ds.t_cols, 1);
    int64_t benign = 0;
    for (int64_t i = 0; i < ds.n; i++) benign += ds.t[i] == 1.0f;
    cr_expect_eq(benign, 357, "sklearn's breast cancer set has 357 benign rows");
    tr_dataset_free(&ds);
    cr_assert_eq(tr_csv_load(SKLEARN "/diabetes_data_raw.csv.gz", SKLEARN "/diabetes_target.csv.gz", 0, "", "0",
                             TR_TARGET_REGRESSION, &ds, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(ds.n, 442);
    cr_expect_eq(ds.c, 10);
    cr_expect_eq(ds.t[0], 151.0f);
    tr_dataset_free(&ds);
    cr_assert_eq(tr_csv_load(SKLEARN "/digits.csv.gz", NULL, 0, "", "-1", TR_TARGET_CLASS, &ds, &err), TR_OK, "%s",
                 err.msg);
    cr_expect_eq(ds.n, 1797);
    cr_expect_eq(ds.c, 64);
    cr_expect_eq(ds.num_classes, 10);
    tr_dataset_free(&ds);
}

/* A run's csv errors lead with the config key that named the file, then FILE:LINE:COL, and exit 2 (the user's
 * input): the training table, its own targets table, the test table. */
Test(csv, run_errors_name_the_config_key_and_exit_2)
{
    support_write_file(support_path("m.yaml"), "input: [2]\nlayers:\n  - linear: {in: 2, out: 2}\n");
    support_write_file(support_path("good.csv"), "a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
    support_write_file(support_path("bad.csv"), "a,b,y\n1,2,0\n4,x5,1\n");
    support_write_file(support_path("x.csv"), "a,b\n1,2\n3,4\n5,6\n7,8\n");
    support_write_file(support_path("y3.csv"), "y\n0\n1\n0\n");
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "data: {format: csv, root: %s, train_csv: good.csv, header_lines: 1, val_size: 0}\n"
             "model: {spec: %s}\ntrain: {batch_size: 2, max_steps: 1}\nlog: {progress: never}\n"
             "run: {dir: %s, name: c}\n",
             support_tmpdir, support_path("m.yaml"), support_tmpdir);
    support_write_file(support_path("c.yaml"), cfg);
    static const struct {
        const char *overrides, *key, *file, *why;
    } cases[] = {
        {"data.train_csv=bad.csv", "data.train_csv", "bad.csv", ":3:3: field 2: 'x5' is not a number"},
        {"data.train_csv=nope.csv", "data.train_csv", "nope.csv", ": cannot open: No such file or directory"},
        {"data.train_csv=x.csv data.train_targets=y3.csv data.target_columns=0", "data.train_targets", "y3.csv",
         " has 3 rows but "},
        {"data.train_csv=x.csv data.train_targets=bad.csv", "data.train_targets", "bad.csv",
         ":3:3: field 2: 'x5' is not a number"},
        {"data.test_csv=bad.csv", "data.test_csv", "bad.csv", ":3:3: field 2: 'x5' is not a number"},
        {"data.test_csv=good.csv data.test_targets=nope.csv", "data.test_targets", "nope.csv", ": cannot open: "},
    };
    static char out[16384];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1200], want[1200];
        snprintf(args, sizeof args, "%s %s", support_path("c.yaml"), cases[i].overrides);
        cr_expect_eq(support_cli(args, out, sizeof out), 2, "case %zu: %s", i, out);
        snprintf(want, sizeof want, "%s: %s%s", cases[i].key, support_path(cases[i].file), cases[i].why);
        cr_expect(strstr(out, want) != NULL, "case %zu: '%s' in %s", i, want, out);
    }
}
