/*
 * rgapsd entry point: command line, configuration, then the one libuv loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/plugin_loader.h"
#include "daemon.h"
#include "remote.h"
#include "rgaps_build_config.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rgapsd [options]\n"
		"  -c, --config FILE      daemon configuration (default %s if it exists)\n"
		"  -s, --socket PATH      control socket (overrides the configuration)\n"
		"  -l, --log-level LEVEL  error, warn, info, debug, trace\n"
		"  -i, --instance NAME    this daemon's name in stats (default: from the socket)\n"
		"  -p, --plugin-dir DIR   where plugins are\n"
		"  -b, --background       return once the socket serves (rgapsd goes on in the\n"
		"                         background; exit 1, saying why, if it does not start)\n"
		"      --check-config     load and validate the configuration, then exit\n"
		"      --help-config      list every configuration key\n"
		"  -V, --version          print the version\n"
		"  -h, --help             this text\n",
		rgapsd_config_default_path);
}

/*
 * --background: fork before anything starts. The parent waits for a byte on a pipe
 * that the child writes once it serves, then says where and exits 0; it exits 1
 * if the child could not start (the child said why on the stderr they share) or
 * died. The child leaves the terminal's session and returns the pipe's write end.
 */
static int go_background(const char *socket_path)
{
	ssize_t n;
	pid_t pid;
	int p[2], nul;
	char c = 0;

	if (pipe2(p, O_CLOEXEC) < 0) {
		fprintf(stderr, "rgapsd: --background: pipe: %s\n", strerror(errno));
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "rgapsd: --background: fork: %s\n", strerror(errno));
		exit(1);
	}
	if (pid > 0) {
		close(p[1]);
		do
			n = read(p[0], &c, 1);
		while (n < 0 && errno == EINTR);
		if (n != 1 || c != 'R') {
			fprintf(stderr, "rgapsd: did not start (pid %d)\n", (int)pid);
			exit(1);
		}
		printf("rgapsd: serving %s in the background, pid %d\n", socket_path, (int)pid);
		exit(0);
	}
	close(p[0]);
	setsid();
	nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		close(nul);
	}
	return p[1];
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "instance", required_argument, NULL, 'i' },
		{ "plugin-dir", required_argument, NULL, 'p' },
		{ "background", no_argument, NULL, 'b' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "help-config", no_argument, NULL, 'H' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *config = NULL, *sock = NULL, *level = NULL, *instance = NULL, *pdir = NULL;
	struct rgapsd_config cfg;
	static struct rgapsd d;
	bool check = false, background = false;
	int c, r, ready_fd = -1;
	char err[1024];
	uv_loop_t loop;

	rgaps__log_set_prefix("rgapsd");
	while ((c = getopt_long(argc, argv, "c:s:l:i:p:bVh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 's':
			sock = optarg;
			break;
		case 'l':
			level = optarg;
			break;
		case 'i':
			instance = optarg;
			break;
		case 'p':
			pdir = optarg;
			break;
		case 'C':
			check = true;
			break;
		case 'b':
			background = true;
			break;
		case 'H': {
			struct rgapsd_registry reg;
			char why[512];

			rgapsd_config_print_help(stdout);
			if (rgapsd_registry_scan(&reg, rgaps__plugin_default_dir(), why,
						 sizeof(why)) == 0) {
				rgapsd_remote_print_options(stdout, &reg);
				rgapsd_registry_free(&reg);
			} else {
				printf("\nPlugins: %s\n", why);
			}
			return 0;
		}
		case 'V':
			printf("rgapsd %s\n", RGAPS_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rgapsd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (level && rgaps__log_level_parse(level) < 0) {
		fprintf(stderr, "rgapsd: --log-level: unknown level '%s'\n", level);
		return 2;
	}
	r = rgapsd_config_load(config, &cfg, err, sizeof(err));
	if (r) {
		fprintf(stderr, "rgapsd: configuration refused: %s\n", err);
		rgapsd_config_free(&cfg);
		return 1;
	}
	rgaps__log_level = level ? rgaps__log_level_parse(level) : cfg.log_level;
	if (sock) {
		if (strlen(sock) > RGAPS_SOCKET_PATH_MAX) {
			fprintf(stderr, "rgapsd: --socket: path longer than %d bytes\n",
				RGAPS_SOCKET_PATH_MAX);
			rgapsd_config_free(&cfg);
			return 2;
		}
		snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", sock);
	}
	if (instance)
		snprintf(cfg.instance, sizeof(cfg.instance), "%s", instance);
	if (pdir)
		snprintf(cfg.plugin_dir, sizeof(cfg.plugin_dir), "%s", pdir);
	if (check) {
		struct rgapsd_registry reg;

		/* The same checks as at start: plugin names against what the plugin
		 * directory holds, then each transport's options against its declaration. */
		r = rgapsd_registry_scan(&reg,
					 cfg.plugin_dir[0] ? cfg.plugin_dir : rgaps__plugin_default_dir(),
					 err, sizeof(err));
		if (!r) {
			r = rgapsd_registry_check(&reg, &cfg, err, sizeof(err));
			if (!r)
				r = rgapsd_remote_check_options(&cfg, &reg, err, sizeof(err));
			rgapsd_registry_free(&reg);
		}
		if (r)
			fprintf(stderr, "rgapsd: configuration refused: %s: %s\n",
				cfg.source[0] ? cfg.source : "configuration", err);
		else
			printf("configuration OK: %u topic%s\n", cfg.ntopics,
			       cfg.ntopics == 1 ? "" : "s");
		rgapsd_config_free(&cfg);
		return r ? 1 : 0;
	}
	signal(SIGPIPE, SIG_IGN);
	/* A segment beyond the file size limit (ulimit -f) is a refused attach, not our death. */
	signal(SIGXFSZ, SIG_IGN);
	/* Before any thread exists: the parent waits here until the child serves. */
	if (background)
		ready_fd = go_background(cfg.socket_path);

	uv_loop_init(&loop);
	r = rgapsd_init(&d, &loop, &cfg);
	if (ready_fd >= 0) {
		/* Serving (the parent exits 0), or not (EOF: it exits 1; the reason is on stderr). */
		if (r == 0 && write(ready_fd, "R", 1) != 1)
			rgaps_warn("--background: cannot tell the parent: %s", strerror(errno));
		close(ready_fd);
	}
	if (r == 0) {
		uv_run(&loop, UV_RUN_DEFAULT);
		rgapsd_fini(&d);
	}
	if (uv_loop_close(&loop) != 0) {
		/* Only reachable after a failed init: close what it left, then retry. */
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
	}
	rgapsd_config_free(&cfg);
	rgaps_info("stopped");
	return r ? 1 : 0;
}
