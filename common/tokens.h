/* tokens.h: the token-file format and its loader.
 *
 * A token file is a 32-byte little-endian header followed by `count` tokens
 * stored as uint16 (so vocabularies up to 65536 entries, GPT-2's 50257 too):
 *
 *   offset  size  field
 *        0     8  magic      "DTLTOKEN"
 *        8     4  version    TOKENS_VERSION (1)
 *       12     4  vocab_size every token is < vocab_size, 1..65536
 *       16     8  count      number of tokens that follow
 *       24     8  checksum   FNV-1a 64 of the token bytes (not the header)
 *       32  2*count tokens
 *
 * Files are written atomically (a temporary file in the same directory, then
 * rename), so a crash never leaves a half-written file under the final name.
 * The loader checks every field and reports the first problem it finds in one
 * human sentence; nothing is trusted before it is checked.
 */
#ifndef TOKENS_H
#define TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAGIC "DTLTOKEN"
#define TOKENS_VERSION 1u
#define TOKENS_HEADER_BYTES 32
#define TOKENS_MAX_VOCAB 65536u

typedef struct {
    uint32_t vocab_size;
    uint64_t count;
    uint16_t *tokens;   /* count entries, owned (free with tokens_free) */
} TokenFile;

/* FNV-1a, 64-bit, over n bytes. */
uint64_t tokens_checksum(const void *data, size_t n);

/* Load and validate. Returns 0 on success; on failure returns -1, leaves *tf
 * empty and writes a one-sentence reason (naming the path) into err. */
int tokens_load(const char *path, TokenFile *tf, char *err, size_t errlen);

/* Write atomically. Returns 0, or -1 with a reason in err (the destination is
 * then untouched). Every token must be < vocab_size. */
int tokens_save(const char *path, const uint16_t *tokens, uint64_t count,
                uint32_t vocab_size, char *err, size_t errlen);

void tokens_free(TokenFile *tf);

#endif
