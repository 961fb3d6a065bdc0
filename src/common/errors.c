/*
 * The table of stable wire error codes (see errors.h). Adding a row is fine;
 * renaming or removing one breaks clients and is never done. Also, for
 * librgaps, the reason for a thread's last failure in words (rgaps_strerror()),
 * among them why a connect(2) to the daemon's socket failed.
 */
#include "errors.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "util.h"

static const struct {
	int err;
	const char *name;
} errcodes[] = {
	{ EBADMSG, "bad_frame" },	    /* frame or JSON that cannot be parsed */
	{ EMSGSIZE, "too_large" },	    /* frame or message over its limit */
	{ EPROTO, "bad_request" },	    /* well-formed JSON, wrong fields */
	{ EOPNOTSUPP, "unknown_request" },  /* no such request type */
	{ EINVAL, "invalid" },		    /* a field's value is refused */
	{ ENOENT, "not_found" },	    /* no such topic / attachment */
	{ EACCES, "denied" },		    /* allow-list or permissions */
	{ EEXIST, "exists" },		    /* already attached / already there */
	{ ENOMEM, "no_memory" },	    /* the daemon is out of memory */
	{ ENOSPC, "no_space" },		    /* no free slot (subscribers, publishers) */
	{ EBUSY, "busy" },		    /* resource in use */
	{ EPROTONOSUPPORT, "version" },	    /* protocol version mismatch */
	{ ENOTCONN, "not_attached" },	    /* request needs an attachment first */
	{ EAGAIN, "again" },		    /* try later */
	{ ETIMEDOUT, "timeout" },	    /* an operation timed out */
	{ ENOTSUP, "not_supported" },	    /* plugin lacks the operation */
	{ ENODEV, "no_device" },	    /* memory or transport device missing */
	{ ECONNRESET, "peer_gone" },	    /* peer daemon disconnected */
	{ EIO, "internal" },		    /* anything else */
	{ ENFILE, "limit" },		    /* a daemon-wide limit (max_connections, max_topics) */
	{ EDQUOT, "quota" },		    /* a per-user limit (connections, topics) */
};

const char *rgaps__errcode_name(int err)
{
	err = abs(err);
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(errcodes); i++)
		if (errcodes[i].err == err)
			return errcodes[i].name;
	return "internal";
}

int rgaps__errcode_errno(const char *name)
{
	for (size_t i = 0; name && i < RGAPS_ARRAY_SIZE(errcodes); i++)
		if (strcmp(errcodes[i].name, name) == 0)
			return errcodes[i].err;
	return EIO;
}

/* ------------------------------------------------------------------------ */
/* librgaps: why the daemon's socket could not be reached                   */

#define REASON_TEXT_MAX 768

static __thread struct {
	int err; /* the errno reported (positive); 0: none kept */
	char text[REASON_TEXT_MAX];
} last_reason;

int rgaps__reason_set(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_reason.text, sizeof(last_reason.text), fmt, ap);
	va_end(ap);
	last_reason.err = abs(err);
	return err;
}

void rgaps__reason_clear(void)
{
	last_reason.err = 0;
}

const char *rgaps__reason_text(int err)
{
	return err && abs(err) == last_reason.err ? last_reason.text : NULL;
}

/* True if this process holds group gid, as its effective or a supplementary group. */
static bool holds_group(gid_t gid)
{
	gid_t groups[256];
	int n;

	if (getegid() == gid)
		return true;
	n = getgroups((int)RGAPS_ARRAY_SIZE(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/*
 * Group gid's name (else its number) into name; *listed: the group file names
 * this process's user (login) as a member; user: that user's name, or "$USER".
 */
static void group_of(gid_t gid, char *name, size_t len, bool *listed, char *user, size_t ulen)
{
	struct group gr, *g = NULL;
	struct passwd pw, *p = NULL;
	char gbuf[4096], pbuf[1024];

	*listed = false;
	snprintf(user, ulen, "$USER");
	if (getpwuid_r(geteuid(), &pw, pbuf, sizeof(pbuf), &p) == 0 && p)
		snprintf(user, ulen, "%s", p->pw_name);
	if (getgrgid_r(gid, &gr, gbuf, sizeof(gbuf), &g) != 0 || !g) {
		snprintf(name, len, "%u", (unsigned)gid);
		return;
	}
	snprintf(name, len, "%s", g->gr_name);
	for (char **m = g->gr_mem; p && m && *m; m++)
		if (strcmp(*m, p->pw_name) == 0)
			*listed = true;
}

/*
 * The first directory on path that this process may not search, else the socket
 * itself if it may not write to it: true, its path in buf and its stat in st.
 */
static bool find_denied(const char *path, char *buf, size_t len, struct stat *st, bool *is_dir)
{
	if ((size_t)snprintf(buf, len, "%s", path) >= len)
		return false;
	for (char *s = strchr(buf + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (faccessat(AT_FDCWD, buf, X_OK, AT_EACCESS) < 0 && errno == EACCES &&
		    stat(buf, st) == 0) {
			*is_dir = true;
			return true;
		}
		*s = '/';
	}
	*is_dir = false;
	return faccessat(AT_FDCWD, buf, W_OK, AT_EACCESS) < 0 && errno == EACCES &&
	       stat(buf, st) == 0;
}

/* EACCES/EPERM from connect: which object denies, and what would let this user in. */
static void explain_denied(const char *path, char *out, size_t len)
{
	char where[512], group[64], user[64];
	bool is_dir, listed;
	struct stat st;
	mode_t need;
	int n;

	if (!find_denied(path, where, sizeof(where), &st, &is_dir)) {
		snprintf(out, len, "no permission to reach rgapsd's socket %s (denied by a security "
			 "policy, or its permissions changed meanwhile)", path);
		return;
	}
	need = is_dir ? S_IXGRP : S_IWGRP;
	group_of(st.st_gid, group, sizeof(group), &listed, user, sizeof(user));
	n = snprintf(out, len, "no permission to reach rgapsd's socket %s: %s %s (mode %04o, "
		     "group %s) does not let this user %s; ", path,
		     is_dir ? "the directory" : "the socket", is_dir ? where : "itself",
		     (unsigned)(st.st_mode & 07777), group, is_dir ? "through" : "connect");
	if (n < 0 || (size_t)n >= len)
		return;
	if (!(st.st_mode & need))
		snprintf(out + n, len - (size_t)n, "only its owner (uid %u) may, so run as that "
			 "user, or ask for the mode to be widened (rgapsd(8), \"Who may connect\")",
			 (unsigned)st.st_uid);
	else if (listed && !holds_group(st.st_gid))
		snprintf(out + n, len - (size_t)n, "%s is in group %s, but this process is not "
			 "yet: log in again (or run: newgrp %s)", user, group, group);
	else
		snprintf(out + n, len - (size_t)n, "add yourself to group %s (usermod -aG %s %s), "
			 "then log in again", group, group, user);
}

int rgaps__connect_failed(int err, const char *path)
{
	char t[REASON_TEXT_MAX];
	size_t len = sizeof(t);
	int report = err;
	struct stat st;

	switch (err) {
	case ENOENT:
	case ENOTDIR:
		report = ENOENT;
		snprintf(t, len, "no rgapsd socket at %s: is rgapsd running? (systemctl status "
			 "rgapsd; for a daemon with another socket, set RGAPS_SOCKET)", path);
		break;
	case EACCES:
	case EPERM:
		report = EPERM;
		explain_denied(path, t, len);
		break;
	case ECONNREFUSED:
		if (stat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
			snprintf(t, len, "%s is %s, not rgapsd's socket: RGAPS_SOCKET (or --socket) "
				 "must name the socket itself (rgapsd's --socket, by default %s)",
				 path, S_ISDIR(st.st_mode)   ? "a directory" :
				       S_ISREG(st.st_mode) ? "a regular file" :
							     "not a socket",
				 RGAPS_DEFAULT_SOCKET);
		else
			snprintf(t, len, "nothing listens at %s: rgapsd is not running (it stopped "
				 "without removing its socket, or is just starting)", path);
		break;
	case ECONNRESET:
	case ENOTCONN:
		report = ECONNRESET;
		snprintf(t, len, "rgapsd at %s closed the connection without answering (it is "
			 "stopping, or has just died)", path);
		break;
	case ETIMEDOUT:
		snprintf(t, len, "rgapsd at %s took the connection but did not answer (stuck or "
			 "overloaded?)", path);
		break;
	case ENAMETOOLONG:
		snprintf(t, len, "rgapsd's socket path %s is longer than %zu bytes (RGAPS_SOCKET)",
			 path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		break;
	default:
		snprintf(t, len, "cannot connect to rgapsd's socket %s: %s", path, strerror(err));
		break;
	}
	return rgaps__reason_set(report, "%s", t);
}

/* ------------------------------------------------------------------------ */
/* Reason buffers                                                           */

int rgaps__fail(int code, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}
