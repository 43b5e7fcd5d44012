/* SPDX-License-Identifier: MIT */
/*
 * Corpus replay driver: a main() for libFuzzer targets in builds without libFuzzer (gcc, the
 * normal test build), as s2n and h2o do. Every argument is a file or a directory; each file (and
 * each regular file directly inside a directory, in name order, dot files skipped) is read into
 * an exactly sized heap buffer and passed to LLVMFuzzerTestOneInput once.
 *
 * Exit status: 0 when every input was replayed; 1 when an argument cannot be read, a directory
 * holds no input, or no argument was given. A crashing input crashes this program (the name of
 * the input being replayed is on stderr just before).
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Reads the whole file at path and feeds it to the target. Returns 0, or -1 after a message. */
static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
        fclose(f);
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            uint8_t *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                fclose(f);
                fprintf(stderr, "replay: %s: out of memory\n", path);
                return -1;
            }
            buf = grown;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            break;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        fprintf(stderr, "replay: %s: read error\n", path);
        return -1;
    }
    /* Copy into an exactly sized block so that ASan flags any read past the input. */
    uint8_t *exact = malloc(len > 0 ? len : 1);
    if (exact == NULL) {
        free(buf);
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    if (len > 0) {
        memcpy(exact, buf, len);
    }
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    (void) LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * Replays the regular files directly inside dir, in name order. Adds the number replayed to
 * *count. Returns 0, or -1 when the directory is unreadable, empty, or a file fails.
 */
static int
replay_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        size_t plen = strlen(dir) + 1 + strlen(e->d_name) + 1;
        char *path = malloc(plen);
        if (path == NULL) {
            rc = -1;
            break;
        }
        snprintf(path, plen, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **grown = realloc(names, ncap * sizeof(*names));
            if (grown == NULL) {
                free(path);
                rc = -1;
                break;
            }
            names = grown;
            cap = ncap;
        }
        names[n++] = path;
    }
    closedir(d);
    if (rc != 0) {
        fprintf(stderr, "replay: %s: out of memory\n", dir);
    } else if (n == 0) {
        fprintf(stderr, "replay: %s: no input files\n", dir);
        rc = -1;
    } else {
        qsort(names, n, sizeof(*names), cmp_names);
    }
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) {
            if (replay_file(names[i]) != 0) {
                rc = -1;
            } else {
                (*count)++;
            }
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 1;
    }
    if (LLVMFuzzerInitialize != NULL) {
        LLVMFuzzerInitialize(&argc, &argv);
    }
    size_t total = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        size_t count = 0;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (replay_dir(argv[i], &count) != 0) {
                rc = 1;
            }
        } else if (replay_file(argv[i]) == 0) {
            count = 1;
        } else {
            rc = 1;
        }
        printf("replayed %zu input(s) from %s\n", count, argv[i]);
        total += count;
    }
    printf("replayed %zu input(s) in total%s\n", total, rc == 0 ? "" : ", with errors");
    return rc;
}
