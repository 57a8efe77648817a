//go:build unix

package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModuleLoadOrder(t *testing.T) {
	dir := t.TempDir()
	dep := `kernel/fs/nfs/nfs.ko: kernel/fs/lockd/lockd.ko kernel/net/sunrpc/sunrpc.ko
kernel/fs/nfs/nfsv4.ko: kernel/net/dns_resolver/dns_resolver.ko kernel/fs/nfs/nfs.ko kernel/fs/lockd/lockd.ko kernel/net/sunrpc/sunrpc.ko
kernel/fs/lockd/lockd.ko: kernel/net/sunrpc/sunrpc.ko
kernel/net/sunrpc/sunrpc.ko:
kernel/net/dns_resolver/dns_resolver.ko:
kernel/drivers/virtio/virtio-mmio.ko:
`
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mods []string
		want string
		err  string
	}{
		{[]string{"nfsv4"}, "sunrpc lockd nfs dns_resolver nfsv4", ""},
		{[]string{"lockd", "nfsv4"}, "sunrpc lockd nfs dns_resolver nfsv4", ""},
		{[]string{"virtio-mmio", "sunrpc"}, "virtio-mmio sunrpc", ""},
		{[]string{"nfsv4", "ext4"}, "", "module ext4: not in"},
	} {
		got, err := moduleLoadOrder(dir, c.mods)
		var names []string
		for _, f := range got {
			names = append(names, strings.TrimSuffix(filepath.Base(f), ".ko"))
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.mods, err, c.err)
			}
			continue
		}
		if err != nil || strings.Join(names, " ") != c.want {
			t.Errorf("%v: %v, %v; want %s", c.mods, names, err, c.want)
		}
	}
}
