# Sanitizer settings for the programs `make sanitize` builds into
# build/sanitize/ (tests/sanitize.bats sources this file; by hand:
# `. tests/sanitize/env.sh`, then run them as usual, mpirun included).
#
# ASAN_OPTIONS (AddressSanitizer; LeakSanitizer runs inside it at exit)
#   detect_leaks=1           report leaks at exit (the default on x86-64 Linux, said here)
#   fast_unwind_on_malloc=0  unwind allocation stacks with the DWARF unwinder: Open MPI's
#                            libraries and libc are built without frame pointers, so the
#                            fast unwinder stops at their first frame and a leak inside
#                            them shows no frame that lsan.supp could name
#   (an ASan report always stops the program, with exit status 1; leaks found at
#   exit make it non-zero too)
# UBSAN_OPTIONS (UndefinedBehaviorSanitizer)
#   print_stacktrace=1       say where the undefined behaviour happened
#   halt_on_error=1          stop at the first report (the build also compiles with
#                            -fno-sanitize-recover=undefined, so this is belt and braces)
# LSAN_OPTIONS (LeakSanitizer)
#   suppressions=...         tests/sanitize/lsan.supp: leaks inside Open MPI and the
#                            libraries under it, by library name only
#   print_suppressions=0     no table of what was suppressed after a clean run
#
# Open MPI's own settings need nothing here: its memory hooks (the "patcher"
# component) and ASan's interceptors were seen to work together.
_sanitize_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$_sanitize_dir/lsan.supp:print_suppressions=0"
unset _sanitize_dir
