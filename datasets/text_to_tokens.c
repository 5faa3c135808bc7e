/* text_to_tokens: turn a UTF-8 text file into a byte-level token file.
 *
 * Byte-level tokenization is the simplest tokenizer there is: every byte is a
 * token (vocab 256) and decoding is the identity. A multi-byte character is
 * simply several tokens. The input must still be valid UTF-8, so that what
 * the model learns and generates is text: a byte the validator rejects would
 * usually mean the wrong file (binary, or Latin-1) was given.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fileio.h"
#include "tokens.h"

/* Read the whole file (any kind: regular, pipe...) into a malloc'd buffer. */
static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) USER_ERROR("cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    CHECK(buf != NULL, "out of memory");
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        CHECK(cap <= SIZE_MAX / 2, "input too large");
        cap *= 2;
        buf = realloc(buf, cap);
        CHECK(buf != NULL, "out of memory reading %s", path);
    }
    if (ferror(f)) USER_ERROR("cannot read %s: %s", path, strerror(errno));
    fclose(f);  /* read-only: a failing close loses nothing */
    *size = n;
    return buf;
}

/* Strict UTF-8 (RFC 3629). Returns NULL if valid, else the reason, with the
 * offset of the first bad sequence in *bad. The allowed second-byte ranges
 * are what rules out overlong forms (E0, F0), UTF-16 surrogates (ED) and code
 * points above U+10FFFF (F4); C0, C1 and F5..FF can never start a sequence. */
static const char *utf8_check(const unsigned char *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF;  /* range of the second byte */
        *bad = i;
        if (b < 0x80) { i++; continue; }
        if (b < 0xC0) return "unexpected continuation byte";
        if (b < 0xC2) return "overlong encoding";
        if (b < 0xE0) len = 2;
        else if (b < 0xF0) {
            len = 3;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b < 0xF5) {
            len = 4;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else return "byte that never occurs in UTF-8";

        if (n - i < len) return "sequence truncated by the end of the file";
        for (size_t k = 1; k < len; k++) {
            unsigned char c = s[i + k];
            if (c < 0x80 || c > 0xBF) return "truncated sequence (missing continuation byte)";
        }
        unsigned char c1 = s[i + 1];
        if (c1 < lo || c1 > hi) {
            if (b == 0xED) return "UTF-16 surrogate (U+D800..U+DFFF)";
            if (b == 0xF4) return "code point above U+10FFFF";
            return "overlong encoding";
        }
        i += len;
    }
    return NULL;
}

static void usage(void) {
    printf("usage: text_to_tokens IN OUT\n"
           "\n"
           "Convert the UTF-8 text file IN into the byte-level token file OUT\n"
           "(vocab 256: each byte is one token). Invalid UTF-8 is rejected with its\n"
           "byte offset and line. Prints tokens=N on success.\n");
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (c == 'h') { usage(); return 0; }
        USER_ERROR("unknown option '%s' (see --help)", argv[optind - 1]);
    }
    if (argc - optind != 2) USER_ERROR("expected two arguments IN OUT (see --help)");
    const char *in = argv[optind], *out = argv[optind + 1];
    char problem[1400];
    if (output_file_problem(out, problem, sizeof problem)) USER_ERROR("%s", problem);

    size_t n;
    unsigned char *text = read_file(in, &n);
    if (n == 0) {
        free(text);
        USER_ERROR("%s is empty: there is nothing to tokenize", in);
    }
    size_t bad;
    const char *why = utf8_check(text, n, &bad);
    if (why != NULL) {
        size_t line = 1;
        for (size_t i = 0; i < bad; i++) line += text[i] == '\n';
        unsigned byte = text[bad];
        free(text);
        USER_ERROR("%s is not valid UTF-8: %s (byte 0x%02X) at byte offset %zu, line %zu",
                   in, why, byte, bad, line);
    }

    uint16_t *tokens = malloc(n * sizeof *tokens);
    CHECK(tokens != NULL, "out of memory for %zu tokens", n);
    for (size_t i = 0; i < n; i++) tokens[i] = text[i];
    free(text);

    char err[1024];
    int rc = tokens_save(out, tokens, n, 256, err, sizeof err);
    free(tokens);
    if (rc != 0) USER_ERROR("%s", err);
    printf("tokens=%zu\n", n);
    IO_CHECK(fflush(stdout) == 0, "cannot write to stdout");
    return 0;
}
