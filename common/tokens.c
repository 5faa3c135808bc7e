/* tokens.c: load and save token files (the format is described in tokens.h).
 *
 * Header fields are encoded byte by byte, so their layout does not depend on
 * the host. The payload is read and written as the in-memory uint16 array,
 * which is only right on a little-endian host: the check below refuses to
 * build anywhere else rather than produce files other machines misread.
 */
#define _POSIX_C_SOURCE 200809L  /* fileno, fsync, fstat under -std=c11 */
#include "tokens.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files store uint16 little-endian; this host is not little-endian"
#endif

uint64_t tokens_checksum(const void *data, size_t n) { return fnv1a64_update(FNV1A64_INIT, data, n); }

/* err may be NULL or errlen 0 when the caller does not want the reason. */
__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* What the header says about the payload. */
typedef struct {
    uint32_t vocab_size;
    uint64_t count, checksum;
} PayloadInfo;

/* The file's size, once it is a regular file at least a header long. */
static int file_size(FILE *f, const char *path, uint64_t *bytes, char *err, size_t errlen) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        set_err(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s is not a regular file", path);
        return -1;
    }
    *bytes = (uint64_t)st.st_size;
    if (*bytes < TOKENS_HEADER_BYTES) {
        set_err(err, errlen, "%s is not a token file: it has %" PRIu64
                " bytes, shorter than the %d-byte header",
                path, *bytes, TOKENS_HEADER_BYTES);
        return -1;
    }
    return 0;
}

/* Reads the header; its fields are checked, but count is not yet compared
 * with the file. */
static int read_header(FILE *f, const char *path, PayloadInfo *info, char *err, size_t errlen) {
    unsigned char h[TOKENS_HEADER_BYTES];
    if (fread(h, 1, sizeof h, f) != sizeof h) {
        set_err(err, errlen, "cannot read the header of %s: %s", path,
                ferror(f) ? strerror(errno) : "unexpected end of file");
        return -1;
    }
    if (memcmp(h, TOKENS_MAGIC, 8) != 0) {
        set_err(err, errlen, "%s is not a token file (it does not start with \"%s\")",
                path, TOKENS_MAGIC);
        return -1;
    }
    uint32_t version = get_u32(h + 8);
    info->vocab_size = get_u32(h + 12);
    info->count = get_u64(h + 16);
    info->checksum = get_u64(h + 24);
    if (version != TOKENS_VERSION) {
        set_err(err, errlen, "%s has unsupported format version %" PRIu32
                " (this build reads version %u)", path, version, TOKENS_VERSION);
        return -1;
    }
    if (info->vocab_size == 0 || info->vocab_size > TOKENS_MAX_VOCAB) {
        set_err(err, errlen, "%s has invalid vocab_size %" PRIu32 " (must be 1..%u)",
                path, info->vocab_size, TOKENS_MAX_VOCAB);
        return -1;
    }
    return 0;
}

/* count tokens must be exactly the payload's bytes, and fit in memory. */
static int check_count(const char *path, uint64_t count, uint64_t payload, char *err,
                       size_t errlen) {
    if (count > payload / 2) {
        if (count > UINT64_MAX / 2)
            set_err(err, errlen, "%s is truncated: header says %" PRIu64
                    " tokens (more bytes than any file can hold) but file has %"
                    PRIu64 " bytes of tokens", path, count, payload);
        else
            set_err(err, errlen, "%s is truncated: header says %" PRIu64 " tokens (%"
                    PRIu64 " bytes) but file has %" PRIu64 " bytes of tokens",
                    path, count, 2 * count, payload);
        return -1;
    }
    if (payload != 2 * count) {
        uint64_t extra = payload - 2 * count;
        set_err(err, errlen, "%s has %" PRIu64 " trailing byte%s after the %" PRIu64
                " tokens (%" PRIu64 " bytes) the header announces",
                path, extra, extra == 1 ? "" : "s", count, 2 * count);
        return -1;
    }
    if (count > SIZE_MAX / 2) {
        set_err(err, errlen, "%s holds %" PRIu64 " tokens, too many for this machine",
                path, count);
        return -1;
    }
    return 0;
}

/* Reads the payload into *tokens (malloc'd), once its checksum and every
 * token's range are right. */
static int read_payload(FILE *f, const char *path, const PayloadInfo *info, uint16_t **tokens,
                        char *err, size_t errlen) {
    const uint64_t count = info->count;
    /* malloc(0) may return NULL, so an empty payload allocates one element. */
    uint16_t *t = malloc(count > 0 ? (size_t)count * 2 : 2);
    if (t == NULL) {
        set_err(err, errlen, "cannot load %s: out of memory for %" PRIu64 " tokens",
                path, count);
        return -1;
    }
    if (fread(t, 2, (size_t)count, f) != (size_t)count) {
        set_err(err, errlen, "cannot read the tokens of %s: %s", path,
                ferror(f) ? strerror(errno) : "file shrank while reading");
        free(t);
        return -1;
    }
    uint64_t actual = tokens_checksum(t, (size_t)count * 2);
    if (actual != info->checksum) {
        set_err(err, errlen, "%s is corrupt: the tokens have checksum 0x%016" PRIx64
                " but the header says 0x%016" PRIx64, path, actual, info->checksum);
        free(t);
        return -1;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (t[i] >= info->vocab_size) {
            set_err(err, errlen, "%s has token %u at index %" PRIu64
                    ", not below vocab_size %" PRIu32, path, t[i], i, info->vocab_size);
            free(t);
            return -1;
        }
    }
    *tokens = t;
    return 0;
}

/* The checks run in file order and each one only relies on fields already
 * checked: in particular `count` is compared with the real file size before
 * it sizes an allocation, so a corrupt header cannot ask for terabytes. */
static int load_from(FILE *f, const char *path, TokenFile *tf, char *err, size_t errlen) {
    uint64_t file_bytes;
    PayloadInfo info;
    uint16_t *tokens;
    if (file_size(f, path, &file_bytes, err, errlen) != 0 ||
        read_header(f, path, &info, err, errlen) != 0 ||
        check_count(path, info.count, file_bytes - TOKENS_HEADER_BYTES, err, errlen) != 0 ||
        read_payload(f, path, &info, &tokens, err, errlen) != 0)
        return -1;
    tf->vocab_size = info.vocab_size;
    tf->count = info.count;
    tf->tokens = tokens;
    return 0;
}

int tokens_load(const char *path, TokenFile *tf, char *err, size_t errlen) {
    memset(tf, 0, sizeof *tf);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = load_from(f, path, tf, err, errlen);
    fclose(f);  /* read-only: a failing close loses nothing */
    return rc;
}

/* Write header and payload to an open temporary file; 0 or -1 (errno set). */
static int write_all(FILE *f, const uint16_t *tokens, uint64_t count, uint32_t vocab_size) {
    unsigned char h[TOKENS_HEADER_BYTES];
    memcpy(h, TOKENS_MAGIC, 8);
    put_u32(h + 8, TOKENS_VERSION);
    put_u32(h + 12, vocab_size);
    put_u64(h + 16, count);
    put_u64(h + 24, tokens_checksum(tokens, (size_t)count * 2));
    if (fwrite(h, 1, sizeof h, f) != sizeof h) return -1;
    if (count > 0 && fwrite(tokens, 2, (size_t)count, f) != (size_t)count) return -1;
    /* fflush moves the data to the kernel, fsync to the disk: only then is
     * the rename below guaranteed to expose a complete file after a crash. */
    if (fflush(f) != 0) return -1;
    if (fsync(fileno(f)) != 0) return -1;
    return 0;
}

int tokens_save(const char *path, const uint16_t *tokens, uint64_t count,
                uint32_t vocab_size, char *err, size_t errlen) {
    if (vocab_size == 0 || vocab_size > TOKENS_MAX_VOCAB) {
        set_err(err, errlen, "cannot save %s: vocab_size %" PRIu32 " is not in 1..%u",
                path, vocab_size, TOKENS_MAX_VOCAB);
        return -1;
    }
    if (count > SIZE_MAX / 2 || (count > 0 && tokens == NULL)) {
        set_err(err, errlen, "cannot save %s: no valid array of %" PRIu64 " tokens",
                path, count);
        return -1;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (tokens[i] >= vocab_size) {
            set_err(err, errlen, "cannot save %s: token %u at index %" PRIu64
                    " is not below vocab_size %" PRIu32, path, tokens[i], i, vocab_size);
            return -1;
        }
    }

    char why[1400];
    if (output_file_problem(path, why, sizeof why)) {
        set_err(err, errlen, "cannot save %s: %s", path, why);
        return -1;
    }
    /* The temporary file lives next to the destination: rename() is atomic
     * only within one file system. The pid keeps concurrent writers apart. */
    size_t tmp_len = strlen(path) + 32;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        set_err(err, errlen, "cannot save %s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());

    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        set_err(err, errlen, "cannot save %s (creating %s): %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = write_all(f, tokens, count, vocab_size);
    int saved_errno = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        saved_errno = errno;
    }
    if (rc != 0) {
        set_err(err, errlen, "cannot save %s (writing %s): %s", path, tmp, strerror(saved_errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        set_err(err, errlen, "cannot save %s (renaming %s to it): %s", path, tmp,
                strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

void tokens_free(TokenFile *tf) {
    free(tf->tokens);
    memset(tf, 0, sizeof *tf);
}
