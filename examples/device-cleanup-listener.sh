#!/bin/bash
# device-cleanup-listener: a sample cleanup workflow for one-time-use
# passthrough devices (hostctl serve --device-spec, one_time_use: true).
#
# hostctl never hands a one-time-use device to a second instance: when the
# instance that used it is deleted, the device stays reserved ("burned",
# reserved == total, used == 0) until an operator says it is clean. This
# listener is that operator, automated: it follows hostctl's "devices"
# event stream, wipes every device that is released burned, and then runs
# `hostctl device clean ADDR`, which puts it back into the pool.
#
# Events can be missed (the listener was down, the event was lost in a
# crash), so it also sweeps `hostctl device list --needs-cleaning` when it
# starts and every $SWEEP_SECONDS. Cleaning is idempotent: a device cleaned
# twice is simply clean.
#
# Run it on each host, next to hostctl serve (it talks to that host's
# daemon: $VMETA_SOCKET or /run/vmeta/hostctl.sock), under systemd with
# Restart=always. Needs bash and jq.
#
# The wipe below is SIMULATED: it only logs what it would do. Replace wipe()
# with your hardware's procedure, and make it fail (non-zero) when the
# device must not go back into the pool: the device then stays burned and
# shows up in `hostctl device list --needs-cleaning` for a human.
set -uo pipefail

HOSTCTL=${HOSTCTL:-hostctl}
SWEEP_SECONDS=${SWEEP_SECONDS:-300}
# Where the ID of the last event handled is kept, so a restart continues
# after it (empty: from the oldest event the stream still has).
STATE_FILE=${STATE_FILE:-}

log() { printf '%s device-cleanup-listener: %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

# wipe ADDRESS CLASS VENDOR:PRODUCT — make the device safe for the next
# tenant. CLASS is the PCI class code (six hex digits) from the record.
wipe() {
	local addr=$1 class=$2 ids=$3
	case $class in
	02*)
		# A NIC: the tenant may have flashed its firmware. Re-write known-good
		# firmware and settings, e.g. for a Mellanox ConnectX:
		#   mstflint -d "$addr" -i /srv/firmware/fw-ConnectX6Dx.bin -y burn
		#   mstconfig -d "$addr" -y reset
		# then verify the running firmware version and PSID.
		log "SIMULATED: re-flash known-good firmware on NIC $addr ($ids)"
		;;
	03*)
		# A GPU: memory may hold the tenant's data. Reset the device and
		# zero its memory, e.g. for an NVIDIA GPU bound back to its driver:
		#   nvidia-smi -i "$addr" --gpu-reset
		# or run a scrubber that allocates and zeroes all VRAM in a
		# throwaway guest; check ECC error counters before returning it.
		log "SIMULATED: reset and zero the memory of GPU $addr ($ids)"
		;;
	0108*)
		# An NVMe drive: storage must be erased. Crypto-erase or sanitize
		# the namespace, then check wear before returning it:
		#   nvme format /dev/nvmeX --ses=2        # cryptographic erase
		#   nvme sanitize /dev/nvmeX --sanact=4   # or block-erase sanitize
		#   nvme smart-log /dev/nvmeX | grep percentage_used
		# (refuse, by returning 1, when percentage_used is over your threshold).
		log "SIMULATED: crypto-erase NVMe drive $addr ($ids) and check its wear"
		;;
	*)
		log "SIMULATED: reset device $addr ($ids, class $class)"
		;;
	esac
	return 0
}

# clean_device ADDRESS CLASS IDS: wipe, then tell hostctl it is clean.
clean_device() {
	local addr=$1 class=$2 ids=$3
	if ! wipe "$addr" "$class" "$ids"; then
		log "wipe of $addr failed: it stays burned and needs a human (hostctl device show $addr)"
		return 0
	fi
	if out=$("$HOSTCTL" device clean "$addr" 2>&1); then
		log "cleaned $addr: $out"
	else
		log "hostctl device clean $addr failed: $out"
	fi
}

# sweep: clean every device that needs cleaning now.
sweep() {
	local list
	if ! list=$("$HOSTCTL" device list --needs-cleaning --output json); then
		log "hostctl device list --needs-cleaning failed"
		return 0
	fi
	jq -r '.devices[] | [.address, (.class // ""), (.vendor_id + ":" + .product_id)] | @tsv' <<<"$list" |
		while IFS=$'\t' read -r addr class ids; do
			clean_device "$addr" "$class" "$ids"
		done
}

# Stop the whole process group (the follower, the sweeper) on TERM/INT.
trap 'trap "" TERM INT; kill -- -$$ 2>/dev/null; exit 0' TERM INT

sweep
(
	while sleep "$SWEEP_SECONDS"; do sweep; done
) &

after=""
if [[ -n $STATE_FILE && -s $STATE_FILE ]]; then
	after=$(<"$STATE_FILE")
fi
log "following the devices stream${after:+ after $after}"
"$HOSTCTL" events follow devices ${after:+--after "$after"} --output json |
	while IFS= read -r line; do
		# Only a burned device released by its instance needs cleaning;
		# device.burned, device.cleaned and device.cleanup_hook are logged.
		fields=$(jq -r '[.id, .type, .payload.address, (.payload.needs_cleaning|tostring),
			(.payload.class // ""), (.payload.vendor_id + ":" + .payload.product_id)] | @tsv' <<<"$line") || {
			log "not an event, skipped: $line"
			continue
		}
		IFS=$'\t' read -r id type addr needs class ids <<<"$fields"
		log "event $id: $type $addr"
		if [[ $type == device.released && $needs == true ]]; then
			clean_device "$addr" "$class" "$ids"
		fi
		if [[ -n $STATE_FILE ]]; then
			printf '%s\n' "$id" >"$STATE_FILE.tmp" && mv "$STATE_FILE.tmp" "$STATE_FILE"
		fi
	done &
# In the background, so that bash runs the TERM trap at once (it defers
# traps while a foreground pipeline runs).
wait $!
log "the event stream ended (hostctl stopped?); exiting so that systemd restarts the listener"
trap "" TERM INT
kill -- -$$ 2>/dev/null
exit 1
