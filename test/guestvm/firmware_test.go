package guestvm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/testenv"
)

// fwMeasureRounds is how many times the guest applies the metadata from
// each transport for the timing figures.
const fwMeasureRounds = 7

// firmwareScript runs in both boots of TestFirmwareInBootedGuest. Boot 1
// (no config drive, no NIC): the agent loads qemu_fw_cfg itself and
// applies the tags from the firmware ("fw1:" lines). Boot 2 (a config
// drive of the same revision as the firmware): the firmware is preferred;
// the timings of firmware against config drive; broken firmware entries
// fall back to the drive ("fw2:"); then the agent runs, the host re-tags
// the running instance, the drive's new medium carries a newer revision
// than the firmware and wins ("fw3:").
const firmwareScript = `
FW=/sys/firmware/qemu_fw_cfg
E=$FW/by_name/opt/io.github.vmeta
mkdir -p /run/udev /etc/udev
[ -e $FW ] && echo "fwg: preloaded"
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120 || echo "fwg: settle-timeout"

# report P: what the agent says, the links, the fw_cfg entries as the
# guest reads them.
report() {
	P=$1
	vmeta-agent status | sed "s|^|$P: status |"
	vmeta-agent status --output json | sed "s|^|$P: json |"
	for l in /dev/disk/by-tag/*; do
		[ -e "$l" ] && printf '%s: link %s %s\n' "$P" "${l##*/}" "$(readlink -f "$l")"
	done
	for n in devices uuid revision; do
		[ -e $E/$n/raw ] && printf '%s: entry %s %s %s\n' "$P" $n "$(cat $E/$n/size)" "$(sha256sum < $E/$n/raw | cut -d' ' -f1)"
	done
	ls /sys/class/net | sed "s|^|$P: net |"
	ls /sys/block | sed "s|^|$P: block |"
}

# clear undoes what the agent applied, so that each timed pass does the
# whole work: rules written, udev reloaded, the devices triggered.
clear() {
	rm -f /run/udev/rules.d/70-vmeta-agent.rules /run/vmeta-agent/state.json
	udevadm control --reload
	udevadm trigger --action=change --subsystem-match=block --settle
}

# measure P SOURCE: one timed pass from SOURCE, from a cleared guest.
measure() {
	clear
	vmeta-agent apply --source $2 --log-level debug >/run/m.log 2>&1
	echo "$1: measure $2 rc=$? $(grep -E 'msg=applied|msg="metadata read"|level=WARN' /run/m.log | tr '\n' ' ')"
}

if [ ! -b /dev/sr0 ]; then
	P=fw1
	echo "$P: start $(cut -d' ' -f1 /proc/uptime)"
	vmeta-agent apply --log-level debug >/run/a1.log 2>&1
	echo "$P: apply rc=$?"
	sed "s/^/$P: log /" /run/a1.log
	[ -d /sys/module/qemu_fw_cfg ] && echo "$P: module-loaded"
	report $P
	i=0; while [ $i -lt ` + "FWROUNDS" + ` ]; do i=$((i+1)); measure $P firmware; done
	echo "$P: done"
else
P=fw2
vmeta-agent apply --log-level debug >/run/a2.log 2>&1
echo "$P: apply rc=$?"
sed "s/^/$P: log /" /run/a2.log
report $P
i=0; while [ $i -lt ` + "FWROUNDS" + ` ]; do i=$((i+1)); measure $P firmware; measure $P configdrive; done

# Broken firmware entries (copies of the real ones, then spoilt): the
# agent reports them and falls back to the drive; nothing is lost.
vmeta-agent apply --log-level debug >/run/a2b.log 2>&1
for bad in truncated schema missing; do
	B=/run/fw-$bad
	mkdir -p $B/by_name/opt/io.github.vmeta
	for n in devices uuid revision; do
		mkdir -p $B/by_name/opt/io.github.vmeta/$n
		cat $E/$n/raw > $B/by_name/opt/io.github.vmeta/$n/raw
		cat $E/$n/size > $B/by_name/opt/io.github.vmeta/$n/size
	done
	D=$B/by_name/opt/io.github.vmeta/devices
	case $bad in
	truncated) head -c 40 $E/devices/raw > $D/raw ;;
	schema) printf '{"devices":[{"type":"disk","bus":"pci","address":"not-an-address","tags":["x"]}]}\n' > $D/raw; wc -c < $D/raw > $D/size ;;
	missing) rm -r $D ;;
	esac
	vmeta-agent apply --firmware-dir $B --log-level debug >/run/bad.log 2>&1
	echo "$P: bad $bad rc=$?"
	sed "s/^/$P: badlog $bad /" /run/bad.log
	vmeta-agent status --output json | tr -d '\n' | sed "s|^|$P: badjson $bad |"; echo
	for l in /dev/disk/by-tag/*; do
		[ -e "$l" ] && printf '%s: badlink %s %s\n' "$P" "$bad" "${l##*/}"
	done
done
echo "$P: done"

P=fw3
vmeta-agent run --poll-interval 1h --log-level debug >/run/run.log 2>&1 &
AGENT=$!
i=0
until grep -qE 'msg=applied|msg="nothing to change"' /run/run.log; do
	i=$((i+1)); [ $i -gt 900 ] && { echo "$P: agent-timeout"; break; }
	sleep 0.2
done
echo "$P: waiting-retag"
i=0
while [ ! -e /dev/disk/by-tag/fw-db2 ]; do
	i=$((i+1)); [ $i -gt 600 ] && { echo "$P: retag-timeout"; break; }
	sleep 0.2
done
udevadm settle --timeout=60
echo "$P: poll sr0=$(cat /sys/block/sr0/events_poll_msecs) default=$(cat /sys/module/block/parameters/events_dfl_poll_msecs)"
report $P
kill $AGENT
wait $AGENT
sed "s/^/$P: log /" /run/run.log
echo "$P: done"
fi
`

func firmwareSpec(name string, drive bool, dbTag string) string {
	return fmt.Sprintf(`name: %s
config_drive: %t
disks:
  - {name: vda, size: 16M, serial: fw-vda, tag: fw-root}
  - {name: sda, bus: scsi, size: 16M, serial: fw-sda, tag: %s}
`, name, drive, dbTag)
}

// TestFirmwareInBootedGuest: the third transport end to end. hostctl
// (serve --firmware-metadata on) writes the fw_cfg entries into the
// instance directory and the persistent definition; the guest, booted
// under TCG with no config drive and no NIC, loads qemu_fw_cfg and applies
// the tags from the firmware, reading byte for byte what the host wrote.
// The instance then gets a config drive (revision 2; the firmware's
// entries are redefined only if what they carry changed, else the drive
// is the newest), the guest measures both
// transports and falls back to the drive from broken firmware entries,
// and a re-tag of the running instance (revision 3, the drive's new
// medium) wins over the firmware, which stays at its boot's revision
// until the next boot — as `hostctl instance show` says.
func TestFirmwareInBootedGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	for _, p := range []string{udevadmBin, ipBin, findmntBin, "/usr/lib/udev/scsi_id"} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev, iproute2 and util-linux (test/setup)")
		}
	}
	testenv.LookPath(t, "qemu-img")
	kver, err := os.ReadFile(filepath.Join(testenv.GuestKernelDir, "version"))
	module := filepath.Join(testenv.GuestKernelDir, "extra", "qemu_fw_cfg.ko")
	if _, merr := os.Stat(module); err != nil || merr != nil {
		testenv.Require(t, "qemu_fw_cfg.ko", fmt.Sprintf("%s is missing (test/setup copies it from the guest kernel's package)", module))
	}

	work := t.TempDir()
	agentBin := buildAgent(t, work)
	hostctlBin := buildHostctl(t, work)
	script := strings.ReplaceAll(firmwareScript, "FWROUNDS", strconv.Itoa(fwMeasureRounds))
	extra := []testenv.GuestFile{
		{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755},
		// Where modprobe and the agent look for it; /init does not load it.
		{Path: "/lib/modules/" + strings.TrimSpace(string(kver)) + "/kernel/drivers/firmware/qemu_fw_cfg.ko", Src: module},
	}
	g := testenv.BuildGuestImage(t, work, baseFiles(), extra, script)
	d := startHostd(t, hostctlBin, uri, g, "--firmware-metadata", "on")
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	spec := func(drive bool, dbTag string) string {
		p := filepath.Join(work, fmt.Sprintf("spec-%t-%s.yaml", drive, dbTag))
		if err := os.WriteFile(p, []byte(firmwareSpec(name, drive, dbTag)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	instDir := filepath.Join(d.DataDir, "instances", name)
	console := filepath.Join(instDir, "console.log")

	// Boot 1: firmware only.
	var inst types.Instance
	d.ctlJSON(&inst, "instance", "apply", "-f", spec(false, "fw-db"))
	if inst.ConfigDrive != "" || inst.Revision != 1 {
		t.Fatalf("apply: config drive %q, revision %d", inst.ConfigDrive, inst.Revision)
	}
	hostEntries := firmwareHashes(t, instDir, 1)
	bootStart := time.Now()
	d.ctl("instance", "start", name)
	out := testenv.WaitConsole(t, console, "fw1: done", bootTimeout)
	t.Logf("boot 1 to its report under TCG: %s", time.Since(bootStart).Round(time.Millisecond))
	r1 := parseReport(t, out, "fw1")
	if strings.Contains(out, "fwg: preloaded") {
		t.Errorf("qemu_fw_cfg was loaded before the agent ran")
	}
	if len(r1.lines["module-loaded"]) == 0 {
		t.Errorf("the agent did not load qemu_fw_cfg:\n%s", strings.Join(r1.lines["log"], "\n"))
	}
	checkFirmwareApplied(t, "boot 1", r1, source.KindFirmware, 1, map[string]string{"fw-root": "fw-vda", "fw-db": "fw-sda"})
	if n := r1.lines["net"]; !slices.Equal(n, []string{"lo"}) {
		t.Errorf("boot 1: interfaces %v, want only lo (no network)", n)
	}
	for _, b := range r1.lines["block"] {
		if strings.HasPrefix(b, "sr") {
			t.Errorf("boot 1: block device %s: the guest has a cdrom (no config drive wanted)", b)
		}
	}
	checkEntries(t, "boot 1", r1, hostEntries)
	if r1.status != nil {
		for _, s := range r1.status.Sources {
			if s.Source == source.KindHTTP && s.Error == "" {
				t.Errorf("boot 1: the metadata service answered: %+v", s)
			}
		}
	}
	fw1 := timings(t, r1, "firmware")
	d.ctl("instance", "stop", name, "--timeout", "60s")

	// Boot 2: a config drive of the same revision as the firmware.
	d.ctlJSON(&inst, "instance", "apply", "-f", spec(true, "fw-db"))
	if inst.Revision != 2 || inst.ConfigDrive == "" {
		t.Fatalf("apply with a drive: revision %d, drive %q", inst.Revision, inst.ConfigDrive)
	}
	// hostctl redefines the firmware entries only when what they carry
	// changed (issue 23): a publish that adds only the drive leaves them
	// at revision 1, and the drive (revision 2, the same devices) is the
	// newest transport; otherwise the firmware, of the drive's revision,
	// is preferred.
	fwRev2 := firmwareRevisionIn(t, instDir)
	src2 := source.KindFirmware
	if fwRev2 != 2 {
		src2 = source.KindDrive
	}
	hostEntries = firmwareHashes(t, instDir, fwRev2)
	bootStart = time.Now()
	d.ctl("instance", "start", name)
	out = testenv.WaitConsole(t, console, "fw2: done", bootTimeout)
	t.Logf("boot 2 to its report under TCG: %s (firmware entries of revision %d)", time.Since(bootStart).Round(time.Millisecond), fwRev2)
	r2 := parseReport(t, out, "fw2")
	checkFirmwareApplied(t, "boot 2", r2, src2, 2, map[string]string{"fw-root": "fw-vda", "fw-db": "fw-sda"})
	checkEntries(t, "boot 2", r2, hostEntries)
	if r2.status != nil {
		var drv *source.SourceResult
		for i, s := range r2.status.Sources {
			if s.Source == source.KindDrive {
				drv = &r2.status.Sources[i]
			}
		}
		if drv == nil || drv.Revision != 2 || drv.Used != (src2 == source.KindDrive) {
			t.Errorf("boot 2: the drive's outcome %+v, want revision 2, used %t", drv, src2 == source.KindDrive)
		}
	}
	checkBadFirmware(t, r2)
	fw2, drive2 := timings(t, r2, "firmware"), timings(t, r2, "configdrive")

	// Re-tag the running instance: revision 3 on the drive's new medium;
	// the firmware stays at 2 until the next boot.
	testenv.WaitConsole(t, console, "fw3: waiting-retag", injectTimeout)
	retagStart := time.Now()
	d.ctlJSON(&inst, "instance", "apply", "-f", spec(true, "fw-db2"))
	if inst.Revision != 3 {
		t.Fatalf("re-tag: revision %d", inst.Revision)
	}
	// While the guest runs (it needs seconds to notice the new medium and
	// report), instance show names each transport's revision; should it
	// have powered off already, the firmware is the next boot's.
	var shown types.Instance
	d.ctlJSON(&shown, "instance", "show", name)
	ts := map[string]types.Transport{}
	for _, tr := range shown.Transports {
		ts[tr.Name] = tr
	}
	t.Logf("instance show (state %s): transports %+v", shown.State, shown.Transports)
	wantFw := types.Transport{Name: types.TransportFirmware, Revision: fwRev2, NextBoot: 3}
	if shown.State != "running" {
		wantFw = types.Transport{Name: types.TransportFirmware, Revision: 3, NextBoot: 3}
	}
	if fw := ts[types.TransportFirmware]; ts[types.TransportHTTP].Revision != 3 || ts[types.TransportDrive].Revision != 3 ||
		fw.Revision != wantFw.Revision || fw.NextBoot != wantFw.NextBoot {
		t.Errorf("instance show (state %s): transports %+v; want service 3, drive 3, firmware %d (next boot %d)", shown.State, shown.Transports, wantFw.Revision, wantFw.NextBoot)
	}
	out = testenv.WaitConsole(t, console, "fw3: done", hotplugTimeout)
	t.Logf("re-tag to the new link (seen on the console): %s", time.Since(retagStart).Round(time.Second))
	r3 := parseReport(t, out, "fw3")
	checkFirmwareApplied(t, "after the re-tag", r3, source.KindDrive, 3, map[string]string{"fw-root": "fw-vda", "fw-db2": "fw-sda"})
	if _, ok := r3.links["fw-db"]; ok {
		t.Errorf("after the re-tag: the old link fw-db is still there")
	}
	checkEntries(t, "after the re-tag (the firmware is fixed while the guest runs)", r3, hostEntries)
	// The first pass of each boot, cold: the module loaded (boot 1), the
	// schema compiled, udev's first trigger.
	for _, r := range []*report{r1, r2} {
		for _, l := range r.lines["log"] {
			if strings.Contains(l, `msg="metadata read"`) || strings.Contains(l, "msg=applied") {
				t.Logf("first pass: %s", l)
			}
		}
	}
	logTimings(t, "boot 1, firmware (no drive, no network)", fw1)
	logTimings(t, "boot 2, firmware", fw2)
	logTimings(t, "boot 2, config drive", drive2)
	for _, n := range []string{"devices", "uuid", "revision"} {
		t.Logf("firmware entry %s: %d bytes", n, hostEntries[n].size)
	}
	testenv.WaitConsole(t, console, testenv.GuestDone, time.Minute)
	d.ctl("instance", "delete", name)
}

type entryHash struct {
	size int
	sum  string
}

// firmwareHashes reads the entry files hostctl wrote for revision rev.
func firmwareHashes(t *testing.T, dir string, rev int64) map[string]entryHash {
	t.Helper()
	out := map[string]entryHash{}
	for _, n := range []string{"devices", "uuid", "revision"} {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("fw_cfg.%d.%s", rev, n)))
		if err != nil {
			t.Fatalf("firmware entry file: %v", err)
		}
		sum := sha256.Sum256(b)
		out[n] = entryHash{size: len(b), sum: hex.EncodeToString(sum[:])}
	}
	if got := string(mustRead(t, filepath.Join(dir, fmt.Sprintf("fw_cfg.%d.revision", rev)))); got != fmt.Sprintf("%d\n", rev) {
		t.Errorf("revision entry %q", got)
	}
	return out
}

// firmwareRevisionIn is the revision of the firmware entry files in the
// instance directory (hostctl keeps only the persistent definition's).
func firmwareRevisionIn(t *testing.T, dir string) int64 {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "fw_cfg.*.revision"))
	if len(m) != 1 {
		t.Fatalf("firmware revision files %v, want one", m)
	}
	rev, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "fw_cfg."), ".revision"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkEntries: the guest read byte for byte what the host wrote.
func checkEntries(t *testing.T, what string, r *report, want map[string]entryHash) {
	t.Helper()
	got := map[string]string{}
	for _, l := range r.lines["entry"] {
		f := strings.Fields(l)
		if len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	for n, h := range want {
		if w := fmt.Sprintf("%d %s", h.size, h.sum); got[n] != w {
			t.Errorf("%s: the guest's %s%s is %q (size sha256), the host wrote %q", what, metadata.FirmwarePrefix, n, got[n], w)
		}
	}
}

// checkFirmwareApplied: the agent applied the document of kind src and
// revision rev, and each tag's link leads to the disk with its serial.
func checkFirmwareApplied(t *testing.T, what string, r *report, src string, rev int64, links map[string]string) {
	t.Helper()
	if r.status == nil {
		t.Fatalf("%s: no status:\n%s", what, r.raw)
	}
	if r.status.Source != src || r.status.Revision != rev {
		t.Errorf("%s: applied from %q revision %d, want %q revision %d; sources %+v", what, r.status.Source, r.status.Revision, src, rev, r.status.Sources)
	}
	if len(r.status.Problems) > 0 {
		t.Errorf("%s: problems %q", what, r.status.Problems)
	}
	byNode := map[string]string{}
	for _, d := range r.status.Devices {
		byNode[d.Node] = d.Serial
		if d.Status != "matched" {
			t.Errorf("%s: %s %s %s: %s (%s)", what, d.Type, d.Bus, d.Address, d.Status, d.Reason)
		}
	}
	for tag, serial := range links {
		node, ok := r.links[tag]
		if !ok {
			t.Errorf("%s: no /dev/disk/by-tag/%s (links %v)", what, tag, r.links)
			continue
		}
		if byNode[node] != serial {
			t.Errorf("%s: /dev/disk/by-tag/%s -> %s, which the agent matched to serial %q, want %q", what, tag, node, byNode[node], serial)
		}
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for k := range links {
			if !yield(k) {
				return
			}
		}
	})
	var have []string
	for k := range r.links {
		have = append(have, k)
	}
	sort.Strings(have)
	if !slices.Equal(have, want) {
		t.Errorf("%s: links %v, want %v", what, have, want)
	}
}

// checkBadFirmware: each broken firmware copy was reported, the drive
// used instead, and the links stayed.
func checkBadFirmware(t *testing.T, r *report) {
	t.Helper()
	rc := map[string]string{}
	for _, l := range r.lines["bad"] {
		k, v, _ := strings.Cut(l, " ")
		rc[k] = v
	}
	js := map[string]string{}
	for _, l := range r.lines["badjson"] {
		k, v, _ := strings.Cut(l, " ")
		js[k] = v
	}
	links := map[string][]string{}
	for _, l := range r.lines["badlink"] {
		k, v, _ := strings.Cut(l, " ")
		links[k] = append(links[k], v)
	}
	for bad, says := range map[string]string{
		"truncated": "truncated",
		"schema":    "/devices/0",
		"missing":   metadata.FirmwareDevices,
	} {
		// Problems reported: exit status 2.
		if rc[bad] != "rc=2" {
			t.Errorf("broken firmware (%s): apply %s, want rc=2 (applied with problems)\n%s", bad, rc[bad], strings.Join(r.lines["badlog"], "\n"))
		}
		var st guest.State
		if err := json.Unmarshal([]byte(js[bad]), &st); err != nil {
			t.Errorf("broken firmware (%s): status: %v\n%s", bad, err, js[bad])
		}
		reported := slices.ContainsFunc(st.Problems, func(p string) bool {
			return strings.Contains(p, "firmware not used") && strings.Contains(p, says)
		})
		if st.Source != source.KindDrive || st.Revision != 2 || !reported {
			t.Errorf("broken firmware (%s): applied %q revision %d, problems %q; want the config drive's revision 2 and the firmware reported (%q)",
				bad, st.Source, st.Revision, st.Problems, says)
		} else {
			t.Logf("broken firmware (%s): reported %q", bad, st.Problems)
		}
		if l := links[bad]; !slices.Equal(l, []string{"fw-db", "fw-root"}) {
			t.Errorf("broken firmware (%s): links %v, want fw-db and fw-root kept", bad, l)
		}
	}
	for _, l := range r.lines["badlog"] {
		if strings.Contains(l, "level=WARN") {
			t.Logf("guest: %s", l)
		}
	}
}

var (
	reElapsed = regexp.MustCompile(`msg=applied .*?elapsed=([0-9.]+)(ms|s|µs)`)
	reRead    = regexp.MustCompile(`msg="metadata read" .*?elapsed=([0-9.]+)(ms|s|µs)`)
)

// timings are the agent-start-to-applied and read times of the measure
// lines of one source, in ms.
type timing struct{ applied, read []float64 }

func timings(t *testing.T, r *report, src string) timing {
	t.Helper()
	var out timing
	ms := func(m []string) float64 {
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "s":
			v *= 1000
		case "µs":
			v /= 1000
		}
		return v
	}
	for _, l := range r.lines["measure"] {
		if !strings.HasPrefix(l, src+" ") {
			continue
		}
		if !strings.Contains(l, "rc=0") {
			t.Errorf("measure %s: %s", src, l)
			continue
		}
		if m := reElapsed.FindStringSubmatch(l); m != nil {
			out.applied = append(out.applied, ms(m))
		}
		if m := reRead.FindStringSubmatch(l); m != nil {
			out.read = append(out.read, ms(m))
		}
	}
	if len(out.applied) == 0 {
		t.Errorf("no timings for %s:\n%s", src, strings.Join(r.lines["measure"], "\n"))
	}
	return out
}

func logTimings(t *testing.T, what string, tm timing) {
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		s := slices.Sorted(slices.Values(v))
		return s[len(s)/2]
	}
	t.Logf("%s: agent start -> tags applied, median %.0f ms of %v; metadata read, median %.1f ms of %v", what, med(tm.applied), tm.applied, med(tm.read), tm.read)
}
