# Clean Debian roots for the packaging tests (packages.sh, install_source.sh),
# sourced. A root is Debian's essential set, apt (its package lists kept) and
# the packages asked for, of this host's release, made by mmdebstrap from this
# host's mirror. Each one is kept as a tarball in RGAPS_ROOT_CACHE (default
# /var/cache/rgaps-roots), named by the release and a hash of the package list,
# and made again once older than RGAPS_ROOT_MAX_DAYS (7): a test then unpacks
# it in seconds instead of fetching and unpacking every package (1-3 minutes).
#
#   root_make DIR PACKAGE...   DIR becomes such a root: 0, or 1 with the reason
#                              in ROOT_WHY, also on stderr (not root, no
#                              mmdebstrap, the mirror did not answer...);
#                              mmdebstrap's output goes to ROOT_LOG (default
#                              /dev/null)
# Needs root. Two tests that ask for the same root at once make it once (flock).
ROOT_CACHE=${RGAPS_ROOT_CACHE:-/var/cache/rgaps-roots}
ROOT_SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
ROOT_MIRROR=${RGAPS_PKG_MIRROR:-$(sed -n 's/^URIs:[[:space:]]*\([^ ]*\).*/\1/p' \
	/etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)}
ROOT_MIRROR=${ROOT_MIRROR:-http://deb.debian.org/debian}
ROOT_WHY=

root_make() {
	local dir=$1 key tarball tmp rc
	shift
	ROOT_WHY=
	if [ "$(id -u)" -ne 0 ]; then
		ROOT_WHY="needs root for mmdebstrap and chroot"
	elif ! command -v mmdebstrap >/dev/null; then
		ROOT_WHY="no mmdebstrap"
	elif [ -z "$ROOT_SUITE" ]; then
		ROOT_WHY="no VERSION_CODENAME in /etc/os-release"
	fi
	[ -z "$ROOT_WHY" ] || { echo "$ROOT_WHY" >&2; return 1; }
	key=$(printf '%s\n' "$ROOT_SUITE" "$ROOT_MIRROR" $(printf '%s\n' "$@" | sort -u) |
		sha256sum | cut -c1-16)
	tarball="$ROOT_CACHE/$ROOT_SUITE-$key.tar"
	mkdir -p "$ROOT_CACHE" || { ROOT_WHY="cannot make $ROOT_CACHE"; return 1; }
	(
		flock 9
		# roots of other package lists, or too old to use: gone
		find "$ROOT_CACHE" -maxdepth 1 -name '*.tar' -mtime +"${RGAPS_ROOT_MAX_DAYS:-7}" -delete
		if [ -z "$(find "$tarball" -mtime -"${RGAPS_ROOT_MAX_DAYS:-7}" 2>/dev/null)" ]; then
			tmp="$ROOT_CACHE/.$$-$(basename "$tarball")" # a tarball: mmdebstrap goes by the name
			# --skip=cleanup/apt/lists: apt in the root can still install what it lacks
			if ! mmdebstrap --variant=apt --include="$(IFS=,; echo "$*")" \
				--skip=cleanup/apt/lists "$ROOT_SUITE" "$tmp" "$ROOT_MIRROR" \
				>>"${ROOT_LOG:-/dev/null}" 2>&1; then
				rm -rf --one-file-system "$tmp"
				exit 2
			fi
			mv -f "$tmp" "$tarball"
		fi
	) 9>"$ROOT_CACHE/.lock"
	rc=$?
	if [ $rc -ne 0 ]; then
		ROOT_WHY="mmdebstrap $ROOT_SUITE from $ROOT_MIRROR failed: $(grep -E '^E: ' \
			"${ROOT_LOG:-/dev/null}" 2>/dev/null | tail -n 1)"
		echo "$ROOT_WHY" >&2
		return 1
	fi
	mkdir -p "$dir" && tar -C "$dir" --numeric-owner -xpf "$tarball" ||
		{ ROOT_WHY="cannot unpack $tarball into $dir"; echo "$ROOT_WHY" >&2; return 1; }
}
