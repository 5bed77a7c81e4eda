// SPDX-License-Identifier: MIT
/*
 * djinnd's configuration: a relative path given on the command line is
 * taken against the directory djinnd started in (c->flag_dir, set by
 * main.c), while a file's paths keep the file's rules.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

/* A fresh configuration whose flags start in /start. */
static void init(struct djinnd_config *c)
{
	config_init(c);
	c->flag_dir = "/start";
}

static void test_dirs_and_files(void **state)
{
	struct djinnd_config c;

	init(&c);
	assert_int_equal(config_set(&c, "server.model_dir", "models"), 0);
	assert_string_equal(c.srv.model_dir, "/start/models");
	assert_int_equal(config_set(&c, "server.model_dir", "./m/../n"), 0);
	assert_string_equal(c.srv.model_dir, "/start/m/../n");
	assert_int_equal(config_set(&c, "server.model_dir", "."), 0);
	assert_string_equal(c.srv.model_dir, "/start");
	assert_int_equal(config_set(&c, "server.model_dir", "/srv/m"), 0);
	assert_string_equal(c.srv.model_dir, "/srv/m");
	assert_int_equal(config_set(&c, "log.file", "d.log"), 0);
	assert_string_equal(c.log_file, "/start/d.log");
	assert_int_equal(config_set(&c, "log.file", ""), 0);
	assert_null(c.log_file);
	assert_int_equal(config_set(&c, "tls.certificate", "pki/c.pem"), 0);
	assert_string_equal(c.srv.tls_cert, "/start/pki/c.pem");
	/* not paths */
	assert_int_equal(config_set(&c, "memory.budget", "64M"), 0);
	assert_int_equal(config_set(&c, "device.backend", "cpu"), 0);
	assert_string_equal(c.srv.backend, "cpu");
	config_free(&c);

	/* a root directory gives no double slash */
	config_init(&c);
	c.flag_dir = "/";
	assert_int_equal(config_set(&c, "server.model_dir", "models"), 0);
	assert_string_equal(c.srv.model_dir, "/models");
	config_free(&c);
}

static void test_sockets(void **state)
{
	struct djinnd_config c;
	char longp[200];

	init(&c);
	assert_int_equal(config_set(&c, "server.listen", "unix:run/d.sock"), 0);
	assert_int_equal(config_set(&c, "server.listen", "unix:@abstract"), 0);
	assert_int_equal(config_set(&c, "server.listen", "tcp::7411"), 0);
	assert_int_equal(config_set(&c, "server.listen", "unix:/abs.sock"), 0);
	assert_int_equal(c.srv.nr_listen, 4);
	assert_string_equal(c.srv.listen[0], "unix:/start/run/d.sock");
	assert_string_equal(c.srv.listen[1], "unix:@abstract");
	assert_string_equal(c.srv.listen[2], "tcp::7411");
	assert_string_equal(c.srv.listen[3], "unix:/abs.sock");
	assert_int_equal(config_set(&c, "server.admin_socket", "./a.sock"), 0);
	assert_string_equal(c.srv.admin_socket, "/start/a.sock");
	/* 104 bytes fit in sun_path, /start/ and them do not: as given */
	memset(longp, 'x', 104);
	longp[104] = 0;
	assert_int_equal(config_set(&c, "server.admin_socket", longp), 0);
	assert_string_equal(c.srv.admin_socket, longp);
	assert_int_equal(config_validate(&c), 0);
	config_free(&c);
}

/* The file's rule stays: model_dir must be absolute there. */
static void test_file_unchanged(void **state)
{
	char dir[] = "/tmp/test_config_paths.XXXXXX", path[300];
	struct djinnd_config c;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/d.conf", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[server]\nmodel_dir = models\n", f);
	assert_int_equal(fclose(f), 0);
	init(&c);
	assert_int_equal(config_load(&c, path), -EINVAL);
	assert_non_null(strstr(c.err, "'models' is not an absolute path"));
	config_free(&c);
	/* and without a flag_dir, a flag's too (as tests and tools use it) */
	config_init(&c);
	assert_int_equal(config_set(&c, "server.model_dir", "models"), -EINVAL);
	assert_non_null(strstr(c.err, "'models' is not an absolute path"));
	config_free(&c);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dirs_and_files),
		cmocka_unit_test(test_sockets),
		cmocka_unit_test(test_file_unchanged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
