/* Live threads that mostly sleep, as a JVM or Go fleet host has them: N threads, each waking
 * every PERIOD ms (at a random phase) for a few microseconds of work, for SECONDS; with a
 * fourth argument `processes`, N processes of one thread each (a host of many small services),
 * and with a fifth, a file of cgroup directories, one a line: process i joins line i's cgroup
 * before it starts (a host of many containers). Used by xtask/bench/scale.sh, store-bytes.sh
 * and busy.py. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long period_us;
static volatile int stop;

static void *sleeper(void *arg) {
    volatile unsigned long spin = 0;
    /* A random first nap, so wakeups spread evenly over the period (threads start within a
     * few seconds of each other: in step, whole intervals would see none wake). */
    unsigned int seed = (unsigned int)(unsigned long)arg;
    usleep((useconds_t)(rand_r(&seed) % (period_us + 1)));
    while (!stop) {
        for (int i = 0; i < 200; i++) spin++;
        usleep(period_us);
    }
    return NULL;
}

/* Moves the calling process into cgroup directory `dir`. */
static int join(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *procs = fopen(path, "w");
    if (!procs || fputs("0", procs) < 0 || fclose(procs) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 6 || (argc >= 5 && strcmp(argv[4], "processes") != 0)) {
        fprintf(stderr, "usage: sleepers THREADS PERIOD_MS SECONDS [processes [CGROUP_LIST]]\n");
        return 2;
    }
    int n = atoi(argv[1]);
    period_us = atol(argv[2]) * 1000;
    int seconds = atoi(argv[3]);
    if (argc >= 5) {
        pid_t *children = calloc(n, sizeof *children);
        FILE *cgroups = argc == 6 ? fopen(argv[5], "r") : NULL;
        if (argc == 6 && !cgroups) {
            perror(argv[5]);
            return 1;
        }
        char cgroup[4096] = "";
        for (int i = 0; i < n; i++) {
            if (cgroups && !fgets(cgroup, sizeof cgroup, cgroups)) {
                fprintf(stderr, "%s: fewer than %d cgroups\n", argv[5], n);
                n = i;
                break;
            }
            cgroup[strcspn(cgroup, "\n")] = 0;
            children[i] = fork();
            if (children[i] == 0) {
                if (cgroups && join(cgroup) != 0) _exit(1);
                alarm(seconds);
                sleeper((void *)(unsigned long)(i + 1));
                _exit(0);
            }
            if (children[i] < 0) {
                fprintf(stderr, "process %d could not start\n", i);
                n = i;
                break;
            }
        }
        printf("started %d processes\n", n);
        fflush(stdout);
        sleep(seconds);
        for (int i = 0; i < n; i++) kill(children[i], SIGKILL);
        for (int i = 0; i < n; i++) waitpid(children[i], NULL, 0);
        return 0;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t *threads = calloc(n, sizeof *threads);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&threads[i], &attr, sleeper, (void *)(unsigned long)(i + 1)) != 0) {
            fprintf(stderr, "thread %d could not start\n", i);
            return 1;
        }
    }
    printf("started %d\n", n);
    fflush(stdout);
    sleep(seconds);
    stop = 1;
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    return 0;
}
