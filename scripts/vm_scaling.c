/*
 * vm_scaling.c: which kinds of kernel work scale across this machine's
 * cores, and which the (hyper)visor serialises.
 *
 * Each workload runs alone, then as two copies at once (two processes
 * started together), and the time per iteration of each copy is printed.
 * On bare metal or a VM with hardware-assisted paging every line stays
 * about the same with two copies; under a shadow-paging hypervisor (PVM on
 * the benchmark machine, docs/benchmarks.md section 1) the lines that
 * create, fault in or tear down address spaces grow, while CPU loops and
 * syscalls do not. The sandbox forks one Python process per program, so
 * the fork lines bound what a second sandbox slot can add.
 *
 * Build and run (no dependencies beyond libc):
 *
 *     cc -O2 -o /tmp/vm_scaling scripts/vm_scaling.c && /tmp/vm_scaling
 *
 * Output: one line per workload, "name  alone  two-at-once (each copy)",
 * in the unit the line names (wall-clock time per iteration).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static const char *mapped_file = "/usr/bin/python3";

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
	perror(what);
	exit(1);
}

/* Each workload runs n iterations and returns seconds per iteration. */

static double spin(int n) {
	volatile unsigned long x = 0;
	double t = now();
	for (long i = 0; i < (long)n * 1000000L; i++) x += (unsigned long)i * i;
	return (now() - t) / n;
}

static double getppid_loop(int n) {
	double t = now();
	for (int i = 0; i < n; i++) syscall(SYS_getppid);
	return (now() - t) / n;
}

static double fresh_pages(int n) {
	double t = now();
	for (int i = 0; i < n; i++) {
		char *p = mmap(NULL, 400 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) die("mmap");
		for (int o = 0; o < 400 * PAGE; o += PAGE) p[o] = 1;
		munmap(p, 400 * PAGE);
	}
	return (now() - t) / n;
}

static double ping_pong(int n) {
	int a[2], b[2];
	char c = 0;
	if (pipe(a) || pipe(b)) die("pipe");
	pid_t k = fork();
	if (k < 0) die("fork");
	if (k == 0) {
		for (int i = 0; i < n; i++)
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) _exit(1);
		_exit(0);
	}
	double t = now();
	for (int i = 0; i < n; i++)
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) die("ping");
	double dt = (now() - t) / n;
	waitpid(k, NULL, 0);
	close(a[0]), close(a[1]), close(b[0]), close(b[1]);
	return dt;
}

/* fork + _exit + wait; with mb > 0 the process first writes mb MiB of its
 * own memory and the child writes `touch` of those pages (copy-on-write). */
static double fork_loop(int n, int mb, int touch) {
	char *p = NULL;
	if (mb) {
		p = mmap(NULL, (size_t)mb << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) die("mmap");
		memset(p, 1, (size_t)mb << 20);
	}
	double t = now();
	for (int i = 0; i < n; i++) {
		pid_t k = fork();
		if (k < 0) die("fork");
		if (k == 0) {
			for (int o = 0; o < touch * PAGE; o += PAGE) p[o] = 2;
			_exit(0);
		}
		waitpid(k, NULL, 0);
	}
	return (now() - t) / n;
}

/* The child of each fork reads up to 1,000 pages of a file mapping the
 * parent has read in full (an interpreter's text, shared by every process). */
static double file_reads(int n) {
	int fd = open(mapped_file, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) die(mapped_file);
	size_t len = (size_t)st.st_size;
	volatile char *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) die("mmap file");
	char x = 0;
	for (size_t o = 0; o < len; o += PAGE) x += p[o];
	size_t pages = len / PAGE < 1000 ? len / PAGE : 1000;
	double t = now();
	for (int i = 0; i < n; i++) {
		pid_t k = fork();
		if (k < 0) die("fork");
		if (k == 0) {
			for (size_t o = 0; o < pages * PAGE; o += PAGE) x += p[o];
			_exit(x == 127);
		}
		waitpid(k, NULL, 0);
	}
	return (now() - t) / n;
}

struct workload {
	const char *name, *unit;
	double scale; /* seconds -> unit */
	int n;
	int kind;
};

static double run(const struct workload *w) {
	switch (w->kind) {
	case 0: return spin(w->n);
	case 1: return getppid_loop(w->n);
	case 2: return fresh_pages(w->n);
	case 3: return ping_pong(w->n);
	case 4: return fork_loop(w->n, 0, 0);
	case 5: return fork_loop(w->n, 16, 400);
	default: return file_reads(w->n);
	}
}

/* Runs w in `copies` processes started together; writes each copy's time
 * per iteration to out[]. */
static void measure(const struct workload *w, int copies, double *out) {
	int fds[2][2];
	pid_t pids[2];
	for (int c = 0; c < copies; c++) {
		if (pipe(fds[c])) die("pipe");
		pids[c] = fork();
		if (pids[c] < 0) die("fork");
		if (pids[c] == 0) {
			double r = run(w);
			if (write(fds[c][1], &r, sizeof r) != sizeof r) _exit(1);
			_exit(0);
		}
		close(fds[c][1]);
	}
	for (int c = 0; c < copies; c++) {
		if (read(fds[c][0], &out[c], sizeof out[c]) != sizeof out[c]) die("result");
		close(fds[c][0]);
		waitpid(pids[c], NULL, 0);
	}
}

int main(int argc, char **argv) {
	if (argc > 1) mapped_file = argv[1];
	const struct workload ws[] = {
		{"CPU loop, 10^6 iterations", "ms", 1e3, 300, 0},
		{"getppid()", "us", 1e6, 1000000, 1},
		{"write 400 fresh pages, no fork", "ms", 1e3, 200, 2},
		{"pipe round trip between two processes", "us", 1e6, 5000, 3},
		{"fork + exit + wait, minimal process", "ms", 1e3, 400, 4},
		{"fork of a 16 MiB process, child writes 400 pages", "ms", 1e3, 200, 5},
		{"fork, child reads 1,000 pages of a file mapping", "ms", 1e3, 200, 6},
	};
	printf("%-52s %10s %20s\n", "workload (time per iteration)", "alone", "two at once (each)");
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
		double one[2], two[2];
		measure(&ws[i], 1, one);
		measure(&ws[i], 2, two);
		printf("%-49s %-2s %10.2f %9.2f %9.2f\n", ws[i].name, ws[i].unit, one[0] * ws[i].scale,
		       two[0] * ws[i].scale, two[1] * ws[i].scale);
		fflush(stdout);
	}
	return 0;
}
