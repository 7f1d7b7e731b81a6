/* test_model_spec.c -- models/NAME.yaml parsing: the shipped models, every layer kind, and exact error messages. */
#include <criterion/criterion.h>

#include <string.h>

#include "model_spec.h"

#ifndef TR_SOURCE_DIR
#error "TR_SOURCE_DIR must name the repository root"
#endif

/* Assert that `yaml` fails with TR_E_CONFIG and exactly `msg`, leaving the spec zeroed. */
static void expect_error(const char *yaml, const char *msg)
{
    tr_model_spec s;
    tr_error err = {0};
    memset(&s, 0x55, sizeof s);
    int rc = tr_model_spec_load_string(yaml, "m.yaml", &s, &err);
    cr_assert_eq(rc, TR_E_CONFIG, "expected failure for:\n%s", yaml);
    cr_assert_eq(err.code, TR_E_CONFIG);
    cr_assert_str_eq(err.msg, msg);
    cr_assert_null(s.layers);
    cr_assert_eq(s.n_layers, 0);
}

/* Load `yaml`, asserting success. */
static void load_ok(const char *yaml, tr_model_spec *s)
{
    tr_error err = {0};
    cr_assert_eq(tr_model_spec_load_string(yaml, "m.yaml", s, &err), TR_OK, "%s", err.msg);
}

Test(model_spec, mlp_yaml)
{
    tr_model_spec s;
    tr_error err = {0};
    cr_assert_eq(tr_model_spec_load(TR_SOURCE_DIR "/models/mlp.yaml", &s, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(s.input_ndim, 3);
    cr_assert_eq(s.input_shape[0], 1);
    cr_assert_eq(s.input_shape[1], 28);
    cr_assert_eq(s.input_shape[2], 28);
    cr_assert_eq(s.n_layers, 8);
    const trs_layer_kind kinds[] = {TRS_LAYER_FLATTEN, TRS_LAYER_LINEAR, TRS_LAYER_RELU,    TRS_LAYER_DROPOUT,
                                    TRS_LAYER_LINEAR,  TRS_LAYER_RELU,   TRS_LAYER_DROPOUT, TRS_LAYER_LINEAR};
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(s.layers[i].kind, kinds[i], "layer %zu", i);
    cr_assert_eq(s.layers[1].in, 784);
    cr_assert_eq(s.layers[1].out, 512);
    cr_assert_eq(s.layers[1].bias, 1);
    cr_assert_eq(s.layers[3].p, 0.2);
    cr_assert_eq(s.layers[4].in, 512);
    cr_assert_eq(s.layers[4].out, 256);
    cr_assert_eq(s.layers[6].p, 0.2);
    cr_assert_eq(s.layers[7].in, 256);
    cr_assert_eq(s.layers[7].out, 10);
    cr_assert_eq(s.layers[7].bias, 1);
    tr_model_spec_free(&s);
    cr_assert_null(s.layers);
    cr_assert_eq(s.n_layers, 0);
}

Test(model_spec, convnet_yaml)
{
    tr_model_spec s;
    tr_error err = {0};
    cr_assert_eq(tr_model_spec_load(TR_SOURCE_DIR "/models/convnet.yaml", &s, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(s.input_ndim, 3);
    cr_assert_eq(s.input_shape[0], 1);
    cr_assert_eq(s.input_shape[1], 28);
    cr_assert_eq(s.input_shape[2], 28);
    cr_assert_eq(s.n_layers, 13);
    const trs_layer_kind kinds[] = {TRS_LAYER_CONV2D,    TRS_LAYER_BATCHNORM2D, TRS_LAYER_RELU,   TRS_LAYER_MAXPOOL2D,
                                    TRS_LAYER_CONV2D,    TRS_LAYER_BATCHNORM2D, TRS_LAYER_RELU,   TRS_LAYER_MAXPOOL2D,
                                    TRS_LAYER_FLATTEN,   TRS_LAYER_LINEAR,      TRS_LAYER_RELU,   TRS_LAYER_DROPOUT,
                                    TRS_LAYER_LINEAR};
    for (size_t i = 0; i < 13; i++)
        cr_assert_eq(s.layers[i].kind, kinds[i], "layer %zu", i);
    const trs_layer *c0 = &s.layers[0];
    cr_assert_eq(c0->in, 1);
    cr_assert_eq(c0->out, 32);
    cr_assert_eq(c0->kernel, 3);
    cr_assert_eq(c0->stride, 1);
    cr_assert_eq(c0->padding, 1);
    cr_assert_eq(c0->bias, 1);
    cr_assert_eq(s.layers[1].out, 32);
    cr_assert_eq(s.layers[1].eps, 1e-5);
    cr_assert_eq(s.layers[1].momentum, 0.1);
    cr_assert_eq(s.layers[3].kernel, 2);
    cr_assert_eq(s.layers[3].stride, 0); /* 0 = same as kernel */
    cr_assert_eq(s.layers[3].padding, 0);
    cr_assert_eq(s.layers[4].in, 32);
    cr_assert_eq(s.layers[4].out, 64);
    cr_assert_eq(s.layers[5].out, 64);
    cr_assert_eq(s.layers[9].in, 3136);
    cr_assert_eq(s.layers[9].out, 128);
    cr_assert_eq(s.layers[11].p, 0.3);
    cr_assert_eq(s.layers[12].in, 128);
    cr_assert_eq(s.layers[12].out, 10);
    tr_model_spec_free(&s);
}

Test(model_spec, every_kind_and_option)
{
    tr_model_spec s;
    load_ok("input: [64]\n"
            "layers:\n"
            "  - linear: {in: 64, out: 32, bias: false}\n"
            "  - batchnorm1d: {features: 32, eps: 1e-3, momentum: 0.01}\n"
            "  - layernorm: {features: 32, eps: 1.0e-6}\n"
            "  - gelu\n"
            "  - relu: {}\n"
            "  - relu:\n"
            "  - dropout\n"
            "  - conv2d: {in: 3, out: 8, kernel: 5, stride: 2, padding: 2, bias: false}\n"
            "  - avgpool2d: {kernel: 3, stride: 1, padding: 1}\n"
            "  - adaptive_avgpool2d: {out: [2, 3]}\n"
            "  - adaptive_avgpool2d:\n      out: 4\n"
            "  - \"flatten\"\n",
            &s);
    cr_assert_eq(s.input_ndim, 1);
    cr_assert_eq(s.input_shape[0], 64);
    cr_assert_eq(s.n_layers, 12);
    cr_assert_eq(s.layers[0].kind, TRS_LAYER_LINEAR);
    cr_assert_eq(s.layers[0].bias, 0);
    cr_assert_eq(s.layers[1].kind, TRS_LAYER_BATCHNORM1D);
    cr_assert_eq(s.layers[1].out, 32);
    cr_assert_eq(s.layers[1].eps, 1e-3);
    cr_assert_eq(s.layers[1].momentum, 0.01);
    cr_assert_eq(s.layers[2].kind, TRS_LAYER_LAYERNORM);
    cr_assert_eq(s.layers[2].out, 32);
    cr_assert_eq(s.layers[2].eps, 1e-6);
    cr_assert_eq(s.layers[3].kind, TRS_LAYER_GELU);
    cr_assert_eq(s.layers[4].kind, TRS_LAYER_RELU);
    cr_assert_eq(s.layers[5].kind, TRS_LAYER_RELU);
    cr_assert_eq(s.layers[6].kind, TRS_LAYER_DROPOUT);
    cr_assert_eq(s.layers[6].p, 0.5);
    const trs_layer *c = &s.layers[7];
    cr_assert_eq(c->kind, TRS_LAYER_CONV2D);
    cr_assert_eq(c->in, 3);
    cr_assert_eq(c->out, 8);
    cr_assert_eq(c->kernel, 5);
    cr_assert_eq(c->stride, 2);
    cr_assert_eq(c->padding, 2);
    cr_assert_eq(c->bias, 0);
    cr_assert_eq(s.layers[8].kind, TRS_LAYER_AVGPOOL2D);
    cr_assert_eq(s.layers[8].kernel, 3);
    cr_assert_eq(s.layers[8].stride, 1);
    cr_assert_eq(s.layers[8].padding, 1);
    cr_assert_eq(s.layers[9].kind, TRS_LAYER_ADAPTIVE_AVGPOOL2D);
    cr_assert_eq(s.layers[9].out_h, 2);
    cr_assert_eq(s.layers[9].out_w, 3);
    cr_assert_eq(s.layers[10].out_h, 4);
    cr_assert_eq(s.layers[10].out_w, 4);
    cr_assert_eq(s.layers[11].kind, TRS_LAYER_FLATTEN);
    tr_model_spec_free(&s);
    tr_model_spec_free(&s); /* safe on a zeroed struct */
}

Test(model_spec, error_unknown_layer)
{
    expect_error("input: [1, 28, 28]\nlayers:\n  - flatten\n  - linaer: {in: 784, out: 10}\n",
                 "m.yaml:4:5: layers[1].linaer: unknown layer; did you mean 'linear'?");
    expect_error("input: [4]\nlayers:\n  - Relu\n", "m.yaml:3:5: layers[0].Relu: unknown layer; did you mean 'relu'?");
    expect_error("input: [4]\nlayers:\n  - softmax\n",
                 "m.yaml:3:5: layers[0].softmax: unknown layer; valid layers are linear, conv2d, batchnorm1d, "
                 "batchnorm2d, layernorm, relu, gelu, maxpool2d, avgpool2d, adaptive_avgpool2d, dropout, flatten");
}

Test(model_spec, error_options)
{
    expect_error("input: [784]\nlayers:\n  - relu\n  - relu\n  - linear: {in: 784}\n",
                 "m.yaml:5:5: layers[2].linear: missing required option 'out'");
    expect_error("input: [784]\nlayers:\n  - linear\n", "m.yaml:3:5: layers[0].linear: missing required option 'in'");
    expect_error("input: [784]\nlayers:\n  - linear: {in: 784, outt: 10}\n",
                 "m.yaml:3:23: layers[0].linear.outt: unknown option; did you mean 'out'?");
    expect_error("input: [784]\nlayers:\n  - linear: {in: 784, out: 10, out: 5}\n",
                 "m.yaml:3:32: layers[0].linear.out: duplicate key (first set at line 3)");
    expect_error("input: [784]\nlayers:\n  - linear: {in: 784, out: 2.5}\n",
                 "m.yaml:3:28: layers[0].linear.out: expected an integer, got '2.5'");
    expect_error("input: [784]\nlayers:\n  - linear: {in: 784, out: 0}\n",
                 "m.yaml:3:28: layers[0].linear.out: 0 is out of range (must be >= 1)");
    expect_error("input: [784]\nlayers:\n  - linear: {in: 784, out: 10, bias: no}\n",
                 "m.yaml:3:38: layers[0].linear.bias: expected a boolean (true/false), got 'no'");
    expect_error("input: [784]\nlayers:\n  - dropout: {p: 1}\n",
                 "m.yaml:3:18: layers[0].dropout.p: 1 is out of range (must be in [0, 1))");
    expect_error("input: [784]\nlayers:\n  - dropout: 0.5\n",
                 "m.yaml:3:14: layers[0].dropout: expected a mapping of options ({name: value, ...}), got '0.5'");
    expect_error("input: [784]\nlayers:\n  - relu: {inplace: true}\n",
                 "m.yaml:3:12: layers[0].relu.inplace: unknown option; relu takes no options");
    expect_error("input: [1, 8, 8]\nlayers:\n  - maxpool2d: {kernel: 2, padding: 2}\n",
                 "m.yaml:3:5: layers[0].maxpool2d.padding: 2 is more than half the kernel size (2)");
    expect_error("input: [1, 8, 8]\nlayers:\n  - adaptive_avgpool2d: {out: [1, 2, 3]}\n",
                 "m.yaml:3:31: layers[0].adaptive_avgpool2d.out: expected an integer or a list of 2 integers, "
                 "got 3 entries");
    /* the classic indentation mistake: options at the level of the kind */
    expect_error("input: [784]\nlayers:\n  - linear:\n    in: 784\n    out: 10\n",
                 "m.yaml:4:5: layers[0]: a layer is one key (its kind) with its options nested under it, got 3 keys "
                 "(are the options of 'linear' indented under it?)");
}

Test(model_spec, error_input_and_layers)
{
    expect_error("input: [1, 28, 28, 3]\nlayers: [relu]\n",
                 "m.yaml:1:8: input: expected a list of 1 to 3 positive integers ([D], [T, D] or [C, H, W]), got 4 "
                 "entries");
    expect_error("input: 784\nlayers: [relu]\n",
                 "m.yaml:1:8: input: expected a list of 1 to 3 positive integers ([D], [T, D] or [C, H, W]), got "
                 "'784'");
    expect_error("input: [1, 0, 28]\nlayers: [relu]\n", "m.yaml:1:12: input[1]: 0 is out of range (must be >= 1)");
    expect_error("input: [1.5]\nlayers: [relu]\n", "m.yaml:1:9: input[0]: expected an integer, got '1.5'");
    expect_error("layers: [relu]\n", "m.yaml:1:1: input: missing (the per-sample input shape: [D], [T, D] or [C, H, W])");
    expect_error("input: [4]\n", "m.yaml:1:1: layers: missing (the list of layers)");
    expect_error("input: [4]\nlayers: []\n",
                 "m.yaml:2:9: layers: expected a non-empty list of layers, got an empty list");
    expect_error("input: [4]\nlayer: [relu]\n", "m.yaml:2:1: layer: unknown key; did you mean 'layers'?");
    expect_error("input: [4]\ninput: [5]\nlayers: [relu]\n", "m.yaml:2:1: input: duplicate key (first set at line 1)");
    expect_error("", "m.yaml: empty model spec (expected 'input:' and 'layers:')");
    expect_error("- relu\n",
                 "m.yaml:1:1: expected a mapping with 'input:' and 'layers:' at the top level, got a sequence");
    expect_error("input: [4\nlayers: [relu]\n",
                 "m.yaml:2:7: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at "
                 "line 1)");
}

Test(model_spec, error_missing_file)
{
    tr_model_spec s;
    tr_error err = {0};
    cr_assert_eq(tr_model_spec_load("/nonexistent/model.yaml", &s, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "/nonexistent/model.yaml: cannot open: No such file or directory");
    cr_assert_null(s.layers);
}
