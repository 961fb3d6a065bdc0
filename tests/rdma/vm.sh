#!/bin/bash
# tests/rdma/vm.sh CMD [ARGS...]
#
# The project's Soft-RoCE harness: runs CMD inside a small virtual machine
# that has a real RDMA device, rxe0 (the kernel's rdma_rxe driver on a dummy
# network device), on a host whose own kernel has no RDMA at all. CMD's
# stdout and stderr come back as they are written; its exit status is ours.
#
# How: QEMU (TCG; no KVM is needed) boots Debian's own kernel package, taken
# with `apt-get download` and never installed, from a tiny initramfs (busybox
# from busybox-static, likewise downloaded) that loads the RDMA modules,
# mounts this host's root file system read-only over 9p under an in-memory
# overlay, sets up rxe0 and runs CMD chrooted there. So the guest has the
# host's programs and libraries (libibverbs, the build tree) and nothing has
# to be built for it. The kernel and initramfs are built once and cached.
#
# In the guest:
#   - the current directory is shared read-write at the same path, as is each
#     directory of RGAPS_VM_SHARE (colon-separated); everything else written
#     is lost when the VM stops; /tmp is empty and in memory;
#   - rxe0 sits on dummy0 with two addresses, RXE_ADDR=169.254.77.1 and
#     RXE_ADDR2=169.254.77.2 (rdma_cm cannot use 127.0.0.1 with RoCE); both
#     ends of a test use the one device; the guest has no network beyond it;
#   - CMD runs as root, with this environment (RXE_DEV=rxe0, RGAPS_VM=1
#     added) and stdin from /dev/null.
#
# Environment:
#   RGAPS_VM_CACHE    where the image is kept (default /var/cache/rgaps-rxe-vm)
#   RGAPS_VM_TIMEOUT  seconds before the VM is stopped (default 1800): exit 124
#   RGAPS_VM_MEM      guest memory in MiB (default 2048)
#   RGAPS_VM_CPUS     guest CPUs (default: this host's)
#   RGAPS_VM_SHARE    more directories shared read-write, "a:b"
#   RGAPS_VM_VERBOSE  1: the guest's console on stderr
#   RGAPS_VM_NO_APT   1: never run apt-get (fail if something is missing)
#
# Exit: CMD's status; 124 on a timeout; 125 when the VM could not be made or
# booted, or rxe0 did not come up (the console's end is shown).
set -euo pipefail

IMAGE_VERSION=2 # bump when the initramfs changes
CACHE=${RGAPS_VM_CACHE:-/var/cache/rgaps-rxe-vm}
TIMEOUT=${RGAPS_VM_TIMEOUT:-1800}
MEM=${RGAPS_VM_MEM:-2048}
CPUS=${RGAPS_VM_CPUS:-$(nproc)}
VERBOSE=${RGAPS_VM_VERBOSE:-0}
MODULES="virtio_pci virtio_console 9pnet_virtio 9p overlay dummy crc32_generic rdma_rxe rdma_ucm ib_uverbs"
HOST_PACKAGES="qemu-system-x86 kmod xz-utils iproute2 libibverbs1 librdmacm1 ibverbs-providers"

die() {
	echo "rxe-vm: $*" >&2
	exit 125
}
say() { [ "$VERBOSE" = 1 ] && echo "rxe-vm: $*" >&2 || true; }

[ $# -ge 1 ] || die "usage: $0 CMD [ARGS...]"
[ "$(id -u)" = 0 ] || die "needs root (apt-get, and 9p shares that keep file owners)"
here=$(pwd -P)
[ "$here" != / ] || die "will not share / read-write: run from a project directory"

# ---------------------------------------------------------------- host packages
apt_fresh=0
apt_get() {
	[ "${RGAPS_VM_NO_APT:-0}" = 1 ] && die "missing packages and RGAPS_VM_NO_APT=1: $*"
	if ! DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
		[ $apt_fresh = 1 ] || { apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"; apt_fresh=1; }
		DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends "$@" >&2 ||
			die "apt-get $* failed"
	fi
}
missing=()
for p in $HOST_PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] || { say "installing ${missing[*]}"; apt_get install "${missing[@]}"; }

# ---------------------------------------------------------------- the image (cached)
# PID 1 of the guest (busybox sh). /ctl is the host's per-run directory.
guest_init() {
	cat <<'EOF'
#!/bin/sh
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
give_up() { echo "rxe-vm guest: $*"; echo 125 > /ctl/status; sync; poweroff -f; }
for m in /modules/*.ko; do insmod "$m" || echo "rxe-vm guest: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none ctl /ctl || give_up "no control share"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /lower || give_up "no root share"
mount -t tmpfs upper /upper && mkdir -p /upper/data /upper/work
R=/root
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay $R ||
	give_up "overlay"
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o ptmxmode=666 devpts $R/dev/pts; mount -t tmpfs shm $R/dev/shm
mount -t tmpfs -o mode=755 run $R/run
mount -t tmpfs -o mode=1777 tmp $R/tmp
while read -r tag path; do
	mkdir -p "$R$path"
	mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap "$tag" "$R$path" || give_up "share $path"
done < /ctl/shares
ip link set lo up
ip link set dummy0 mtu 9000 up || give_up "dummy0"
ip addr add 169.254.77.1/32 dev dummy0 && ip addr add 169.254.77.2/32 dev dummy0 || give_up "addresses"
chroot $R rdma link add rxe0 type rxe netdev dummy0 || give_up "rdma link add rxe0"
n=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
	n=$((n + 1)); [ $n -lt 200 ] || give_up "rxe0 did not become ACTIVE"; sleep 0.05
done
out=/dev/null; err=/dev/null
for p in /sys/class/virtio-ports/*; do
	case "$(cat "$p/name")" in
	stdout) out=/dev/${p##*/} ;;
	stderr) err=/dev/${p##*/} ;;
	esac
done
cp /ctl/run.sh $R/run/rxe-vm-run.sh
chroot $R /bin/bash /run/rxe-vm-run.sh < /dev/null > $out 2> $err
echo $? > /ctl/status.new
sync
while read -r tag path; do umount "$R$path"; done < /ctl/shares
mv /ctl/status.new /ctl/status
sync
umount /ctl
poweroff -f
EOF
}

make_image() { # DIR: the kernel (uncompressed, booted through PVH) and the initramfs
	local out=$1 w pkg kver off mods i=0
	w=$(mktemp -d /tmp/rgaps-rxe-image.XXXXXX)
	temporary+=("$w")
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	if [ -z "$pkg" ]; then
		apt_get update
		pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	fi
	[ -n "$pkg" ] || die "cannot tell which kernel linux-image-amd64 is"
	say "downloading $pkg and busybox-static"
	chmod 755 "$w"
	(cd "$w" && apt-get download -qq "$pkg" busybox-static >/dev/null 2>&1) ||
		{ apt_get update; (cd "$w" && apt-get download -qq "$pkg" busybox-static >&2) ||
			die "apt-get download $pkg busybox-static failed"; }
	dpkg-deb -x "$w"/linux-image-*.deb "$w/kernel"
	dpkg-deb -x "$w"/busybox-static_*.deb "$w/busybox"
	kver=$(ls "$w/kernel/lib/modules")
	depmod -b "$w/kernel" "$kver"
	# The bzImage holds an xz stream: the ELF vmlinux inside boots faster (no decompression).
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$w/kernel/boot/vmlinuz-$kver" | head -1 | cut -d: -f1)
	[ -n "$off" ] || die "no xz stream in vmlinuz-$kver"
	tail -c +$((off + 1)) "$w/kernel/boot/vmlinuz-$kver" | xz -dcq > "$w/vmlinux" 2>/dev/null || true
	[ -s "$w/vmlinux" ] || die "could not unpack vmlinux from vmlinuz-$kver"
	mkdir -p "$w/root/bin" "$w/root/modules" "$w"/root/{proc,sys,dev,ctl,lower,upper,root}
	cp "$w/busybox/bin/busybox" "$w/root/bin/busybox"
	ln -s busybox "$w/root/bin/sh"
	# Each module after the ones it needs, in load order.
	mods=$(for m in $MODULES; do modprobe -d "$w/kernel" -S "$kver" --show-depends "$m"; done |
		awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
	for m in $mods; do
		i=$((i + 1))
		cp "$m" "$w/root/modules/$(printf %02d $i)-${m##*/}"
	done
	guest_init > "$w/root/init"
	chmod 755 "$w/root/init"
	(cd "$w/root" && find . | "$w/busybox/bin/busybox" cpio -o -H newc -R 0:0 2>/dev/null) > "$w/initrd"
	mkdir -p "$out"
	mv "$w/vmlinux" "$w/initrd" "$out/"
	echo "$pkg $kver" > "$out/kernel"
	rm -rf "$w"
}

temporary=() # removed on exit, whatever happens
qemu_pid=
readers=()
finish() { # on exit: nothing here may change the exit status
	set +e
	[ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null
	for p in "${readers[@]}"; do kill "$p" 2>/dev/null; done
	for d in "${temporary[@]}"; do rm -rf "$d"; done
	return 0
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$CACHE"
exec 8>"$CACHE/lock"
flock 8 # one image build at a time; runs share the finished image
img=$CACHE/image-$IMAGE_VERSION
if [ ! -s "$img/initrd" ] || [ ! -s "$img/vmlinux" ]; then
	rm -rf "$img" "$img.new"
	make_image "$img.new"
	mv "$img.new" "$img"
	say "image: $(cat "$img/kernel")"
fi
flock -u 8

# ---------------------------------------------------------------- one run
ctl=$(mktemp -d /tmp/rgaps-rxe-run.XXXXXX)
temporary+=("$ctl")
chmod 755 "$ctl"
# The command, with this environment (less what belongs to this shell), run where we are.
{
	export -p | grep -vE '^declare -[a-zA-Z]*x[a-zA-Z]* (BASH[A-Z_]*|SHELLOPTS|SHLVL|PWD|OLDPWD|_|HOSTNAME|TMPDIR)(=|$)' || true
	echo "export RGAPS_VM=1 RXE_DEV=rxe0 RXE_NETDEV=dummy0 RXE_ADDR=169.254.77.1 RXE_ADDR2=169.254.77.2"
	echo "ulimit -l unlimited"
	printf 'cd %q || exit 125\n' "$here"
	printf 'exec'
	printf ' %q' "$@"
	printf '\n'
} > "$ctl/run.sh"
q() { printf '%s' "${1//,/,,}"; } # a comma in a QEMU option value is doubled
shares=(-virtfs "local,path=$(q "$here"),mount_tag=share0,security_model=passthrough,multidevs=remap")
echo "share0 $here" > "$ctl/shares"
n=0
IFS=: read -r -a extra <<< "${RGAPS_VM_SHARE:-}"
for d in "${extra[@]}"; do
	[ -n "$d" ] || continue
	d=$(cd "$d" && pwd -P) || die "RGAPS_VM_SHARE: no directory $d"
	n=$((n + 1))
	shares+=(-virtfs "local,path=$(q "$d"),mount_tag=share$n,security_model=passthrough,multidevs=remap")
	echo "share$n $d" >> "$ctl/shares"
done
mkfifo "$ctl/stdout" "$ctl/stderr"
cat "$ctl/stdout" & readers+=($!)
cat "$ctl/stderr" >&2 & readers+=($!)
touch "$ctl/console"
if [ "$VERBOSE" = 1 ]; then tail -n +1 -f "$ctl/console" >&2 & readers+=($!); fi

set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
	-machine q35 -accel tcg,thread=multi -cpu max -smp "$CPUS" -m "$MEM" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$(q "$img/vmlinux")" -initrd "$(q "$img/initrd")" \
	-append "console=ttyS0 quiet panic=-1 mitigations=off" \
	-serial "file:$ctl/console" \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap" \
	-virtfs "local,path=$(q "$ctl"),mount_tag=ctl,security_model=passthrough" \
	"${shares[@]}" \
	-device virtio-serial-pci \
	-chardev "file,id=o,path=$ctl/stdout" -device virtserialport,chardev=o,name=stdout \
	-chardev "file,id=e,path=$ctl/stderr" -device virtserialport,chardev=e,name=stderr \
	< /dev/null > "$ctl/qemu.log" 2>&1 &
qemu_pid=$!
wait "$qemu_pid"
qrc=$?
qemu_pid=
set -e
# A guest that never opened its ports leaves the readers blocked: open and close the fifos once.
exec 6<>"$ctl/stdout" 7<>"$ctl/stderr"
exec 6>&- 7>&-
wait "${readers[0]}" "${readers[1]}" 2>/dev/null || true
if [ $qrc = 124 ] || [ $qrc = 137 ]; then
	echo "rxe-vm: stopped after ${TIMEOUT} s; the console's end:" >&2
	tail -n 25 "$ctl/console" >&2
	exit 124
fi
if [ -s "$ctl/status" ]; then
	rc=$(cat "$ctl/status")
	if [ "$rc" = 125 ] && [ "$VERBOSE" != 1 ]; then
		echo "rxe-vm: the guest could not set up; the console's end:" >&2
		tail -n 25 "$ctl/console" >&2
	fi
	exit "$rc"
fi
echo "rxe-vm: the VM ended without a status (qemu exit $qrc); qemu and console:" >&2
cat "$ctl/qemu.log" >&2
tail -n 40 "$ctl/console" >&2
exit 125
