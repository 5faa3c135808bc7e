/* train_gpt: the single-device GPT trainer (lab 00). See common/train.c. */
#include "backward_kernels.h"
#include "check.h"
#include "plugins.h"
#include "preflight.h"
#include "train.h"

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    kernels_set_cpu_backward(program_backward_kernels());
    TrainOptions o;
    const TrainProgram program = {
        .lab = "00_single_device",
        .what = "Train a GPT on one device (lab 00's reference trainer).",
        .example_ranks = 0,
        .example = "--config tiny --steps 50",
        PROGRAM_PLUGINS};
    train_options_parse(argc, argv, &o, &program);
    MemLayout layout = {.ranks = 1, .rows = train_micro_batch_rows(&o, 1), .seq = o.seq};
    preflight_run(&o, &layout, NULL);
    train_run(&o);
    return 0;
}
