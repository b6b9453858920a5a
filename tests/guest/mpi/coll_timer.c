/*
 * coll_timer — times one of Open MPI's collectives (float, out of place where MPI has it) over a
 * range of sizes and prints rows in the layout of our vl_*_perf tools and nccl-tests:
 *
 *     size  count  type  redop  root  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
 *
 * It is the reference that scripts/bench-coll-vs-mpi and the mpirun scenarios run next to ours
 * under mpirun in the SoftRoCE guest and the cluster. scripts/softroce-vm builds it into the
 * guest image with the image's own mpicc (/usr/local/bin/vl_mpi_coll_timer).
 *
 * -o COLL picks the collective, named as nccl-tests' and our tools (vl_COLL_perf):
 *   all_reduce      MPI_Allreduce, sum            busbw = algbw * 2(n-1)/n
 *   all_gather      MPI_Allgather                 busbw = algbw * (n-1)/n
 *   reduce_scatter  MPI_Reduce_scatter_block, sum busbw = algbw * (n-1)/n
 *   alltoall        MPI_Alltoall                  busbw = algbw * (n-1)/n
 *   broadcast       MPI_Bcast from rank 0         busbw = algbw
 * The size is nccl-tests': the whole buffer (all_gather: what each rank receives; reduce_scatter
 * and alltoall: what each rank sends), its element count rounded down to a multiple of the ranks
 * where each rank has an equal part, and the row prints the size it moved; the count column is
 * the elements per rank (the part, where there is one).
 *
 * Options (nccl-tests' names): -o COLL (all_reduce), -b MIN bytes (8), -e MAX bytes (1M),
 * -f FACTOR (2), -n ITERS (20), -w WARMUP (5), -c 0|1 (check every element: inputs are small
 * integers, so float sums are exact). Time is the slowest rank's average per collective;
 * algbw = size / time (GB = 1e9 bytes). Exit status: 0 ok, 1 wrong values or an MPI error,
 * 2 bad usage.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long parse_size(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    return *end == '\0' ? v : -1;
}

static int usage(int rank, const char *msg)
{
    if (rank == 0)
        fprintf(stderr,
                "coll_timer: %s\nusage: coll_timer [-o all_reduce|all_gather|reduce_scatter|alltoall|"
                "broadcast] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n",
                msg);
    MPI_Finalize();
    return 2;
}

/* The value rank r puts at element i of its send buffer; small integers keep every float sum
 * exact. */
static float input(int r, size_t i)
{
    return (float)(r + 1 + (int)(i % 7));
}

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST };

static const struct {
    const char *name;
    int parts; /* each rank has an equal part of the buffer */
    const char *redop;
    const char *root;
} COLLS[] = {
    [ALL_REDUCE] = {"all_reduce", 0, "sum", "-1"},
    [ALL_GATHER] = {"all_gather", 1, "none", "-1"},
    [REDUCE_SCATTER] = {"reduce_scatter", 1, "sum", "-1"},
    [ALLTOALL] = {"alltoall", 1, "none", "-1"},
    [BROADCAST] = {"broadcast", 0, "none", "0"},
};

static double busbw_factor(enum coll c, int n)
{
    switch (c) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case BROADCAST: return 1.0;
    default: return (double)(n - 1) / n;
    }
}

/* One collective of `part` elements per rank (`count` for the unpartitioned ones). */
static void run(enum coll c, float *send, float *recv, int count, int part)
{
    switch (c) {
    case ALL_REDUCE:
        MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALL_GATHER:
        MPI_Allgather(send, part, MPI_FLOAT, recv, part, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        MPI_Reduce_scatter_block(send, recv, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(send, part, MPI_FLOAT, recv, part, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case BROADCAST:
        MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    }
}

/* The elements of `recv` on `rank` after one collective that differ from what it must hold. */
static long wrong_elements(enum coll c, const float *recv, int rank, int n, int count, int part)
{
    long wrong = 0;
    switch (c) {
    case ALL_REDUCE:
        for (int i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += input(r, (size_t)i);
            wrong += recv[i] != want;
        }
        break;
    case ALL_GATHER: /* rank r's first `part` elements, in rank order */
        for (int r = 0; r < n; r++)
            for (int i = 0; i < part; i++)
                wrong += recv[(size_t)r * part + i] != input(r, (size_t)i);
        break;
    case REDUCE_SCATTER: /* the sum of every rank's part number `rank` */
        for (int i = 0; i < part; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += input(r, (size_t)rank * part + i);
            wrong += recv[i] != want;
        }
        break;
    case ALLTOALL: /* block r: rank r's block number `rank` */
        for (int r = 0; r < n; r++)
            for (int i = 0; i < part; i++)
                wrong += recv[(size_t)r * part + i] != input(r, (size_t)rank * part + i);
        break;
    case BROADCAST:
        for (int i = 0; i < count; i++)
            wrong += recv[i] != input(0, (size_t)i);
        break;
    }
    return wrong;
}

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    long min = 8, max = 1 << 20, factor = 2, iters = 20, warmup = 5, check = 0;
    enum coll c = ALL_REDUCE;
    int opt;
    while ((opt = getopt(argc, argv, "o:b:e:f:n:w:c:")) != -1) {
        if (opt == 'o') {
            size_t k = 0;
            while (k < sizeof COLLS / sizeof COLLS[0] && strcmp(optarg, COLLS[k].name) != 0)
                k++;
            if (k == sizeof COLLS / sizeof COLLS[0])
                return usage(rank, "-o takes all_reduce, all_gather, reduce_scatter, alltoall or "
                                   "broadcast");
            c = (enum coll)k;
            continue;
        }
        long v = parse_size(optarg ? optarg : "");
        if (v < 0)
            return usage(rank, "option values are non-negative numbers (sizes may end in K, M, G)");
        switch (opt) {
        case 'b': min = v; break;
        case 'e': max = v; break;
        case 'f': factor = v; break;
        case 'n': iters = v; break;
        case 'w': warmup = v; break;
        case 'c': check = v; break;
        default: return usage(rank, "unknown option");
        }
    }
    if (optind != argc)
        return usage(rank, "unexpected argument");
    if (min < 4 || max < min || factor < 2 || iters < 1)
        return usage(rank, "need 4 <= -b <= -e, -f >= 2 and -n >= 1");

    size_t max_count = (size_t)max / sizeof(float);
    float *send = malloc(max_count * sizeof(float));
    float *recv = malloc(max_count * sizeof(float));
    if (!send || !recv) {
        fprintf(stderr, "coll_timer: rank %d: cannot allocate 2 x %ld bytes\n", rank, max);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < max_count; i++)
        send[i] = input(rank, i);

    char host[MPI_MAX_PROCESSOR_NAME];
    int len;
    MPI_Get_processor_name(host, &len);
    const char *dev = getenv("UCX_NET_DEVICES");
    char line[256];
    snprintf(line, sizeof line, "#  Rank %2d Pid %7d on %10.40s device %.40s\n", rank, (int)getpid(),
             host, dev ? dev : "(UCX's choice)");
    char *lines = rank == 0 ? malloc((size_t)n * sizeof line) : NULL;
    MPI_Gather(line, sizeof line, MPI_CHAR, lines, sizeof line, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("# coll_timer: Open MPI %s float, nranks %d, -b %ld -e %ld -f %ld -n %ld -w %ld "
               "-c %ld\n#\n# Using devices\n",
               COLLS[c].name, n, min, max, factor, iters, warmup, check);
        for (int r = 0; r < n; r++)
            fputs(lines + (size_t)r * sizeof line, stdout);
        printf("#\n#%11s %12s %8s %6s %6s %10s %7s %7s %6s\n", "size", "count", "type", "redop",
               "root", "time", "algbw", "busbw", "#wrong");
        printf("#%11s %12s %8s %6s %6s %10s %7s %7s %6s\n", "(B)", "(elements)", "", "", "",
               "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }

    long total_wrong = 0;
    double bw_sum = 0;
    int rows = 0;
    for (long req = min; req <= max; req *= factor) {
        int count = (int)(req / (long)sizeof(float)), part = count;
        if (COLLS[c].parts) {
            part = count / n;
            count = part * n;
        }
        long size = (long)count * (long)sizeof(float);
        if (c == BROADCAST && rank == 0)
            memcpy(recv, send, (size_t)count * sizeof(float));
        for (long i = 0; i < warmup; i++)
            run(c, send, recv, count, part);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++)
            run(c, send, recv, count, part);
        double mine = (MPI_Wtime() - t0) / (double)iters * 1e6, slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        long wrong = 0, all_wrong = 0;
        if (check) {
            /* Clear what the collective writes (the root's broadcast buffer is its input). */
            if (c == BROADCAST && rank == 0)
                memcpy(recv, send, (size_t)count * sizeof(float));
            else
                memset(recv, 0, max_count * sizeof(float));
            run(c, send, recv, count, part);
            wrong = wrong_elements(c, recv, rank, n, count, part);
        }
        MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double algbw = slowest > 0 ? (double)size / slowest / 1e3 : 0;
            double busbw = algbw * busbw_factor(c, n);
            char wcol[24];
            if (check)
                snprintf(wcol, sizeof wcol, "%ld", all_wrong);
            else
                snprintf(wcol, sizeof wcol, "N/A");
            printf(" %11ld %12d %8s %6s %6s %10.1f %7.4f %7.4f %6s\n", size, COLLS[c].parts ? part : count,
                   "float", COLLS[c].redop, COLLS[c].root, slowest, algbw, busbw, wcol);
            fflush(stdout);
            total_wrong += all_wrong;
            bw_sum += busbw;
            rows++;
        }
    }
    if (rank == 0) {
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.6f\n#\n", rows ? bw_sum / rows : 0.0);
    }
    free(send);
    free(recv);
    free(lines);
    MPI_Finalize();
    return rank == 0 && total_wrong ? 1 : 0;
}
