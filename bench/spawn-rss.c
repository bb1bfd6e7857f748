/* Run a command with stdout/stderr to /dev/null; print its wall time (ms, until the command
 * exits: what a shell waits for), peak RSS (KiB: the largest of the command, every child it
 * waited for, and every descendant it left behind, which this launcher adopts as a subreaper
 * and reaps after the wall time is taken) and exit code. Static and small, so that the fork's
 * copy of this launcher adds next to nothing to the RSS measured (bench/status-speed.py). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    struct timespec a, b;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t p = fork();
    if (p == 0) {
        int n = open("/dev/null", O_RDWR);
        dup2(n, 0); dup2(n, 1); dup2(n, 2);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    wait4(p, &st, 0, &ru);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long peak = ru.ru_maxrss;
    struct rusage left;
    while (wait4(-1, NULL, 0, &left) > 0)
        if (left.ru_maxrss > peak) peak = left.ru_maxrss;
    printf("%.3f %ld %d\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6,
           peak, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    return 0;
}
