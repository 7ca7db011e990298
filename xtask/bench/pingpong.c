/* Two processes ping-ponging a byte over two pipes, N round trips (perf bench sched pipe's shape). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    int a[2], b[2]; char c = 0;
    if (pipe(a) || pipe(b)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        for (long i = 0; i < n; i++) { if (read(a[0], &c, 1) != 1) _exit(1); if (write(b[1], &c, 1) != 1) _exit(1); }
        _exit(0);
    }
    for (long i = 0; i < n; i++) { if (write(a[1], &c, 1) != 1) return 1; if (read(b[0], &c, 1) != 1) return 1; }
    waitpid(pid, 0, 0);
    return 0;
}
