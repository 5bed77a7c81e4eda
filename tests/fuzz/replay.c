// SPDX-License-Identifier: MIT
/*
 * Replays a fuzz harness's corpus through its entry point, so that every
 * input that ever mattered runs in `make test` (after systemd's
 * src/fuzz/fuzz-main.c). Linked with tests/fuzz/fuzz_NAME.c into
 * replay_NAME, which reads tests/fuzz/corpus/NAME/ (relative to the
 * repository root, where tests run) or the files named on its command
 * line.
 *
 * A missing corpus directory means the test cannot run here: exit 77.
 * An empty one is a defect of the tree (the test would prove nothing):
 * exit 1. So is a file that cannot be read.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Defined by each harness. */
extern const char fuzz_name[];
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CORPUS_DIR "tests/fuzz/corpus/"

/* Read @path whole and run it; 0 or -1 after saying what failed. */
static int replay_file(const char *path)
{
	uint8_t *buf = NULL;
	struct stat st;
	size_t len;
	FILE *f;
	int ret = -1;

	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay_%s: %s: %s\n", fuzz_name, path,
			strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "replay_%s: %s: not a regular file\n",
			fuzz_name, path);
		goto out_close;
	}
	len = (size_t)st.st_size;
	/* a malloc'd copy of exactly @len bytes, as libFuzzer gives */
	buf = malloc(len ? len : 1);
	if (!buf) {
		fprintf(stderr, "replay_%s: %s: out of memory\n", fuzz_name,
			path);
		goto out_close;
	}
	if (len && fread(buf, 1, len, f) != len) {
		fprintf(stderr, "replay_%s: %s: short read\n", fuzz_name, path);
		goto out_free;
	}
	LLVMFuzzerTestOneInput(buf, len);
	ret = 0;

out_free:
	free(buf);
out_close:
	fclose(f);
	return ret;
}

static int skip_dots(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	char dir[256], path[512];
	struct dirent **names;
	int n, failed = 0;

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			failed |= replay_file(argv[i]);
		printf("replay_%s: %d inputs\n", fuzz_name, argc - 1);
		return failed ? 1 : 0;
	}

	snprintf(dir, sizeof(dir), CORPUS_DIR "%s", fuzz_name);
	n = scandir(dir, &names, skip_dots, alphasort);
	if (n < 0) {
		printf("replay_%s: skipped: no corpus at %s (%s); run from the "
		       "repository root\n",
		       fuzz_name, dir, strerror(errno));
		return 77;
	}
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		failed |= replay_file(path);
		free(names[i]);
	}
	free(names);
	if (!n) {
		fprintf(stderr, "replay_%s: %s is empty\n", fuzz_name, dir);
		return 1;
	}
	printf("replay_%s: %d inputs from %s\n", fuzz_name, n, dir);
	return failed ? 1 : 0;
}
