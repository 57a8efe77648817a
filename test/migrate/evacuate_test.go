package migrate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Evacuation between the two real hosts (issue 24 item 3): host a's
// hostctl dies (SIGKILL: its libvirtd, and the guest on it, keep running,
// as when a host's controller is lost), its heartbeat goes stale
// (--host-down-after, 10s here, polled, not slept), and host b rebuilds
// the instance from its flavor's disks: a new LUKS disk under a new
// secret that b's key wraps (QEMU opening it on b proves it), the domain
// defined and started on b's libvirtd, the metadata served from b's
// metadata service at the guest's address. When a's hostctl starts
// again, it removes what it still holds — its domain, files, libvirt
// secrets and its key-manager secret — before it serves.

// evacuation is `instance evacuate --output json`.
type evacuation struct {
	State      string `json:"state"`
	Step       string `json:"step"`
	Source     string `json:"source"`
	Dest       string `json:"dest"`
	OldSecrets int    `json:"old_secrets"`
}

// getAs is GET url from source address from (a guest, played from a
// loopback address).
func getAs(t *testing.T, from, url string) (int, string) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s as %s: %v", url, from, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitDown polls `host list` on h until host is down (its heartbeat
// older than --host-down-after).
func waitDown(t *testing.T, h *host, host string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var hs []struct {
			Host string `json:"host"`
			Down bool   `json:"down"`
		}
		if err := json.Unmarshal([]byte(h.must("host", "list", "--output", "json").stdout), &hs); err != nil {
			t.Fatal(err)
		}
		for _, s := range hs {
			if s.Host == host && s.Down {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never went down: %+v", host, hs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestEvacuateReal(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	name := "evac-" + strconv.Itoa(os.Getpid())
	addr := fmt.Sprintf("127.78.%d.%d", rand.IntN(256), 1+rand.IntN(254))
	p := filepath.Join(t.TempDir(), name+".yaml")
	s := fmt.Sprintf("name: %s\nproject_id: p1\naddresses: [%s]\ndisks: [{name: vda, size: 64M, tag: root, encrypted: true}, {name: vdb, size: 64M}]\n", name, addr)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("instance", "apply", "-f", p)
	a.must("instance", "start", name)
	var before struct {
		Spec struct {
			UUID string `json:"uuid"`
		} `json:"spec"`
		BlockDevices []struct {
			Disk   string `json:"disk"`
			Secret string `json:"encryption_secret_uuid"`
		} `json:"block_devices"`
	}
	if err := json.Unmarshal([]byte(a.must("instance", "show", name, "--output", "json").stdout), &before); err != nil {
		t.Fatal(err)
	}
	uuid, oldSecret := before.Spec.UUID, ""
	for _, bd := range before.BlockDevices {
		if bd.Disk == "vda" {
			oldSecret = bd.Secret
		}
	}
	if oldSecret == "" || domstate(t, a.uri, name) != "running" {
		t.Fatalf("before: secret %q, domain on a %q", oldSecret, domstate(t, a.uri, name))
	}

	// Refused while a is alive: nothing changes.
	if r := b.ctl("instance", "evacuate", name, "--to", "b"); r.code == 0 || !strings.Contains(r.stderr, "heartbeat is fresh") {
		t.Fatalf("evacuate of a live host's instance: %s", r)
	}
	if in := b.show(name); in.Host != "a" {
		t.Fatalf("after the refusal: %+v", in)
	}

	// a's hostctl dies; b sees its heartbeat go stale.
	a.proc.Kill()
	waitDown(t, b, "a")

	start := time.Now()
	var ev evacuation
	if err := json.Unmarshal([]byte(b.must("instance", "evacuate", name, "--to", "b", "--output", "json").stdout), &ev); err != nil {
		t.Fatal(err)
	}
	t.Logf("evacuation a -> b took %.1f s", time.Since(start).Seconds())
	if ev.State != "evacuated" || ev.Source != "a" || ev.Dest != "b" || ev.OldSecrets != 1 {
		t.Fatalf("evacuation: %+v", ev)
	}
	if in := b.show(name); in.Host != "b" || in.State != "running" {
		t.Fatalf("instance show on b after the evacuation: %+v", in)
	}
	// QEMU opened the new LUKS disk on b: its passphrase is a new secret.
	if sb := domstate(t, b.uri, name); sb != "running" {
		t.Fatalf("domain on b: %q, want running", sb)
	}
	if s := secrets(t, b.uri, uuid); len(s) == 0 {
		t.Error("b has no libvirt secret for the running LUKS disk")
	}
	var after struct {
		BlockDevices []struct {
			Disk   string `json:"disk"`
			Secret string `json:"encryption_secret_uuid"`
		} `json:"block_devices"`
	}
	if err := json.Unmarshal([]byte(b.must("instance", "show", name, "--output", "json").stdout), &after); err != nil {
		t.Fatal(err)
	}
	for _, bd := range after.BlockDevices {
		if bd.Disk == "vda" && (bd.Secret == "" || bd.Secret == oldSecret) {
			t.Fatalf("vda's secret after the evacuation: %q (old %q): want a new one", bd.Secret, oldSecret)
		}
	}
	// The config drive was built anew on b.
	if _, err := os.Stat(filepath.Join(b.dataDir, "instances", name, "disk.config")); err != nil {
		t.Errorf("no config drive on b: %v", err)
	}
	// The old secret stays (wrapped by a's key) until a comes back.
	b.must("secret", "show", oldSecret)
	// The guest's metadata, at its address, from b's metadata service.
	if code, body := getAs(t, addr, "http://"+b.mdAddr+"/openstack/latest/meta_data.json"); code != http.StatusOK || !strings.Contains(body, uuid) {
		t.Fatalf("metadata from b as %s: %d %s", addr, code, body)
	}
	// a's libvirtd still runs its copy: a's hostctl is the one that
	// removes it.
	if sa := domstate(t, a.uri, name); sa != "running" {
		t.Fatalf("domain on a while its hostctl is down: %q", sa)
	}

	// a comes back: its start-up sweep removes its copy before it serves.
	a.restart()
	if sa := domstate(t, a.uri, name); sa != "" {
		t.Fatalf("a still has the domain after it came back: %q\n%s", sa, a.proc.Output())
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "instances", name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a still has the instance's files: %v", err)
	}
	if s := secrets(t, a.uri, uuid); len(s) != 0 {
		t.Errorf("a still has the instance's libvirt secrets: %q", s)
	}
	if r := b.ctl("secret", "show", oldSecret); r.code == 0 {
		t.Errorf("the old disk's secret stays after a came back: %s", r)
	}
	if !strings.Contains(a.proc.Output(), "evacuated instance's copy removed from this host") {
		t.Errorf("a did not log its clean-up:\n%s", a.proc.Output())
	}
	if sb := domstate(t, b.uri, name); sb != "running" {
		t.Fatalf("domain on b after a came back: %q", sb)
	}
	if in := a.show(name); in.Host != "b" {
		t.Fatalf("instance show on a after it came back: %+v", in)
	}
	b.must("instance", "delete", name)
}

// TestEvacuateRealKilled: the new host's hostctl killed (SIGKILL, the
// crash point of the vmetacrash build) right after the evacuation's
// takeover and right after its rebuild: restarted, it shows the instance
// evacuating, and the same request completes the evacuation; a, back,
// removes both instances' copies.
func TestEvacuateRealKilled(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	points := []string{"owner-switched", "rebuilt"}
	var names []string
	for i := range points {
		name := fmt.Sprintf("evk%d-%d", i, os.Getpid())
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, []byte("name: "+name+"\ndisks: [{name: vda, size: 16M, encrypted: true}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a.must("instance", "apply", "-f", p)
		names = append(names, name)
	}
	a.proc.Kill()
	waitDown(t, b, "a")
	var matrix []string
	for i, point := range points {
		name := names[i]
		b.restart("VMETA_CRASH_AT=evacuate/" + point)
		if r := b.ctl("instance", "evacuate", name, "--to", "b"); r.code == 0 {
			t.Fatalf("evacuate with b killed after %s succeeded: %s", point, r)
		}
		select { // the crash point's SIGKILL, not the restart's SIGTERM
		case <-b.proc.Exited():
		case <-time.After(time.Minute):
			t.Fatalf("b did not die at the crash point %s", point)
		}
		b.restart()
		shown := b.show(name)
		if shown.State != "evacuating" {
			t.Fatalf("after b was killed after %s: %+v, want evacuating", point, shown)
		}
		b.must("instance", "evacuate", name, "--to", "b")
		if in := b.show(name); in.Host != "b" || in.State != "running" || domstate(t, b.uri, name) != "running" {
			t.Fatalf("after the resume: %+v, domain on b %q", in, domstate(t, b.uri, name))
		}
		matrix = append(matrix, fmt.Sprintf("b killed after %-15s -> shown %s, evacuate again: running on b", point, shown.State))
	}
	a.restart()
	for _, name := range names {
		if s := domstate(t, a.uri, name); s != "" {
			t.Errorf("a still has %s's domain: %q", name, s)
		}
		b.must("instance", "delete", name)
	}
	t.Logf("SIGKILL of the new host:\n%s", strings.Join(matrix, "\n"))
}
