/* Runs files through the fuzz target without libFuzzer, so that every build
 * replays the corpus as a test (and a crash found by the fuzzer can be
 * rerun under a debugger). Usage: fuzz_replay FILE|DIR|PACKED.txt...
 * A .txt file is a packed corpus (tests/fuzz/corpus.txt): a line per input,
 * its name and its bytes in hex; lines starting with '#' are comments. */
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
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (size == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(data, cap);
            if (!grown) {
                free(data);
                fclose(f);
                return -1;
            }
            data = grown;
        }
        size_t n = fread(data + size, 1, cap - size, f);
        size += n;
        if (n == 0)
            break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int run_packed(const char *path, int *count)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    static char line[1 << 16];
    static uint8_t data[1 << 15];
    int rc = 0, lineno = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        const char *hex = strchr(line, ' ');
        size_t n = 0;
        if (hex == NULL || strchr(line, '\n') == NULL)
            rc = -1;
        for (hex = hex ? hex + 1 : ""; rc == 0 && *hex && *hex != '\n'; hex += 2) {
            const int hi = hex_value(hex[0]), lo = hex_value(hex[1]);
            if (hi < 0 || lo < 0 || n == sizeof data)
                rc = -1;
            else
                data[n++] = (uint8_t)(hi << 4 | lo);
        }
        if (rc != 0) {
            fprintf(stderr, "%s:%d: not \"name hex\" (lowercase, at most %zu bytes)\n", path, lineno,
                    sizeof data);
            break;
        }
        (*count)++;
        LLVMFuzzerTestOneInput(data, n);
    }
    fclose(f);
    return rc;
}

static int run_path(const char *path, int *count)
{
    const size_t len = strlen(path);
    if (len > 4 && strcmp(path + len - 4, ".txt") == 0)
        return run_packed(path, count);
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *dir = opendir(path);
    if (!dir) {
        perror(path);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && rc == 0) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        rc = run_path(child, count);
    }
    closedir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0)
            return 1;
    printf("fuzz_replay: %d input(s) ran clean\n", count);
    return count > 0 ? 0 : 1;
}
