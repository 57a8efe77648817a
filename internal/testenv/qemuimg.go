package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// QemuImg runs qemu-img with args and fails the test on an error. QEMU's
// LUKS PBKDF benchmark fails now and then on a loaded machine when its
// first round is accounted 0 ms of thread CPU time ("Unable to get
// accurate CPU usage"; nothing is created): that run is tried again, up
// to 10 times, as hostctl/encryption does in production.
func QemuImg(t testing.TB, args ...string) []byte {
	t.Helper()
	qemuImg := LookPath(t, "qemu-img")
	for attempt := 1; ; attempt++ {
		out, err := exec.Command(qemuImg, args...).CombinedOutput()
		if err == nil {
			return out
		}
		if attempt == 10 || !strings.Contains(string(out), "Unable to get accurate CPU usage") {
			t.Fatalf("qemu-img %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// QemuIO runs qemu-io with args, the secrets on fds 3, 4… (pipes, as
// hostctl/encryption passes them), and returns its output.
func QemuIO(t testing.TB, args []string, secrets ...[]byte) (string, error) {
	t.Helper()
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, s := range secrets {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, r)
		_, err = w.Write(s)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(LookPath(t, "qemu-io"), args...)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	return string(out), err
}
