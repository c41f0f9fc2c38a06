/* Writes a file of the checkpoint directory through stdio and exits without fclose: the data
 * sits in the stream's buffer until exit flushes it. */
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: unclosed PATH\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror("fopen");
        return 1;
    }
    for (int i = 0; i < 100; i++)
        fprintf(f, "line %d of a stream never closed\n", i);
    return 0;
}
