"""Regression inputs of the TorchScript archive fuzzing (tests/fuzz/torchscript.sh): each is tests/torchscript/
no_leak.pt with one change that crashed libtorch 1.13's reader (SIGSEGV in torch.jit.load, in PyTorch as in C++),
written as a valid zip so that the change itself is what a reader meets. trainrun refuses each before libtorch reads
it (shim/src/archive.cpp; tests/test_torchscript.c). Run with Debian's Python: /usr/bin/python3 make_regressions.py
"""
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = os.path.join(HERE, "..", "..", "..", "torchscript", "no_leak.pt")


def rewrite(name, edit):
    zin = zipfile.ZipFile(SEED)
    with zipfile.ZipFile(os.path.join(HERE, name), "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, edit(info.filename, zin.read(info)))


def class_attribute(f, d):
    # a class attribute without a type (a misspelt __parameters__) in the Linear's class body:
    # ScriptTypeParser::parseClassConstant dereferences the missing type
    if "/code/__torch__/torch/nn/modules/linear/" in f and f.endswith(".py"):
        return d.replace(b"__parameters__ = [", b"__paramheters__ = [", 1)
    return d


def constants(f, d):
    # TUPLE2 on an empty stack: the unpickler pops what is not there
    return b"\x80\x02\x86." if f.endswith("/constants.pkl") else d


def debug(f, d):
    # the same in a source map, which libtorch reads lazily: the load succeeds, the first forward crashes
    return b"\x80\x02\x87." if f.endswith("/code/__torch__.py.debug_pkl") else d


rewrite("class_attribute_without_type.pt", class_attribute)
rewrite("constants_pickle_pops_an_empty_stack.pt", constants)
rewrite("debug_pickle_pops_an_empty_stack.pt", debug)
