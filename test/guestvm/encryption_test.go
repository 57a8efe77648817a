package guestvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
)

// encPattern is what the guest writes to its disks; the host looks for
// it in the disk files.
const encPattern = "VMETA-PLAINTEXT-PATTERN-7f3a9c1e"

// encGuestScript writes the pattern to the encrypted disk (tag secure)
// and to the plain one (tag plain, the control), syncs, lets the agent
// apply the config drive and prints what it says about each disk.
const encGuestScript = `
mkdir -p /run/udev /etc/udev
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120 || echo "vmeta-enc: settle-timeout"
for n in secure plain; do
	dev=
	for b in /sys/block/vd*; do
		[ "$(cat $b/serial 2>/dev/null)" = "enc-$n" ] && dev=/dev/${b##*/}
	done
	yes ` + encPattern + ` | head -c 4194304 > pattern.$n
	dd if=pattern.$n of=$dev bs=1M conv=fsync 2>/dev/null
	echo "vmeta-enc: wrote $n $dev rc=$?"
done
sync
vmeta-agent apply --share-wait 0s >/run/apply.log 2>&1
echo "vmeta-enc: apply rc=$?"
sed 's/^/vmeta-enc: applylog /' /run/apply.log
vmeta-agent status | sed 's/^/vmeta-enc: status /'
for b in /sys/block/vd*; do
	n=${b##*/}
	echo "vmeta-enc: udev $n serial=$(cat $b/serial) $(udevadm info --query=property --name=/dev/$n | grep -E '^VMETA_ENCRYPTED=' || echo VMETA_ENCRYPTED=unset)"
done
echo "vmeta-enc: done"
`

// TestEncryptedDisksInBootedGuest is the "done when" test of ephemeral
// storage encryption, against the real qemu-img, libvirtd and QEMU (TCG)
// and a booted guest: hostctl serve (store on Redis, so the test can ask
// the key manager while the daemon runs) creates two LUKS disks and a
// plain one; the guest writes a known pattern to an encrypted disk and to
// the plain one; the host finds the pattern in the plain disk's file and
// not in the encrypted one's; each LUKS disk opens with its own
// passphrase and not with the other's, and decrypts to what the guest
// wrote; the guest (agent and udev), the config drive (2025-04-04 and
// latest) and the metadata service over HTTP say "encrypted": true for
// exactly the two LUKS disks, the untagged one included.
func TestEncryptedDisksInBootedGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	qemuIO := testenv.LookPath(t, "qemu-io")
	for _, p := range []string{udevadmBin, "/usr/lib/udev/scsi_id"} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev (test/setup)")
		}
	}
	redisURL := testenv.StartRedis(t)
	work := t.TempDir()
	agentBin := buildAgent(t, work)
	hostctlBin := buildHostctl(t, work)
	g := testenv.BuildGuestImage(t, work, baseFiles(), []testenv.GuestFile{{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755}}, encGuestScript)
	d := startHostd(t, hostctlBin, uri, g, "--store", redisURL)

	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	// A loopback address of its own identifies the instance to the
	// metadata service when the test asks it over HTTP.
	addr := fmt.Sprintf("127.%d.%d.%d", 100+time.Now().UnixNano()%50, 1+os.Getpid()%250, 2+time.Now().Nanosecond()%250)
	spec := fmt.Sprintf(`name: %s
project_id: enc-project
addresses: [%s]
disks:
  - {name: vda, size: 16M, serial: enc-secure, tag: secure, encrypted: true}
  - {name: vdb, size: 16M, serial: enc-untagged, encrypted: true}
  - {name: vdc, size: 16M, serial: enc-plain, tag: plain}
`, name, addr)
	specFile := filepath.Join(work, "enc.yaml")
	if err := os.WriteFile(specFile, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var inst types.Instance
	d.ctlJSON(&inst, "instance", "apply", "-f", specFile)
	t.Logf("apply with two LUKS disks and one plain (--luks-iter-time 100ms): %s", time.Since(start).Round(time.Millisecond))

	bd := map[string]types.BlockDevice{}
	for _, b := range inst.BlockDevices {
		bd[b.Disk] = b
	}
	for disk, want := range map[string]bool{"vda": true, "vdb": true, "vdc": false} {
		b := bd[disk]
		if b.Encrypted != want || (want && (b.EncryptionSecretUUID == "" || b.EncryptionFormat != "luks" || b.EncryptionOptions["cipher"] == "")) {
			t.Errorf("block device %s: %+v (want encrypted %t)", disk, b, want)
		}
	}
	if bd["vda"].EncryptionSecretUUID == bd["vdb"].EncryptionSecretUUID {
		t.Fatal("two disks share a secret")
	}
	show := d.ctl("instance", "show", name)
	if !strings.Contains(show, "Block devices") || !strings.Contains(show, bd["vda"].EncryptionSecretUUID) {
		t.Errorf("instance show lacks the block devices:\n%s", show)
	}

	// What the guest is told, before it boots: the config drive and the
	// metadata service.
	wantEnc := map[string]bool{"enc-secure": true, "enc-untagged": true}
	checkEncryptedDevices := func(where string, md []byte) {
		t.Helper()
		var v struct {
			Devices []metadata.Device `json:"devices"`
		}
		if err := json.Unmarshal(md, &v); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		got := map[string]bool{}
		for _, dev := range v.Devices {
			if dev.Type == "disk" && dev.Encrypted != nil && *dev.Encrypted {
				got[dev.Serial] = true
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantEnc) {
			t.Errorf("%s: encrypted disks %v, want %v", where, got, wantEnc)
		}
	}
	files, _, err := configdrive.Read(inst.ConfigDrive)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"2025-04-04", "latest"} {
		md, _ := files.Get("openstack/" + v + "/meta_data.json")
		checkEncryptedDevices("config drive "+v, md)
		checkEncryptedDevices("metadata service "+v, httpGet(t, addr, d.MetadataAddr, "/openstack/"+v+"/meta_data.json"))
	}

	var started types.Instance
	d.ctlJSON(&started, "instance", "start", name)
	// Libvirt holds each LUKS disk's passphrase while the domain runs.
	secrets := func() string {
		out, _ := exec.Command("virsh", "-q", "-c", uri, "secret-list").CombinedOutput()
		return string(out)
	}
	if s := secrets(); !strings.Contains(s, bd["vda"].EncryptionSecretUUID) || !strings.Contains(s, bd["vdb"].EncryptionSecretUUID) {
		t.Errorf("libvirt lacks the running domain's secrets:\n%s", s)
	}
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	out := testenv.WaitConsole(t, console, "vmeta-enc: done", bootTimeout)
	t.Logf("boot to report under TCG: %s", time.Since(start).Round(time.Second))

	// The guest wrote the pattern to both disks, and the agent says
	// encrypted for exactly the LUKS ones.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "vmeta-enc: "); i >= 0 {
			lines = append(lines, strings.TrimSpace(l[i+len("vmeta-enc: "):]))
		}
	}
	report := strings.Join(lines, "\n")
	for _, want := range []string{"wrote secure /dev/", "wrote plain /dev/", "apply rc=0"} {
		if !strings.Contains(report, want) {
			t.Fatalf("guest report lacks %q:\n%s", want, report)
		}
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "udev ") {
			continue
		}
		enc := strings.Contains(l, "VMETA_ENCRYPTED=1")
		for serial, want := range map[string]bool{"enc-secure": true, "enc-untagged": true, "enc-plain": false} {
			if strings.Contains(l, "serial="+serial+" ") && enc != want {
				t.Errorf("guest: %s (want encrypted %t)", l, want)
			}
		}
	}
	if strings.Count(report, "VMETA_ENCRYPTED=1") != 2 {
		t.Errorf("guest: want exactly two disks VMETA_ENCRYPTED=1:\n%s", report)
	}

	// The host: no plaintext in the encrypted disk's file, the pattern in
	// the plain one's (the control).
	dir := filepath.Join(d.DataDir, "instances", name)
	pattern := []byte(strings.Repeat(encPattern+"\n", 8))
	if b, _ := os.ReadFile(filepath.Join(dir, "disk-vdc.qcow2")); !bytes.Contains(b, pattern) {
		t.Fatal("the plain disk's file lacks the guest's pattern: the guest's write did not reach the host")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "disk-vda.qcow2")); bytes.Contains(b, []byte(encPattern)) {
		t.Error("the encrypted disk's file holds the guest's plaintext")
	}

	// Each LUKS disk opens with its own passphrase, not with the other's,
	// and decrypts to what the guest wrote.
	ctx := context.Background()
	st, err := redis.Open(ctx, redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hostName, err := os.ReadFile(filepath.Join(d.DataDir, "host-name"))
	if err != nil {
		t.Fatal(err)
	}
	km, err := keys.Open(ctx, st, d.DataDir, keys.Options{Host: strings.TrimSpace(string(hostName))})
	if err != nil {
		t.Fatal(err)
	}
	passA, err := km.Passphrase(ctx, bd["vda"].EncryptionSecretUUID)
	if err != nil {
		t.Fatal(err)
	}
	passB, err := km.Passphrase(ctx, bd["vdb"].EncryptionSecretUUID)
	if err != nil {
		t.Fatal(err)
	}
	// Neither passphrase is anywhere in Redis (every key, dumped).
	rc := goredis.NewClient(mustParseRedisURL(t, redisURL))
	defer rc.Close()
	rkeys, err := rc.Keys(ctx, "*").Result()
	if err != nil || len(rkeys) == 0 {
		t.Fatalf("redis keys: %v %v", rkeys, err)
	}
	for _, k := range rkeys {
		dump, err := rc.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		if strings.Contains(dump, string(passA)) || strings.Contains(dump, string(passB)) {
			t.Errorf("redis key %s holds a disk passphrase", k)
		}
	}
	tool := encryption.New(encryption.Options{QemuImg: qemuImg, QemuIO: qemuIO})
	vda, vdb := filepath.Join(dir, "disk-vda.qcow2"), filepath.Join(dir, "disk-vdb.qcow2")
	if err := tool.Verify(ctx, vda, passA, nil); err != nil {
		t.Errorf("vda with its own passphrase: %v", err)
	}
	if err := tool.Verify(ctx, vda, passB, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Errorf("vda with vdb's passphrase: %v (want %v)", err, encryption.ErrWrongPassphrase)
	}
	if err := tool.Verify(ctx, vdb, passA, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Errorf("vdb with vda's passphrase: %v (want %v)", err, encryption.ErrWrongPassphrase)
	}
	if plain := decrypt(t, qemuImg, vda, passA, filepath.Join(work, "vda.raw")); !bytes.HasPrefix(plain, pattern) {
		t.Errorf("vda decrypted does not start with the guest's pattern: %q", plain[:min(64, len(plain))])
	}

	// The guest powers itself off: the reconciler (on libvirt's stopped
	// event) takes the passphrases back from libvirt.
	testenv.WaitConsole(t, console, testenv.GuestDone, time.Minute)
	deadline := time.Now().Add(2 * time.Minute)
	for s := secrets(); strings.Contains(s, bd["vda"].EncryptionSecretUUID) || strings.Contains(s, bd["vdb"].EncryptionSecretUUID); s = secrets() {
		if time.Now().After(deadline) {
			t.Fatalf("libvirt secrets still defined after the guest powered off:\n%s", s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.ctl("instance", "delete", name)
	if l, err := km.List(ctx, "enc-project"); err != nil || len(l) != 0 {
		t.Errorf("key-manager secrets after delete: %+v %v", l, err)
	}
}

// decrypt converts a LUKS qcow2 to a raw file with its passphrase (on a
// pipe) and returns the first MiB.
func decrypt(t *testing.T, qemuImg, path string, pass []byte, out string) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Write(pass)
	w.Close()
	defer r.Close()
	cmd := exec.Command(qemuImg, "convert", "-U", "--object", "secret,id=s0,file=/dev/fd/3", "--image-opts",
		"driver=qcow2,file.filename="+path+",encrypt.key-secret=s0", "-O", "raw", out)
	cmd.ExtraFiles = []*os.File{r}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return b
}

// httpGet asks the metadata service at addr for path, from source
// address src.
func httpGet(t *testing.T, src, addr, path string) []byte {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}, Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from %s: %s: %s", path, src, resp.Status, b)
	}
	return b
}

func mustParseRedisURL(t *testing.T, url string) *goredis.Options {
	t.Helper()
	o, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
