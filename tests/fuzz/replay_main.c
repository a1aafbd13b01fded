/* tests/fuzz/replay_main.c: a main() for the fuzz targets in a normal
 * build: it runs LLVMFuzzerTestOneInput on every file named on the command
 * line or found in a directory named there, so the checked-in corpus runs
 * as a regression test under `meson test` (and under the sanitizers). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    size_t n;
    while (b != NULL && (n = fread(b + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b == NULL)
        return -1;
    LLVMFuzzerTestOneInput(b, len);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    long runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (d == NULL) {
            perror(argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (run_file(path) != 0) {
                closedir(d);
                return 1;
            }
            runs++;
        }
        closedir(d);
    }
    printf("replayed %ld inputs\n", runs);
    return 0;
}
