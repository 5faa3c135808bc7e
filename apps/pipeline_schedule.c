/* pipeline_schedule: lab 06's schedule generators (schedules.h) on the
 * command line. Builds the named schedule, prints each rank's list,
 * validates it (common/schedule.h's checks; an invalid schedule is the
 * validator's one line and exit status 1), simulates it and prints, per
 * rank, busy and idle time, bubble fraction and peak activations, then
 * the whole pipeline's bubble next to its formula. --out DIR also writes
 * DIR/schedule.csv and draws it into DIR/gantt.png (tools/plot_pipeline.sh).
 *   pipeline_schedule --schedule 1f1b -p 4 -m 8
 *   pipeline_schedule --schedule interleaved -p 4 -m 8 -v 2 --comm --out /tmp/pp
 *   pipeline_schedule --schedule zb-h1 -p 4 -m 8 --backward-weight 0.5 --out /tmp/zb
 *   pipeline_schedule --schedule dualpipe -p 4 -m 8 --out /tmp/dual
 * Costs are per op, per micro-batch and per chunk, in any one time unit. */
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "fileio.h"
#include "schedule.h"
#include "schedules.h"

static const char *const g_usage =
    "usage: pipeline_schedule --schedule NAME -p P -m M [-v V] [costs] [--comm] [--out DIR]\n"
    "Build a pipeline schedule (lab 06), validate it, and simulate its timeline.\n\n"
    "  --schedule NAME        gpipe | 1f1b | interleaved | zb-h1, or the lab's\n"
    "                         extensions 1f1b-unbatched | dualpipe (P even, M even\n"
    "                         and at least 2P)\n"
    "  -p P                   pipeline ranks, 1..64\n"
    "  -m M                   micro-batches per step, 1..1024\n"
    "  -v V                   model chunks per rank, 1..16 (interleaved: 2 or more,\n"
    "                         and M a multiple of P; dualpipe: 2)  (default 1, dualpipe 2)\n"
    "  costs, per op of one micro-batch on one chunk, >= 0:\n"
    "  --forward X            F                                          (default 1)\n"
    "  --backward X           B, a whole backward                        (default 2)\n"
    "  --backward-input X     I, a split backward's input-gradient part  (default 1)\n"
    "  --backward-weight X    W, its weight-gradient part (zb-h1, dualpipe) (default 1)\n"
    "  --send X               one message, activation or gradient        (default 0)\n"
    "  --weight-memory X      what W still holds after I, as a fraction of a\n"
    "                         micro-batch's activations, 0..1            (default 0.5)\n"
    "  --comm                 print the messages too (SA, RA, SG, RG; [..] a batch)\n"
    "  --out DIR              write DIR/schedule.csv (rank,index,label,kind,micro,chunk,\n"
    "                         start,end: one row per op) and DIR/gantt.png\n"
    "  -h, --help             this text\n"
    "The bubble formulas assume no message cost: with --send > 0 the simulated\n"
    "bubble is larger. Peak activations count micro-batches in flight on one\n"
    "chunk each; peak memory is in M_B, one micro-batch's activations on one chunk.\n";

/* The bubble the schedule should have with no message cost, and how it is
 * written; a negative value when there is no formula (ZB-H1 with m < p). */
static double formula(const char *name, int p, int m, int v, const PipeCosts *c,
                      const char **text) {
    if (pipe_schedule_dual(name)) {
        *text = "DualPipe's (p/2-1)(F&B+B-3W) idle per rank, F&B = F+B";
        return pipe_bubble_fraction_dualpipe(p, m, c);
    }
    if (strcmp(name, "zb-h1") == 0) {
        *text = "ZB-H1's (p-1)(f+i-min(f,i,w)) idle per rank";
        return m >= p ? pipe_bubble_fraction_zb_h1(p, m, c) : -1;
    }
    *text = v > 1 ? "(p-1)/(v m+p-1)" : "(p-1)/(m+p-1)";
    return pipe_bubble_fraction(p, m, v);
}

/* tools/plot_pipeline.sh, looked for in the directories above this program
 * (build/labs/06_pipeline/ is three below the kit's root, the sanitizer's
 * build four); 0 when not found. */
static int find_plot_script(char *path, size_t n) {
    char dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len <= 0) return 0;
    dir[len] = '\0';
    for (int up = 0; up < 6; up++) {
        const char *parent = dirname(dir);  /* may point into dir: move, not copy */
        memmove(dir, parent, strlen(parent) + 1);
        snprintf(path, n, "%s/tools/plot_pipeline.sh", dir);
        if (access(path, R_OK) == 0) return 1;
    }
    return 0;
}

/* Draw csv into png with tools/plot_pipeline.sh; returns its exit status
 * (it prints its own error line). */
static int draw(const char *csv, const char *png, const char *title) {
    char script[PATH_MAX + 32];
    if (!find_plot_script(script, sizeof script)) {
        fprintf(stderr,
                "%s: cannot find tools/plot_pipeline.sh above this program: %s is written, draw "
                "it with tools/plot_pipeline.sh CSV PNG TITLE\n", g_program_name, csv);
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed, to draw %s", png);
    if (pid == 0) {
        execlp("bash", "bash", script, csv, png, title, (char *)NULL);
        _exit(127);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid on the plotting script failed");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The command line. */
typedef struct {
    char name[32], out[1024];  /* --schedule, --out ("": none) */
    int p, m, v;  /* ranks and micro-batches (0 until given), chunks per rank */
    int comm;     /* print the messages too */
    PipeCosts costs;
} Options;

/* The options into o; returns 1 for --help (printed), leaving the options
 * after it unread. */
static int parse_options(int argc, char **argv, Options *o) {
    enum { FORWARD = 256, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, SEND, WEIGHT_MEMORY, OUT,
           COMM };
    static const struct option opts[] = {
        {"schedule", required_argument, 0, 's'},
        {"forward", required_argument, 0, FORWARD},
        {"backward", required_argument, 0, BACKWARD},
        {"backward-input", required_argument, 0, BACKWARD_INPUT},
        {"backward-weight", required_argument, 0, BACKWARD_WEIGHT},
        {"send", required_argument, 0, SEND},
        {"weight-memory", required_argument, 0, WEIGHT_MEMORY},
        {"out", required_argument, 0, OUT},
        {"comm", no_argument, 0, COMM},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (Options){.v = 0,
                   .costs = {.forward = 1, .backward = 2, .backward_input = 1,
                             .backward_weight = 1, .send = 0, .weight_memory = 0.5}};
    PipeCosts *costs = &o->costs;
    const double most = 1e9;  /* costs: any unit, but finite */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "p:m:v:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': cli_string(o->name, sizeof o->name, "--schedule", optarg); break;
        case 'p': o->p = (int)cli_int("-p", optarg, 1, 64); break;
        case 'm': o->m = (int)cli_int("-m", optarg, 1, 1024); break;
        case 'v': o->v = (int)cli_int("-v", optarg, 1, 16); break;
        case FORWARD: costs->forward = cli_double("--forward", optarg, 0, most); break;
        case BACKWARD: costs->backward = cli_double("--backward", optarg, 0, most); break;
        case BACKWARD_INPUT:
            costs->backward_input = cli_double("--backward-input", optarg, 0, most);
            break;
        case BACKWARD_WEIGHT:
            costs->backward_weight = cli_double("--backward-weight", optarg, 0, most);
            break;
        case SEND: costs->send = cli_double("--send", optarg, 0, most); break;
        case WEIGHT_MEMORY:
            costs->weight_memory = cli_double("--weight-memory", optarg, 0, 1);
            break;
        case OUT: cli_string(o->out, sizeof o->out, "--out", optarg); break;
        case COMM: o->comm = 1; break;
        case 'h': printf("%s", g_usage); return 1;
        default: cli_bad_option(argv[optind - 1], "see --help");
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see --help", argv[optind]);
    if (!o->v) o->v = pipe_schedule_dual(o->name) ? 2 : 1;  /* its placement's two */
    return 0;
}

static void check_options(const Options *o) {
    if (!o->name[0] || !o->p || !o->m)
        USER_ERROR("give --schedule NAME, -p P and -m M; see --help");
    char why[512];
    if (pipe_schedule_problem(o->name, o->p, o->m, o->v, why, sizeof why)) USER_ERROR("%s", why);
    if (o->out[0] && output_dir_problem(o->out, why, sizeof why))
        USER_ERROR("--out %s: %s", o->out, why);
}

/* Prints s (when it has the shape asked for, even if invalid) and whether it
 * is valid; an invalid one is the validator's one line on stderr. Returns 1
 * when s is valid. */
static int print_and_validate(const Schedule *s, const Options *o) {
    char why[512];
    /* the extension is compared with the student's own 1F1B (the grader
     * compares both with the reference's) */
    Schedule *reference =
        strcmp(o->name, "1f1b-unbatched") == 0 ? schedule_1f1b(o->p, o->m) : NULL;
    const int bad =
        pipe_generated_problem(s, o->name, o->p, o->m, o->v, reference, why, sizeof why);
    schedule_free(reference);
    if (s && s->ranks == o->p && s->micro_batches == o->m && s->chunks == o->v) {
        printf("%s: p %d ranks, m %d micro-batches, v %d chunk%s per rank\n", o->name, o->p,
               o->m, o->v, o->v == 1 ? "" : "s");
        schedule_print(stdout, s, o->comm);
    }
    if (bad) {
        fflush(stdout);
        fprintf(stderr, "%s: invalid schedule: %s\n", g_program_name, why);
        return 0;
    }
    printf("valid: every forward and backward once, inputs before use, every send meets its "
           "receive, no deadlock\n");
    return 1;
}

/* Prints the simulated timeline t, per rank, and its bubble next to the
 * formula's; returns the formula's bubble (negative: none). */
static double print_timeline(const Options *o, const PipeTimeline *t) {
    const PipeCosts *costs = &o->costs;
    printf("simulated: forward %g, backward %g, backward-input %g, backward-weight %g, send %g; "
           "makespan %g\n", costs->forward, costs->backward, costs->backward_input,
           costs->backward_weight, costs->send, t->makespan);
    printf("%4s %10s %10s %7s %9s %16s\n", "rank", "busy", "idle", "bubble", "peak act",
           "peak mem (M_B)");
    for (int r = 0; r < o->p; r++) {
        const PipeRankTimeline *k = &t->rank[r];
        printf("%4d %10.4g %10.4g %7.4f %9d %16.4g\n", r, k->busy, k->idle, k->bubble_fraction,
               k->peak_activations, k->peak_memory);
    }
    const char *how;
    double want = formula(o->name, o->p, o->m, o->v, costs, &how);
    if (want >= 0)
        printf("bubble fraction: simulated %.6f, formula %s = %.6f\n", t->bubble_fraction, how,
               want);
    else
        printf("bubble fraction: simulated %.6f (%s: needs m >= p)\n", t->bubble_fraction, how);
    return want;
}

/* --out: DIR/schedule.csv, drawn into DIR/gantt.png; returns the drawing's
 * exit status. */
static int write_and_draw(const Options *o, const Schedule *s, const PipeTimeline *t,
                          double want) {
    char csv[1100], png[1100], title[256];
    snprintf(csv, sizeof csv, "%s/schedule.csv", o->out);
    snprintf(png, sizeof png, "%s/gantt.png", o->out);
    schedule_write_timeline_csv(csv, s, t, 0.0);
    if (want >= 0)
        snprintf(title, sizeof title, "%s, p %d, m %d, v %d: bubble %.4f simulated, %.4f formula",
                 o->name, o->p, o->m, o->v, t->bubble_fraction, want);
    else
        snprintf(title, sizeof title, "%s, p %d, m %d, v %d: bubble %.4f simulated", o->name,
                 o->p, o->m, o->v, t->bubble_fraction);
    int status = draw(csv, png, title);
    if (status == 0) printf("wrote %s and %s\n", csv, png);
    return status;
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    Options o;
    if (parse_options(argc, argv, &o)) return 0;
    check_options(&o);
    Schedule *s = schedule_by_name(o.name, o.p, o.m, o.v);
    if (!print_and_validate(s, &o)) {
        schedule_free(s);
        return 1;
    }
    PipeTimeline t;
    schedule_simulate(s, &o.costs, &t);
    const double want = print_timeline(&o, &t);
    const int status = o.out[0] ? write_and_draw(&o, s, &t, want) : 0;
    pipe_timeline_free(&t);
    schedule_free(s);
    return status;
}
