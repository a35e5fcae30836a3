# hostile.sh: run as root inside a sandbox of the local engine (POSIX sh, so it runs
# on the default root and on any image). It tries what an attacker tried and prints
# one line per attempt: "ok NAME DETAIL" when the sandbox refused it, "BROKEN NAME
# DETAIL" when it got through. hostile_test.go fails on any BROKEN line and on any
# missing name.
#
# Inputs (environment):
#   PROBE           the static probe (testdata/hostile/probe) inside
#   MARKERS         words that name host files the test holds open; no descriptor may name one
#   HOST_IDS        "path=dev:ino ..." of host files that must not be bound in
#   PROFILE_MARKER  a file the test put in the host's /etc/profile.d only
#   DNS_ADDR        a loopback address on which the script runs a name server
#   DNS_NAME        a name the proxy is asked for (one the host resolves from its files)
#   ROOT_KIND       "system" (the host's /usr) or "image"

ok() { echo "ok $*"; }
broken() { echo "BROKEN $*"; }

# Findings 1 and 3: descriptors of the caller or of the engine in a sandbox process.
# ls holds 0, 1, 2 and its directory (3); anything more was inherited.
fds=$(ls /proc/self/fd | tr '\n' ' ')
if [ "$fds" = "0 1 2 3 " ]; then
	ok fd-self "a new command holds only 0 1 2"
else
	broken fd-self "a new command holds descriptors $fds(want 0 1 2 3: ls's own)"
fi
"$PROBE" fds $MARKERS || broken fds "the probe failed"

# Findings 7 and 10: system calls outside Docker's default profile.
"$PROBE" syscalls || broken syscalls "the probe failed"

# Finding 5: the egress proxy must not resolve with this sandbox's files.
if [ -z "$DNS_ADDR" ] || [ -z "$HTTP_PROXY$http_proxy" ]; then
	ok resolv-conf "no egress in this sandbox: nothing resolves for it"
elif ! { echo "nameserver $DNS_ADDR" >/etc/resolv.conf; } 2>/dev/null; then
	ok resolv-conf "/etc/resolv.conf is not writable for root inside"
else
	echo "hosts: dns" >/etc/nsswitch.conf 2>/dev/null
	echo "127.0.0.1 localhost" >/etc/hosts 2>/dev/null
	rm -f /tmp/hostile-dns.log
	"$PROBE" dns "$DNS_ADDR" /tmp/hostile-dns.log 30 >/tmp/hostile-dns.out 2>&1 &
	dnspid=$!
	i=0
	while [ $i -lt 50 ] && ! grep -q listening /tmp/hostile-dns.out 2>/dev/null && kill -0 $dnspid 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	answer=$("$PROBE" proxy "$DNS_NAME" | tr '\n' ' ')
	kill $dnspid 2>/dev/null
	wait $dnspid 2>/dev/null
	if [ -s /tmp/hostile-dns.log ]; then
		broken resolv-conf "the proxy asked the sandbox's name server for: $(tr '\n' ' ' </tmp/hostile-dns.log)(answers: $answer)"
	else
		ok resolv-conf "no query reached $DNS_ADDR:53 inside ($(tr '\n' ' ' </tmp/hostile-dns.out)); answers: $answer"
	fi
fi

# Finding 9: /usr/local/bin is read-only, even for root.
if [ "$ROOT_KIND" = image ]; then
	# An image's /usr/local/bin is its own, in the overlay on the sandbox's disk.
	ok usr-local-bin "an image's own (its writes land on the sandbox's disk)"
elif touch /usr/local/bin/hostile-$$ 2>/dev/null; then
	rm -f /usr/local/bin/hostile-$$
	broken usr-local-bin "root inside created /usr/local/bin/hostile-$$"
else
	ok usr-local-bin "read-only"
fi

# Finding 10: a cgroup namespace: no host path in /proc/self/cgroup.
bad=$(grep -v ':/$' /proc/self/cgroup | tr '\n' ' ')
if [ -n "$bad" ]; then
	broken cgroupns "/proc/self/cgroup names host paths: $bad"
else
	ok cgroupns "$(tr '\n' ' ' </proc/self/cgroup)"
fi

# Finding 10: Docker's masked paths read empty (or are absent).
for p in /proc/interrupts /proc/kcore /proc/keys /proc/latency_stats /proc/timer_list /proc/timer_stats \
	/proc/sched_debug /proc/acpi /proc/asound /proc/scsi /sys/firmware /sys/devices/virtual/powercap; do
	if [ ! -e "$p" ]; then
		ok "mask:$p" "absent"
	elif [ -d "$p" ]; then
		n=$(ls -A "$p" 2>/dev/null | wc -l)
		if [ "$n" -eq 0 ]; then ok "mask:$p" "empty"; else broken "mask:$p" "lists $n entries"; fi
	else
		n=$(head -c 4096 "$p" 2>/dev/null | wc -c)
		if [ "$n" -eq 0 ]; then ok "mask:$p" "reads empty"; else broken "mask:$p" "reads $n bytes"; fi
	fi
done

# Docker's read-only paths: access(W_OK) answers EROFS on a read-only mount, so
# nothing is written to find out.
for p in /proc/bus /proc/fs /proc/irq /proc/sys /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do
	if [ ! -e "$p" ] || [ ! -w "$p" ]; then
		ok "ro:$p" "read-only"
	else
		broken "ro:$p" "writable for root inside"
	fi
done

# Finding 10: the host's /etc/gitconfig, /etc/environment and /etc/profile.d.
for kv in $HOST_IDS; do
	p=${kv%%=*}
	host=${kv#*=}
	inside=$(stat -c '%d:%i' "$p" 2>/dev/null)
	if [ "$inside" = "$host" ]; then
		broken "host-etc:$p" "is the host's (device:inode $host)"
	else
		ok "host-etc:$p" "not the host's (${inside:-absent})"
	fi
done
if [ -n "$PROFILE_MARKER" ] && [ -e "/etc/profile.d/$PROFILE_MARKER" ]; then
	broken host-profile-d "/etc/profile.d/$PROFILE_MARKER, which only the host has, is here"
else
	ok host-profile-d "the host's marker is not here"
fi

# Root inside is not root outside: uid 0 maps to a host uid other than 0.
if awk '$1 == 0 && $2 == 0 { found = 1 } END { exit !found }' /proc/self/uid_map; then
	broken userns "uid 0 inside is uid 0 on the host: $(tr '\n' ' ' </proc/self/uid_map)"
else
	ok userns "$(tr -s ' ' </proc/self/uid_map | tr '\n' ' ')"
fi

# Docker's capabilities, without CAP_MKNOD and CAP_NET_RAW: none of these.
bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
for c in 12:net_admin 13:net_raw 16:sys_module 17:sys_rawio 19:sys_ptrace 21:sys_admin 22:sys_boot 24:sys_resource 25:sys_time 27:mknod 34:syslog 38:perfmon 39:bpf; do
	bit=${c%%:*}
	if [ $(((0x$bnd >> bit) & 1)) -eq 1 ]; then
		broken "cap:${c#*:}" "in the bounding set ($bnd)"
	else
		ok "cap:${c#*:}" "not held"
	fi
done

# Devices: no block device, no way to make one.
blk=$(find /dev -type b 2>/dev/null | tr '\n' ' ')
if [ -n "$blk" ]; then broken block-devices "$blk"; else ok block-devices "none in /dev"; fi
if mknod /tmp/hostile-sda b 8 0 2>/dev/null; then
	rm -f /tmp/hostile-sda
	broken mknod "root inside made a block device"
else
	ok mknod "refused"
fi

# Mounts and the host name belong to the host's namespaces.
if mount -t tmpfs hostile /mnt 2>/dev/null; then
	umount /mnt 2>/dev/null
	broken mount "root inside mounted a tmpfs"
else
	ok mount "refused"
fi
before=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)
if hostname hostile-$$ 2>/dev/null; then
	hostname "$before" 2>/dev/null
	broken sethostname "root inside set the host name"
else
	ok sethostname "refused"
fi

# Credentials never enter a sandbox: not in init's environment either.
if [ -r /proc/1/environ ]; then
	found=$(tr '\0' '\n' </proc/1/environ | grep -iE '^[^=]*(token|secret|password|credential|api_?key)[^=]*=' | cut -d= -f1 | tr '\n' ' ')
	if [ -n "$found" ]; then broken init-environ "init's environment has $found"; else ok init-environ "no credential names"; fi
else
	ok init-environ "unreadable"
fi

echo "done"
