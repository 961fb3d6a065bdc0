/*
 * Build-time generator of rgapsd.json(5) (man/meson.build): copies the mdoc
 * template and replaces its four marker lines with the keys as rgapsd itself
 * knows them, so the manual cannot drift from the configuration:
 *
 *   .\" @DAEMON_KEYS@       the daemon table of src/daemon/config_file.c
 *   .\" @DISCOVERY_KEYS@    the table of its "discovery" object
 *   .\" @TOPIC_KEYS@        the topic table
 *   .\" @TRANSPORT_OPTIONS@ the options each transport plugin given on the
 *                           command line declares (struct rgaps_plugin_option)
 *
 *   gen-config-man TEMPLATE [PLUGIN.so...] > rgapsd.json.5
 *
 * Each key becomes an .It entry: its type and bounds, its default as written
 * in a file, then its description one sentence per line (mdoc's rule, so that
 * groff spaces sentences right). Text is escaped for roff.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_file.h"
#include "plugin_loader.h"
#include "rgaps/plugin.h"

/* One roff text line: backslashes escaped, and no control character in front. */
static void put_line(FILE *out, const char *s, size_t n)
{
	if (n && (s[0] == '.' || s[0] == '\''))
		fputs("\\&", out);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\')
			fputs("\\e", out);
		else
			fputc(s[i], out);
	}
	fputc('\n', out);
}

/* Text as roff text lines of at most TEXT_WIDTH bytes, broken at spaces (mandoc's style). */
#define TEXT_WIDTH 78
static void put_text(FILE *out, const char *s, size_t n)
{
	while (n > TEXT_WIDTH) {
		size_t cut = TEXT_WIDTH;

		while (cut > 0 && s[cut] != ' ')
			cut--;
		if (cut == 0) { /* one word longer than a line: keep it whole */
			cut = TEXT_WIDTH;
			while (cut < n && s[cut] != ' ')
				cut++;
			if (cut == n)
				break;
		}
		put_line(out, s, cut);
		while (cut < n && s[cut] == ' ')
			cut++;
		s += cut;
		n -= cut;
	}
	if (n)
		put_line(out, s, n);
}

/* A sentence ends at ". " (or "? ", "! ") before a capital letter or a quote. */
static void put_sentences(FILE *out, const char *s)
{
	const char *start = s;

	for (const char *p = s; *p; p++) {
		if ((p[0] == '.' || p[0] == '?' || p[0] == '!') && p[1] == ' ' &&
		    ((p[2] >= 'A' && p[2] <= 'Z') || p[2] == '"')) {
			put_text(out, start, (size_t)(p + 1 - start));
			start = p + 2;
			p++;
		}
	}
	if (*start)
		put_text(out, start, strlen(start));
}

/* Milliseconds are the unit of every key whose name ends in _ms (rgapsd.json(5) "UNITS"). */
static const char *unit_of(const char *name, const char *type)
{
	size_t n = strlen(name);

	if (n > 3 && strcmp(name + n - 3, "_ms") == 0)
		return "milliseconds";
	if (strncmp(type, "size,", 5) == 0)
		return "bytes";
	return NULL;
}

static void put_keys(FILE *out, enum rgaps_config_table_id table)
{
	struct rgaps_config_key_doc kd;
	char line[512];

	fputs(".Bl -tag -width Ds\n", out);
	for (size_t i = 0; rgapsd_config_key_doc(table, i, &kd); i++) {
		const char *unit = unit_of(kd.name, kd.type);

		fprintf(out, ".It Cm %s\n", kd.name);
		snprintf(line, sizeof(line), "Type: %s%s%s%s.", kd.type, unit ? " (" : "",
			 unit ? unit : "", unit ? ")" : "");
		put_text(out, line, strlen(line));
		fputs(".br\n", out);
		snprintf(line, sizeof(line), "Default: %s.", kd.def);
		put_text(out, line, strlen(line));
		if (table == RGAPS_CONFIG_TOPIC && kd.topic_only) {
			fputs(".br\n", out);
			snprintf(line, sizeof(line), "Only in a topic file, not in \"defaults\".");
			put_text(out, line, strlen(line));
		}
		fputs(".Pp\n", out);
		put_sentences(out, kd.doc);
	}
	fputs(".El\n", out);
}

/* PATH is <dir>/transport-<name>.so: load it the way rgapsd does and list its options. */
static int put_plugin(FILE *out, const char *path)
{
	char *copy = strdup(path), *copy2 = strdup(path), *base, *dir, name[64], err[512];
	const struct rgaps_plugin_option *o;
	struct rgaps_loaded_plugin *lp;
	uint32_t n;
	int r = -EINVAL;

	if (!copy || !copy2)
		goto out;
	base = basename(copy);
	dir = dirname(copy2);
	if (sscanf(base, "transport-%63[^.].so", name) != 1) {
		fprintf(stderr, "gen-config-man: %s is not named transport-NAME.so\n", path);
		goto out;
	}
	r = rgaps__plugin_load(dir, RGAPS_PLUGIN_TRANSPORT, name, &lp, err, sizeof(err));
	if (r) {
		fprintf(stderr, "gen-config-man: %s\n", err);
		goto out;
	}
	o = rgaps__plugin_options(lp, &n);
	fprintf(out, ".It Cm %s\n", name);
	if (!n) {
		put_text(out, "No options.", strlen("No options."));
	} else {
		fputs(".Bl -tag -width Ds\n", out);
		for (uint32_t k = 0; k < n; k++) {
			char line[512];

			fprintf(out, ".It Cm %s\n", o[k].name);
			snprintf(line, sizeof(line), "Integer, %llu..%llu; default %llu.",
				 (unsigned long long)o[k].min, (unsigned long long)o[k].max,
				 (unsigned long long)o[k].def);
			put_text(out, line, strlen(line));
			fputs(".br\n", out);
			put_sentences(out, o[k].doc);
		}
		fputs(".El\n", out);
	}
	rgaps__plugin_unload(lp);
	r = 0;
out:
	free(copy);
	free(copy2);
	return r;
}

int main(int argc, char **argv)
{
	char line[4096];
	int seen = 0, r = 0;
	FILE *in;

	if (argc < 2) {
		fprintf(stderr, "usage: gen-config-man TEMPLATE [transport-NAME.so...]\n");
		return 2;
	}
	in = fopen(argv[1], "r");
	if (!in) {
		fprintf(stderr, "gen-config-man: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), in)) {
		if (strcmp(line, ".\\\" @DAEMON_KEYS@\n") == 0) {
			put_keys(stdout, RGAPS_CONFIG_DAEMON);
			seen |= 1;
		} else if (strcmp(line, ".\\\" @DISCOVERY_KEYS@\n") == 0) {
			put_keys(stdout, RGAPS_CONFIG_DISCOVERY);
			seen |= 8;
		} else if (strcmp(line, ".\\\" @TOPIC_KEYS@\n") == 0) {
			put_keys(stdout, RGAPS_CONFIG_TOPIC);
			seen |= 2;
		} else if (strcmp(line, ".\\\" @TRANSPORT_OPTIONS@\n") == 0) {
			if (argc == 2) {
				puts("This build has no transport plugins.");
			} else {
				fputs(".Bl -tag -width Ds\n", stdout);
				for (int i = 2; i < argc && !r; i++)
					r = put_plugin(stdout, argv[i]);
				fputs(".El\n", stdout);
			}
			seen |= 4;
		} else {
			fputs(line, stdout);
		}
	}
	fclose(in);
	if (r)
		return 1;
	if (seen != 15) {
		fprintf(stderr, "gen-config-man: %s lacks a marker line (@DAEMON_KEYS@, "
				"@DISCOVERY_KEYS@, @TOPIC_KEYS@, @TRANSPORT_OPTIONS@)\n", argv[1]);
		return 1;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "gen-config-man: cannot write: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}
