/* Live threads that mostly sleep, as a JVM or Go fleet host has them: N threads, each waking
 * every PERIOD ms (at a random phase) for a few microseconds of work, for SECONDS. Used by
 * xtask/bench/scale.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: sleepers THREADS PERIOD_MS SECONDS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    period_us = atol(argv[2]) * 1000;
    int seconds = atoi(argv[3]);
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
