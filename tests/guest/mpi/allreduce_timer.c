/*
 * allreduce_timer — times MPI_Allreduce (float, sum, out of place) over a range of sizes and
 * prints rows in the layout of vl_all_reduce_perf and nccl-tests:
 *
 *     size  count  type  redop  root  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
 *
 * It is the reference that scripts/bench-coll-vs-mpi and tests/guest/68-* run next to
 * vl_all_reduce_perf under mpirun in the SoftRoCE guest. scripts/softroce-vm builds it into the
 * guest image with the image's own mpicc (/usr/local/bin/vl_mpi_allreduce_timer).
 *
 * Options (nccl-tests' names): -b MIN bytes (8), -e MAX bytes (1M), -f FACTOR (2), -n ITERS (20),
 * -w WARMUP (5), -c 0|1 (check every element: inputs are small integers, so float sums are exact).
 * Time is the slowest rank's average per collective; algbw = size / time (GB = 1e9 bytes);
 * busbw = algbw * 2(n-1)/n. Exit status: 0 ok, 1 wrong values or an MPI error, 2 bad usage.
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
                "allreduce_timer: %s\nusage: allreduce_timer [-b MIN] [-e MAX] [-f FACTOR] "
                "[-n ITERS] [-w WARMUP] [-c 0|1]\n",
                msg);
    MPI_Finalize();
    return 2;
}

/* The value rank r puts at element i; small integers keep every float sum exact. */
static float input(int r, size_t i)
{
    return (float)(r + 1 + (int)(i % 7));
}

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    long min = 8, max = 1 << 20, factor = 2, iters = 20, warmup = 5, check = 0;
    int opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:w:c:")) != -1) {
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
        fprintf(stderr, "allreduce_timer: rank %d: cannot allocate 2 x %ld bytes\n", rank, max);
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
        printf("# allreduce_timer: MPI_Allreduce float sum, nranks %d, -b %ld -e %ld -f %ld -n %ld "
               "-w %ld -c %ld\n#\n# Using devices\n",
               n, min, max, factor, iters, warmup, check);
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
    for (long size = min; size <= max; size *= factor) {
        int count = (int)(size / (long)sizeof(float));
        for (long i = 0; i < warmup; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mine = (MPI_Wtime() - t0) / (double)iters * 1e6, slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        long wrong = 0, all_wrong = 0;
        if (check) {
            memset(recv, 0, (size_t)count * sizeof(float));
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (int i = 0; i < count; i++) {
                float want = 0;
                for (int r = 0; r < n; r++)
                    want += input(r, (size_t)i);
                wrong += recv[i] != want;
            }
        }
        MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double algbw = slowest > 0 ? (double)size / slowest / 1e3 : 0;
            double busbw = algbw * 2.0 * (n - 1) / n;
            char wcol[24];
            if (check)
                snprintf(wcol, sizeof wcol, "%ld", all_wrong);
            else
                snprintf(wcol, sizeof wcol, "N/A");
            printf(" %11ld %12d %8s %6s %6s %10.1f %7.4f %7.4f %6s\n", size, count, "float", "sum",
                   "-1", slowest, algbw, busbw, wcol);
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
