/* gen_synthetic: a deterministic byte-level corpus for training and grading.
 *
 * The corpus is a sequence of records, one per line:
 *
 *     #k w1 w2 w3 w4 | w1 w2 w3 w4
 *
 * k is a topic digit 0..7, w1..w4 are drawn from the 16 words of topic k, and
 * the part after " | " repeats them. Two kinds of structure, so that a small
 * transformer shows what it learns:
 *   - local: the words are a fixed lexicon, so spelling is learnable by any
 *     model that sees a few previous bytes;
 *   - long-range: which words may appear depends on the topic digit up to
 *     ~30 bytes back, and the copy after " | " is fully determined by the
 *     first half. Only a model that attends back can predict those bytes, and
 *     once it does the loss falls far below the unigram entropy.
 *
 * Every random choice is rng_below(seed, RNG_STREAM_CORPUS, record, slot, n),
 * a pure function of its coordinates: the same seed gives the same bytes on
 * every machine. The lexicon comes from a fixed seed of its own, so it is the
 * same for every --seed (only the sequence of records changes).
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fileio.h"
#include "rng.h"
#include "tokens.h"

#define N_TOPICS 8
#define WORDS_PER_TOPIC 16
#define WORDS_PER_RECORD 4
#define N_WORDS (N_TOPICS * WORDS_PER_TOPIC)
#define MAX_WORD_LEN 6

/* The lexicon's own seed; the slot offset keeps its counters away from the
 * record slots 0..4 even if a user picks this number as --seed. */
#define LEXICON_SEED 0x1e81c0
#define LEXICON_SLOT 100

#define MIN_TOKENS 1000ull
#define MAX_TOKENS 100000000ull

static char g_lexicon[N_WORDS][MAX_WORD_LEN + 1];  /* topic t owns words 16t..16t+15 */

/* A pseudo-word is 1-3 consonant-vowel syllables, sometimes closed by a
 * final consonant: 2 to 6 lowercase letters that can be read aloud. */
static void make_word(uint64_t attempt, char *out) {
    static const char consonants[] = "bdfgklmnprstvz";
    static const char vowels[] = "aeiou";
    const uint64_t nc = sizeof consonants - 1, nv = sizeof vowels - 1;
    uint32_t slot = LEXICON_SLOT;
    int syllables = 1 + (int)rng_below(LEXICON_SEED, RNG_STREAM_CORPUS, attempt, slot++, 3);
    int len = 0;
    for (int s = 0; s < syllables; s++) {
        out[len++] = consonants[rng_below(LEXICON_SEED, RNG_STREAM_CORPUS, attempt, slot++, nc)];
        out[len++] = vowels[rng_below(LEXICON_SEED, RNG_STREAM_CORPUS, attempt, slot++, nv)];
    }
    if (len < MAX_WORD_LEN && rng_below(LEXICON_SEED, RNG_STREAM_CORPUS, attempt, slot++, 2))
        out[len++] = consonants[rng_below(LEXICON_SEED, RNG_STREAM_CORPUS, attempt, slot++, nc)];
    out[len] = '\0';
}

/* Words are unique across all topics, so a word alone names its topic and a
 * record can be decoded back into its random choices (needed for the entropy
 * floor below to be exact). */
static void build_lexicon(void) {
    uint64_t attempt = 0;
    for (int w = 0; w < N_WORDS; w++) {
        for (;;) {
            make_word(attempt++, g_lexicon[w]);
            int dup = 0;
            for (int v = 0; v < w && !dup; v++) dup = strcmp(g_lexicon[v], g_lexicon[w]) == 0;
            if (!dup) break;
        }
    }
}

/* Append one record to buf (room for at least 64 bytes); returns its length. */
static size_t make_record(uint64_t seed, uint64_t record, char *buf) {
    uint64_t topic = rng_below(seed, RNG_STREAM_CORPUS, record, 0, N_TOPICS);
    const char *words[WORDS_PER_RECORD];
    for (int j = 0; j < WORDS_PER_RECORD; j++) {
        uint64_t w = rng_below(seed, RNG_STREAM_CORPUS, record, (uint32_t)(1 + j), WORDS_PER_TOPIC);
        words[j] = g_lexicon[topic * WORDS_PER_TOPIC + w];
    }
    int n = sprintf(buf, "#%d", (int)topic);
    for (int j = 0; j < WORDS_PER_RECORD; j++) n += sprintf(buf + n, " %s", words[j]);
    n += sprintf(buf + n, " |");
    for (int j = 0; j < WORDS_PER_RECORD; j++) n += sprintf(buf + n, " %s", words[j]);
    n += sprintf(buf + n, "\n");
    return (size_t)n;
}

/* Entropy rate of the generating process, nats per byte. A record carries
 * ln(8) + 4 ln(16) nats of choices and the records can be decoded back into
 * those choices, so the rate is that over the expected record length. Every
 * word is equally likely overall (uniform topic, then uniform word), so the
 * expected length is fixed text plus 2 x 4 mean word lengths. */
static double entropy_floor(double *mean_record_bytes) {
    double word_bytes = 0;
    for (int w = 0; w < N_WORDS; w++) word_bytes += (double)strlen(g_lexicon[w]);
    word_bytes /= N_WORDS;
    /* "#k" + 4 x " w" + " |" + 4 x " w" + "\n": 2 + 4 + 2 + 4 + 1 fixed bytes */
    double fixed = 2 + WORDS_PER_RECORD + 2 + WORDS_PER_RECORD + 1;
    *mean_record_bytes = fixed + 2.0 * WORDS_PER_RECORD * word_bytes;
    double nats = log((double)N_TOPICS) + WORDS_PER_RECORD * log((double)WORDS_PER_TOPIC);
    return nats / *mean_record_bytes;
}

static double unigram_entropy(const uint16_t *tokens, uint64_t n) {
    uint64_t counts[256] = {0};
    for (uint64_t i = 0; i < n; i++) counts[tokens[i]]++;
    double h = 0;
    for (int b = 0; b < 256; b++) {
        if (counts[b] == 0) continue;
        double p = (double)counts[b] / (double)n;
        h -= p * log(p);
    }
    return h;
}

/* A decimal unsigned integer in [lo, hi], or a one-line error naming the flag. */
static uint64_t parse_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi) {
    if (text[0] < '0' || text[0] > '9')
        USER_ERROR("%s expects a non-negative integer, got '%s'", flag, text);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end != '\0') USER_ERROR("%s expects a non-negative integer, got '%s'", flag, text);
    if (errno == ERANGE || v < lo || v > hi)
        USER_ERROR("%s must be between %" PRIu64 " and %" PRIu64 ", got %s", flag, lo, hi, text);
    return v;
}

static void usage(void) {
    printf("usage: gen_synthetic --out FILE [--tokens N] [--seed S]\n"
           "\n"
           "Write a deterministic synthetic byte-level corpus (vocab 256) of exactly N\n"
           "tokens: records '#k w1 w2 w3 w4 | w1 w2 w3 w4' with a topic digit k and\n"
           "words from that topic's lexicon, copied after the bar.\n"
           "\n"
           "  --out FILE   token file to write (required)\n"
           "  --tokens N   number of tokens, %llu..%llu (default 1000000)\n"
           "  --seed S     random seed, a non-negative integer (default 1)\n"
           "  --help       show this help\n"
           "\n"
           "Prints key=value statistics: tokens, vocab_size, records, mean_record_bytes,\n"
           "unigram_entropy_nats and entropy_floor_nats (the best loss any model can reach).\n",
           MIN_TOKENS, MAX_TOKENS);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    const char *out = NULL;
    uint64_t n_tokens = 1000000, seed = 1;

    static const struct option options[] = {
        {"out", required_argument, NULL, 'o'},
        {"tokens", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;  /* we print our own one-line errors */
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't': n_tokens = parse_u64("--tokens", optarg, MIN_TOKENS, MAX_TOKENS); break;
        case 's': seed = parse_u64("--seed", optarg, 0, UINT64_MAX); break;
        case 'h': usage(); return 0;
        case ':': USER_ERROR("option '%s' needs a value (see --help)", argv[optind - 1]);
        default: USER_ERROR("unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s' (see --help)", argv[optind]);
    if (out == NULL || out[0] == '\0') USER_ERROR("--out FILE is required (see --help)");
    char why[1400];
    if (output_file_problem(out, why, sizeof why)) USER_ERROR("--out: %s", why);

    build_lexicon();
    uint16_t *tokens = malloc((size_t)n_tokens * sizeof *tokens);
    CHECK(tokens != NULL, "out of memory for %" PRIu64 " tokens", n_tokens);

    /* Records are appended until exactly n_tokens bytes; the last may be cut. */
    uint64_t filled = 0, records = 0;
    char record[128];
    while (filled < n_tokens) {
        size_t len = make_record(seed, records++, record);
        for (size_t i = 0; i < len && filled < n_tokens; i++)
            tokens[filled++] = (unsigned char)record[i];
    }

    char err[1024];
    if (tokens_save(out, tokens, n_tokens, 256, err, sizeof err) != 0) {
        free(tokens);
        USER_ERROR("%s", err);
    }

    double mean_record_bytes;
    double floor_nats = entropy_floor(&mean_record_bytes);
    printf("tokens=%" PRIu64 "\n", n_tokens);
    printf("vocab_size=256\n");
    printf("records=%" PRIu64 "\n", records);
    printf("mean_record_bytes=%.4f\n", mean_record_bytes);
    printf("unigram_entropy_nats=%.4f\n", unigram_entropy(tokens, n_tokens));
    printf("entropy_floor_nats=%.4f\n", floor_nats);
    free(tokens);
    IO_CHECK(fflush(stdout) == 0, "cannot write to stdout");
    return 0;
}
