package shares

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// startGanesha runs the userspace NFS server nfs-ganesha (VFS backend) on
// port 2049 exporting dir as /export, until the test ends (TCP only,
// NFSv4 only: no rpcbind registration, which would need rpcbind running).
func startGanesha(t *testing.T, dir string) {
	t.Helper()
	bin := testenv.LookPath(t, "ganesha.nfsd")
	if c, err := net.DialTimeout("tcp", "127.0.0.1:2049", time.Second); err == nil {
		c.Close()
		t.Fatal("port 2049 is taken: another NFS server runs on this machine")
	}
	work := t.TempDir()
	conf := filepath.Join(work, "ganesha.conf")
	if err := os.WriteFile(conf, []byte(`NFS_CORE_PARAM { Protocols = 4; NFS_Port = 2049; Enable_UDP = false; Enable_NLM = false; Enable_RQUOTA = false; }
NFSV4 { Graceless = true; }
EXPORT { Export_Id = 1; Path = `+dir+`; Pseudo = /export; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL { Name = VFS; } }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-F", "-L", filepath.Join(work, "ganesha.log"), "-f", conf, "-p", filepath.Join(work, "ganesha.pid"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waitFor(t, "nfs-ganesha to listen on 2049", func() bool {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(work, "ganesha.log"))
			t.Fatalf("ganesha.nfsd exited: %s\n%s", out.String(), log)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:2049", time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func kernelHasNFS() bool {
	b, _ := os.ReadFile("/proc/filesystems")
	return strings.Contains(string(b), "\tnfs")
}

// TestNFSRealMount runs the NFS path with the real mount(8) against a
// real NFS server (nfs-ganesha). On a kernel with an NFS client the share
// is mounted on start (the guest's file readable on the host), kept while
// the instance runs and unmounted on stop. On one without (this CI's:
// /proc/filesystems has no nfs, and there are no modules to load),
// mount.nfs answers "No such device": the test then checks that failure
// path end to end — the mapping in error with the reason, the export left
// out of it, the start refused with the instance in ERROR, nothing left
// mounted — and logs the exact answer. The success path of the same mount
// code runs in a booted Debian guest with its kernel's NFS client
// (test/nfsguest).
func TestNFSRealMount(t *testing.T) {
	testenv.LookPath(t, "mount.nfs")
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "hello.txt"), []byte("from the filer"), 0o644); err != nil {
		t.Fatal(err)
	}
	startGanesha(t, data)
	e := newEnv(t, stores(t)["bolt"](t))
	e.svc.mounts.run = ExecRunner{}
	e.svc.mounts.mountinfo = "/proc/self/mountinfo"
	ctx := context.Background()
	u := e.instance("a", "demo")
	id := e.nfsShare("demo", "127.0.0.1:/export")
	e.attach("a", id)
	t.Cleanup(func() { _ = exec.Command("umount", e.svc.mounts.Dir(id)).Run() })

	err := e.svc.PrepareStart(ctx, u)
	if kernelHasNFS() {
		if err != nil {
			t.Fatalf("mount with an NFS client in the kernel: %v", err)
		}
		e.svc.StartDone(ctx, u, nil)
		b, err := os.ReadFile(filepath.Join(e.svc.mounts.Dir(id), "hello.txt"))
		if err != nil || string(b) != "from the filer" {
			t.Errorf("file through the mount: %q, %v", b, err)
		}
		e.svc.Stopped(ctx, u)
		if ids, _ := e.svc.mounts.mountedShares(); len(ids) != 0 {
			t.Errorf("still mounted after stop: %v", ids)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "No such device") || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("mount on a kernel without NFS: %v; want mount.nfs's \"No such device\" and the instance in ERROR", err)
	}
	m, _ := e.mapping(u, id)
	if m.Status != types.ShareError || strings.Contains(m.Error, "127.0.0.1") || strings.Contains(err.Error(), "127.0.0.1:/export") {
		t.Errorf("mapping %+v / error %v: want error, the export redacted", m, err)
	}
	if ids, _ := e.svc.mounts.mountedShares(); len(ids) != 0 {
		t.Errorf("mounted: %v", ids)
	}
	t.Logf("NFS: this kernel has no NFS client; `mount -t nfs -o %s 127.0.0.1:/export %s` answered: %s", NFSMountOptions, e.svc.mounts.Dir(id), m.Error)
}
