/*
 * comd_cr: a CoMD-like MPI program that checkpoints N-N (one file per rank per checkpoint)
 * through plain POSIX calls, and restarts from the newest checkpoint every rank has whole.
 *
 * Each rank owns `atoms` atoms (position, velocity and force, three doubles each) on a
 * periodic chain, and moves them with velocity Verlet under spring forces plus a cubic term.
 * After every `every` steps it writes <dir>/ckpt.<step>/rank.<r>: a 64-byte header (magic,
 * version, rank, ranks, atoms, step, payload length, FNV-1a 64 of the payload) and the
 * payload, in chunks of `chunk` bytes, then fsync and close. With --restart it reads the
 * newest step that every rank has with a valid header and checksum (agreed with MPI), and
 * continues from there. It prints "rank R step S digest HEX" at the end: the FNV-1a 64 of the
 * rank's state, equal for an interrupted-and-restarted run and an uninterrupted one.
 *
 * Modes (all ranks take the same arguments):
 *   comd_cr run DIR [--atoms N] [--steps S] [--every K] [--chunk B] [--restart] [--stop-after S]
 *               [--kill-at S --kill-rank R]   (rank R dies by SIGKILL halfway through checkpoint S)
 *   comd_cr bench DIR --bytes B [--reps R] [--chunk B] [--drop-caches]
 *                                       write (then fsync) and read B bytes per rank, timed;
 *                                       --drop-caches: rank 0 empties the kernel's page cache
 *                                       between the two (untimed)
 *   comd_cr create DIR --files K [--shared]              K creates per rank, timed
 * bench and create print one line from rank 0: "bench write_s X read_s Y bytes Z ranks P" and
 * "create seconds X files Z ranks P". Exit status: 0 ok, 1 a checkpoint failed to verify,
 * 2 bad arguments or an I/O error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 0x31544b50434b4d43ULL /* "CMKCPKT1" little endian, any fixed value */
#define VERSION 1u

struct header {
    uint64_t magic;
    uint32_t version;
    uint32_t rank;
    uint32_t ranks;
    uint32_t pad;
    uint64_t atoms;
    uint64_t step;
    uint64_t payload;
    uint64_t checksum;
    uint64_t reserved;
};

static int rank, ranks;
/* --kill-at S --kill-rank R: rank R dies by SIGKILL halfway through writing checkpoint S. */
static uint64_t kill_at = 0;
static int kill_rank = -1;

static void die(const char *what, const char *path) {
    fprintf(stderr, "comd_cr: rank %d: %s %s: %s\n", rank, what, path ? path : "",
            strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV0 0xcbf29ce484222325ULL

static void write_all(int fd, const void *buf, size_t n, size_t chunk, const char *path) {
    const char *p = buf;
    while (n > 0) {
        size_t k = n < chunk ? n : chunk;
        ssize_t w = write(fd, p, k);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("write", path);
        }
        if (w == 0) {
            errno = EIO;
            die("write returned 0 on", path);
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes; returns 0, or -1 on a short file. */
static int read_all(int fd, void *buf, size_t n, size_t chunk, const char *path) {
    char *p = buf;
    while (n > 0) {
        size_t k = n < chunk ? n : chunk;
        ssize_t r = read(fd, p, k);
        if (r < 0) {
            if (errno == EINTR) continue;
            die("read", path);
        }
        if (r == 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void mkdir_p(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
}

/* State: 9 doubles per atom: x[3], v[3], f[3], stored as three arrays. */
struct state {
    uint64_t atoms, step;
    double *buf; /* 9 * atoms */
};
#define POS(s) ((s)->buf)
#define VEL(s) ((s)->buf + 3 * (s)->atoms)
#define FRC(s) ((s)->buf + 6 * (s)->atoms)

static void forces(struct state *s) {
    uint64_t n = s->atoms;
    double *x = POS(s), *f = FRC(s);
    const double k = 0.7, a = 0.05;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = (i + n - 1) % n, r = (i + 1) % n;
        for (int d = 0; d < 3; d++) {
            double xi = x[3 * i + d];
            double dl = xi - x[3 * l + d] - (l < i ? 1.0 : -(double)(n - 1)) * (d == 0);
            double dr = xi - x[3 * r + d] + (r > i ? 1.0 : -(double)(n - 1)) * (d == 0);
            f[3 * i + d] = -k * (dl + dr) - a * (dl * dl * dl + dr * dr * dr);
        }
    }
}

static void init_state(struct state *s, uint64_t atoms) {
    s->atoms = atoms;
    s->step = 0;
    s->buf = malloc(9 * atoms * sizeof(double));
    if (!s->buf) die("malloc", NULL);
    uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(rank + 1);
    for (uint64_t i = 0; i < atoms; i++) {
        for (int d = 0; d < 3; d++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = (double)(seed >> 11) / 9007199254740992.0 - 0.5;
            POS(s)[3 * i + d] = (d == 0 ? (double)i : 0.0) + 0.1 * u;
            VEL(s)[3 * i + d] = 0.01 * u;
        }
    }
    forces(s);
}

static void step_once(struct state *s) {
    const double dt = 0.01;
    uint64_t m = 3 * s->atoms;
    for (uint64_t i = 0; i < m; i++) VEL(s)[i] += 0.5 * dt * FRC(s)[i];
    for (uint64_t i = 0; i < m; i++) POS(s)[i] += dt * VEL(s)[i];
    forces(s);
    for (uint64_t i = 0; i < m; i++) VEL(s)[i] += 0.5 * dt * FRC(s)[i];
    s->step++;
}

static void ckpt_path(char *out, size_t n, const char *dir, uint64_t step, int r) {
    snprintf(out, n, "%s/ckpt.%llu/rank.%d", dir, (unsigned long long)step, r);
}

static void write_ckpt(const char *dir, struct state *s, size_t chunk) {
    char d[4096], p[4096];
    snprintf(d, sizeof d, "%s/ckpt.%llu", dir, (unsigned long long)s->step);
    mkdir_p(d);
    ckpt_path(p, sizeof p, dir, s->step, rank);
    size_t payload = 9 * s->atoms * sizeof(double);
    struct header h = {MAGIC, VERSION, (uint32_t)rank, (uint32_t)ranks, 0, s->atoms,
                       s->step, payload, fnv(s->buf, payload, FNV0), 0};
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("open", p);
    write_all(fd, &h, sizeof h, chunk, p);
    if (s->step == kill_at && rank == kill_rank) {
        write_all(fd, s->buf, payload / 2, chunk, p);
        fprintf(stderr, "comd_cr: rank %d: killing myself halfway through checkpoint %llu\n",
                rank, (unsigned long long)s->step);
        raise(SIGKILL);
    }
    write_all(fd, s->buf, payload, chunk, p);
    if (fsync(fd) != 0) die("fsync", p);
    if (close(fd) != 0) die("close", p);
}

/* Reads and verifies a checkpoint into s (allocated for `atoms`); 0 ok, -1 invalid or absent. */
static int read_ckpt(const char *dir, uint64_t step, struct state *s, size_t chunk, int quiet) {
    char p[4096];
    ckpt_path(p, sizeof p, dir, step, rank);
    int fd = open(p, O_RDONLY);
    if (fd < 0) {
        if (errno == ENOENT) return -1;
        die("open", p);
    }
    struct header h;
    int bad = 0;
    const char *why = NULL;
    if (read_all(fd, &h, sizeof h, chunk, p) != 0) why = "short header";
    else if (h.magic != MAGIC || h.version != VERSION) why = "bad magic or version";
    else if (h.rank != (uint32_t)rank || h.ranks != (uint32_t)ranks) why = "another rank's file";
    else if (h.atoms != s->atoms || h.step != step) why = "unexpected atoms or step";
    else if (h.payload != 9 * s->atoms * sizeof(double)) why = "bad payload length";
    else if (read_all(fd, s->buf, h.payload, chunk, p) != 0) why = "short payload";
    else if (fnv(s->buf, h.payload, FNV0) != h.checksum) why = "checksum mismatch";
    if (why) {
        bad = 1;
        if (!quiet) fprintf(stderr, "comd_cr: rank %d: %s: %s\n", rank, p, why);
    }
    close(fd);
    if (bad) return -1;
    s->step = step;
    return 0;
}

/* The steps of <dir>/ckpt.<step> directories, descending. */
static int list_steps(const char *dir, uint64_t *out, int max) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        die("opendir", dir);
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        unsigned long long s;
        char tail;
        if (sscanf(e->d_name, "ckpt.%llu%c", &s, &tail) == 1) out[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j] > out[j - 1]; j--) {
            uint64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static uint64_t u64arg(const char *v, const char *name) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || !*v) {
        if (rank == 0) fprintf(stderr, "comd_cr: %s: expected a number, found %s\n", name, v);
        MPI_Finalize();
        exit(2);
    }
    return x;
}

static int run(const char *dir, int argc, char **argv) {
    uint64_t atoms = 4096, steps = 4, every = 1, chunk = 65536, stop_after = 0;
    int restart = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--restart")) restart = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--atoms")) atoms = u64arg(argv[++i], "--atoms");
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = u64arg(argv[++i], "--steps");
        else if (i + 1 < argc && !strcmp(argv[i], "--every")) every = u64arg(argv[++i], "--every");
        else if (i + 1 < argc && !strcmp(argv[i], "--chunk")) chunk = u64arg(argv[++i], "--chunk");
        else if (i + 1 < argc && !strcmp(argv[i], "--stop-after"))
            stop_after = u64arg(argv[++i], "--stop-after");
        else if (i + 1 < argc && !strcmp(argv[i], "--kill-at")) kill_at = u64arg(argv[++i], "--kill-at");
        else if (i + 1 < argc && !strcmp(argv[i], "--kill-rank"))
            kill_rank = (int)u64arg(argv[++i], "--kill-rank");
        else {
            if (rank == 0) fprintf(stderr, "comd_cr: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (atoms == 0 || every == 0 || chunk == 0 || atoms > (1ULL << 32)) {
        if (rank == 0) fprintf(stderr, "comd_cr: atoms, every and chunk must be positive\n");
        return 2;
    }
    struct state s;
    init_state(&s, atoms);
    if (restart) {
        uint64_t list[1024];
        int n = list_steps(dir, list, 1024);
        /* My newest valid checkpoint, then the newest every rank has. */
        uint64_t mine = 0;
        for (int i = 0; i < n; i++)
            if (read_ckpt(dir, list[i], &s, chunk, 0) == 0) {
                mine = list[i];
                break;
            }
        uint64_t agreed;
        MPI_Allreduce(&mine, &agreed, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        int ok = 1;
        if (agreed > 0 && agreed != mine) ok = read_ckpt(dir, agreed, &s, chunk, 0) == 0;
        int all;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        if (!all) {
            fprintf(stderr, "comd_cr: rank %d: checkpoint %llu does not verify\n", rank,
                    (unsigned long long)agreed);
            return 1;
        }
        if (agreed == 0) {
            if (rank == 0) fprintf(stderr, "comd_cr: no complete checkpoint; starting at 0\n");
            free(s.buf);
            init_state(&s, atoms);
        } else if (rank == 0) {
            printf("restart from step %llu\n", (unsigned long long)agreed);
        }
    }
    while (s.step < steps) {
        step_once(&s);
        double e = 0, total;
        for (uint64_t i = 0; i < 3 * atoms; i++) e += 0.5 * VEL(&s)[i] * VEL(&s)[i];
        MPI_Allreduce(&e, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (s.step % every == 0) {
            write_ckpt(dir, &s, chunk);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (stop_after && s.step == stop_after) break;
    }
    uint64_t digest = fnv(s.buf, 9 * atoms * sizeof(double), fnv(&s.step, 8, FNV0));
    printf("rank %d step %llu digest %016llx\n", rank, (unsigned long long)s.step,
           (unsigned long long)digest);
    free(s.buf);
    return 0;
}

static int bench(const char *dir, int argc, char **argv) {
    uint64_t bytes = 1 << 20, reps = 1, chunk = 1 << 20;
    int drop = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--bytes")) bytes = u64arg(argv[++i], "--bytes");
        else if (i + 1 < argc && !strcmp(argv[i], "--reps")) reps = u64arg(argv[++i], "--reps");
        else if (i + 1 < argc && !strcmp(argv[i], "--chunk")) chunk = u64arg(argv[++i], "--chunk");
        else if (!strcmp(argv[i], "--drop-caches")) drop = 1;
        else {
            if (rank == 0) fprintf(stderr, "comd_cr: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (bytes == 0 || reps == 0 || chunk == 0) return 2;
    size_t bufsz = chunk < bytes ? chunk : bytes;
    unsigned char *buf = malloc(bufsz), *back = malloc(bufsz);
    if (!buf || !back) die("malloc", NULL);
    for (size_t i = 0; i < bufsz; i++) buf[i] = (unsigned char)(i * 131 + rank);
    double wsum = 0, rsum = 0, usum = 0, ssum = 0;
    int bad = 0;
    for (uint64_t rep = 0; rep < reps; rep++) {
        char d[4096], p[4096];
        snprintf(d, sizeof d, "%s/ckpt.%llu", dir, (unsigned long long)rep);
        mkdir_p(d);
        ckpt_path(p, sizeof p, dir, rep, rank);
        MPI_Barrier(MPI_COMM_WORLD);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        double t0 = MPI_Wtime();
        int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) die("open", p);
        for (uint64_t done = 0; done < bytes;) {
            size_t k = bytes - done < bufsz ? bytes - done : bufsz;
            write_all(fd, buf, k, k, p);
            done += k;
        }
        if (fsync(fd) != 0) die("fsync", p);
        if (close(fd) != 0) die("close", p);
        getrusage(RUSAGE_SELF, &ru1);
        MPI_Barrier(MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        usum += (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6;
        ssum += (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
        if (drop) {
            /* Untimed: the kernel's page cache must not serve the read. */
            if (rank == 0) {
                sync();
                int dc = open("/proc/sys/vm/drop_caches", O_WRONLY);
                if (dc < 0 || write(dc, "3", 1) != 1) die("write", "/proc/sys/vm/drop_caches");
                close(dc);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double t1r = MPI_Wtime();
        fd = open(p, O_RDONLY);
        if (fd < 0) die("open", p);
        for (uint64_t done = 0; done < bytes;) {
            size_t k = bytes - done < bufsz ? bytes - done : bufsz;
            if (read_all(fd, back, k, k, p) != 0 || memcmp(back, buf, k) != 0) bad = 1;
            done += k;
        }
        close(fd);
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        wsum += t1 - t0;
        rsum += t2 - t1r;
        if (unlink(p) != 0) die("unlink", p);
    }
    int anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    double cpu[2] = {usum, ssum}, all[2];
    MPI_Reduce(cpu, all, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    /* user_s and sys_s: CPU time of all ranks while they wrote (up to their close), per rep. */
    if (rank == 0)
        printf("bench write_s %.6f read_s %.6f bytes %llu ranks %d reps %llu user_s %.6f "
               "sys_s %.6f\n",
               wsum / reps, rsum / reps, (unsigned long long)bytes, ranks,
               (unsigned long long)reps, all[0] / reps, all[1] / reps);
    free(buf);
    free(back);
    if (anybad && rank == 0) fprintf(stderr, "comd_cr: data read back differs\n");
    return anybad ? 1 : 0;
}

static int create(const char *dir, int argc, char **argv) {
    uint64_t files = 100;
    int shared = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--shared")) shared = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--files")) files = u64arg(argv[++i], "--files");
        else {
            if (rank == 0) fprintf(stderr, "comd_cr: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    char d[4096], p[4200];
    /* --shared: every rank creates in one directory (a shared namespace's common directory);
     * otherwise each rank in its own. */
    if (shared) snprintf(d, sizeof d, "%s/creates", dir);
    else snprintf(d, sizeof d, "%s/creates.%d", dir, rank);
    mkdir_p(d);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (uint64_t i = 0; i < files; i++) {
        snprintf(p, sizeof p, "%s/r%d.f%llu", d, rank, (unsigned long long)i);
        int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd < 0) die("open", p);
        if (close(fd) != 0) die("close", p);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (rank == 0)
        printf("create seconds %.6f files %llu ranks %d\n", t1 - t0,
               (unsigned long long)(files * (uint64_t)ranks), ranks);
    return 0;
}

int main(int argc, char **argv) {
    /* COMD_CR_INIT_THREAD=1: start with MPI_Init_thread (both entry points are wrapped). */
    const char *it = getenv("COMD_CR_INIT_THREAD");
    if (it && !strcmp(it, "1")) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int rc = 2;
    if (argc >= 3) mkdir_p(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "run")) rc = run(argv[2], argc - 3, argv + 3);
    else if (argc >= 3 && !strcmp(argv[1], "bench")) rc = bench(argv[2], argc - 3, argv + 3);
    else if (argc >= 3 && !strcmp(argv[1], "create")) rc = create(argv[2], argc - 3, argv + 3);
    else if (rank == 0)
        fprintf(stderr, "usage: comd_cr run|bench|create DIR [options]\n");
    MPI_Finalize();
    return rc;
}
