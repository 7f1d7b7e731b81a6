#!/usr/bin/env bash
# hooks_check.sh SRC LIBTRAINRUN_SO LIBTRAINRUN_A LIBTRAINRUN_SHIM_A TRAINRUN TEST_TRAINRUN
#
# What users get carries no test hook (docs/development.md, "Test hooks"). The files `cmake --install` copies --
# libtrainrun.so, libtrainrun.a, libtrainrun_shim.a and the trainrun executable -- are searched for:
#   - the I/O fault hook's functions (tr_io_fault_arm, tr_io_save_calls, tr_io_fault_fired), which only the test
#     suite's copy of io.c defines (TR_TEST_HOOKS): nm --defined-only, and nm -D for the shared objects;
#   - any TRAINRUN_TEST_ name (the environment variables of test hooks), anywhere in the bytes;
#   - in libtrainrun.so, any exported name that is not trainrun_* (the version script, runtime/trainrun.map);
# and no file of runtime/src may include the shim's test-only header (trainrun_shim_test.h).
# The test copy of the command line (TEST_TRAINRUN, build/tests/trainrun) must hold the hook, symbols and name both:
# a search that finds it nowhere would pass by searching wrongly. Exit 0: clean; 1: what is wrong, listed.
set -euo pipefail
[ $# -eq 6 ] || { echo "usage: $0 SRC LIBTRAINRUN_SO LIBTRAINRUN_A LIBTRAINRUN_SHIM_A TRAINRUN TEST_TRAINRUN" >&2; exit 2; }
src=$1 so=$2 ar=$3 shim=$4 cli=$5 test_cli=$6
hooks='^(tr_io_fault_arm|tr_io_save_calls|tr_io_fault_fired)$'
bad=0

# defined symbols of FILE (nm's third column), the dynamic ones too for an ELF that has them
defined() {
    nm --defined-only "$1" 2>/dev/null | awk 'NF >= 3 {print $3}'
    nm -D --defined-only "$1" 2>/dev/null | awk 'NF >= 3 {print $3}'
}

for f in "$so" "$ar" "$shim" "$cli"; do
    [ -f "$f" ] || { echo "hooks_check: $f: no such file (build first)"; bad=1; continue; }
    found=$(defined "$f" | grep -E "$hooks" | sort -u || true)
    [ -z "$found" ] || { echo "hooks_check: $f defines test hooks: $(echo $found)"; bad=1; }
    names=$(grep -aoE 'TRAINRUN_TEST_[A-Z0-9_]+' "$f" | sort -u || true)
    [ -z "$names" ] || { echo "hooks_check: $f holds test hook names: $(echo $names)"; bad=1; }
done

if [ -f "$so" ]; then
    exported=$(nm -D --defined-only "$so" | awk 'NF >= 3 && $2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
    [ -n "$exported" ] || { echo "hooks_check: $so exports nothing: nm -D found no symbols"; bad=1; }
    others=$(echo "$exported" | grep -v '^trainrun_' || true)
    [ -z "$others" ] || { echo "hooks_check: $so exports names outside the API: $(echo $others | head -c 400)"; bad=1; }
fi

includers=$(grep -rl 'trainrun_shim_test\.h' "$src/runtime/src" || true)
[ -z "$includers" ] || { echo "hooks_check: runtime files include the test-only shim header: $includers"; bad=1; }

# the control: the test copy holds what the search looks for
if [ -f "$test_cli" ]; then
    n=$(defined "$test_cli" | grep -cE "$hooks" || true)
    [ "$n" -gt 0 ] || { echo "hooks_check: $test_cli defines no hook: the symbol search is broken"; bad=1; }
    grep -aq 'TRAINRUN_TEST_IO_FAULT' "$test_cli" ||
        { echo "hooks_check: $test_cli holds no TRAINRUN_TEST_IO_FAULT: the name search is broken"; bad=1; }
else
    echo "hooks_check: $test_cli: no such file (build first)"
    bad=1
fi

[ "$bad" -eq 0 ] && echo "hooks_check: no test hook in $(basename "$so"), $(basename "$ar"), $(basename "$shim"), $(basename "$cli")"
exit "$bad"
