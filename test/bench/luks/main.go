// Command luks measures what ephemeral storage encryption costs, side by
// side with plain disks, on this host's real qemu-img, QEMU block layer
// and libvirtd (qemu:///system, TCG):
//
//	go run ./test/bench/luks [-n 5] [-iter-time 100ms] [-uri qemu:///system]
//
// Rows:
//   - create + first open of a 1 GiB qcow2: plain, and LUKS
//     (encrypt.format=luks) with QEMU's default PBKDF iteration time and
//     with -iter-time (hostctl serve --luks-iter-time); "first open" is
//     qemu-io opening the image (unlocking the keyslot) and reading 4 KiB;
//   - throughput through QEMU's block layer (qemu-io, 64 MiB requests over
//     512 MiB, through the page cache; qemu-img bench of QEMU 7.2 takes no
//     --object and cannot unlock LUKS), write then read, LUKS against
//     plain, as ratios;
//   - one instance apply (hostctl's controller on libvirtd: disks,
//     define, read back, render, store write) with three encrypted disks
//     against three plain ones.
//
// Passphrases go to qemu-img/qemu-io on a pipe, as hostctl passes them.
// Every domain it defines is named vmeta-bench-luks-<run>-… and removed
// at the end. It exits non-zero only on errors, never because of timings.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

func main() {
	n := flag.Int("n", 5, "timed runs per row")
	iter := flag.Duration("iter-time", 100*time.Millisecond, "the short PBKDF iteration time compared with QEMU's default")
	uri := flag.String("uri", virt.DefaultURI, "libvirt URI (empty: skip the apply rows)")
	flag.Parse()
	if err := run(context.Background(), *n, *iter, *uri); err != nil {
		fmt.Fprintln(os.Stderr, "bench/luks:", err)
		os.Exit(1)
	}
}

type row struct {
	name  string
	times []time.Duration
}

func (r *row) median() time.Duration {
	t := slices.Clone(r.times)
	slices.Sort(t)
	return t[len(t)/2]
}

func (r *row) span() string {
	t := slices.Clone(r.times)
	slices.Sort(t)
	return fmt.Sprintf("%s … %s", t[0].Round(time.Millisecond), t[len(t)-1].Round(time.Millisecond))
}

func run(ctx context.Context, n int, iter time.Duration, uri string) error {
	dir, err := os.MkdirTemp("", "vmeta-bench-luks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("bench/luks: n=%d, load average %s", n, load)
	pass := []byte(randomHex(32))

	// Create + first open of a 1 GiB disk.
	rows := []*row{{name: "plain qcow2"}, {name: "LUKS qcow2, QEMU default iter-time"}, {name: "LUKS qcow2, iter-time " + iter.String()}}
	opens := []*row{{name: "plain qcow2"}, {name: "LUKS qcow2, QEMU default iter-time"}, {name: "LUKS qcow2, iter-time " + iter.String()}}
	for i := range n {
		for k, r := range rows {
			p := filepath.Join(dir, fmt.Sprintf("d%d-%d.qcow2", k, i))
			start := time.Now()
			switch k {
			case 0:
				err = runCmd(ctx, nil, "qemu-img", "create", "-q", "-f", "qcow2", p, "1G")
			case 1:
				err = encryption.New(encryption.Options{}).Create(ctx, encryption.Disk{Path: p, Size: "1G"}, pass)
			case 2:
				err = encryption.New(encryption.Options{IterTime: iter}).Create(ctx, encryption.Disk{Path: p, Size: "1G"}, pass)
			}
			if err != nil {
				return err
			}
			r.times = append(r.times, time.Since(start))
			start = time.Now()
			if k == 0 {
				err = runCmd(ctx, nil, "qemu-io", "-r", "-c", "read 0 4k", p)
			} else {
				err = runCmd(ctx, pass, "qemu-io", "--object", "secret,id=s0,file=/dev/fd/3", "-r", "--image-opts",
					"driver=qcow2,file.filename="+p+",encrypt.key-secret=s0", "-c", "read 0 4k")
			}
			if err != nil {
				return err
			}
			opens[k].times = append(opens[k].times, time.Since(start))
			os.Remove(p)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\n1 GiB disk\tcreate (median)\trange\tfirst open (median)\trange")
	for k := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rows[k].name, rows[k].median().Round(time.Millisecond), rows[k].span(), opens[k].median().Round(time.Millisecond), opens[k].span())
	}
	tw.Flush()

	// Throughput through the block layer: qemu-io (qemu-img bench of
	// QEMU 7.2 takes no --object, so it cannot unlock a LUKS image), 64 MiB
	// requests, as qemu-io itself times them (the open, with its PBKDF,
	// is not counted).
	plain, luks := filepath.Join(dir, "tp-plain.qcow2"), filepath.Join(dir, "tp-luks.qcow2")
	if err := runCmd(ctx, nil, "qemu-img", "create", "-q", "-f", "qcow2", plain, "1G"); err != nil {
		return err
	}
	if err := encryption.New(encryption.Options{IterTime: iter}).Create(ctx, encryption.Disk{Path: luks, Size: "1G"}, pass); err != nil {
		return err
	}
	const chunk, chunks = 64 << 20, 8 // 512 MiB per pass
	tp := map[string][]float64{}
	for i := 0; i < n; i++ {
		for _, w := range []bool{true, false} {
			for _, img := range []string{plain, luks} {
				args := []string{"--object", "secret,id=s0,file=/dev/fd/3", "--image-opts"}
				opts := "driver=qcow2,file.filename=" + img
				if img == luks {
					opts += ",encrypt.key-secret=s0"
				}
				args = append(args, opts)
				for c := 0; c < chunks; c++ {
					op := "read"
					if w {
						op = "write -P 0x5a"
					}
					args = append(args, "-c", fmt.Sprintf("%s %d %d", op, c*chunk, chunk))
				}
				out, err := runOut(ctx, pass, "qemu-io", args...)
				if err != nil {
					return err
				}
				mib, secs, err := qemuIOTotals(out)
				if err != nil {
					return err
				}
				key := fmt.Sprintf("%t %t", w, img == luks)
				tp[key] = append(tp[key], mib/secs)
			}
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nqemu-io, 64 MiB requests, 512 MiB (page cache)\tplain MiB/s\tLUKS MiB/s\tLUKS/plain")
	for _, w := range []bool{true, false} {
		p, l := med(tp[fmt.Sprintf("%t false", w)]), med(tp[fmt.Sprintf("%t true", w)])
		what := "read"
		if w {
			what = "write"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\n", what, p, l, l/p)
	}
	tw.Flush()

	if uri == "" {
		return nil
	}
	return benchApply(ctx, n, iter, uri, dir)
}

// benchApply times one apply of a new instance with three plain disks
// and with three encrypted ones, through the controller on libvirtd.
func benchApply(ctx context.Context, n int, iter time.Duration, uri, dir string) error {
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	km, err := keys.Open(ctx, st, dir, keys.Options{Host: "bench"})
	if err != nil {
		return err
	}
	prefix := "vmeta-bench-luks-" + randomHex(4)
	var names []string
	defer func() {
		for _, name := range names {
			_ = conn.Remove(context.Background(), name)
		}
	}()
	rows := map[string]*row{}
	order := []string{"3 plain disks", "3 LUKS disks, QEMU default iter-time", "3 LUKS disks, iter-time " + iter.String()}
	for i := 0; i < n; i++ {
		for k, what := range order {
			// The disks part as the daemon wires it.
			luks := encryption.New(encryption.Options{})
			if k == 2 {
				luks = encryption.New(encryption.Options{IterTime: iter})
			}
			imgs := images.New(filepath.Join(dir, "images"), images.Options{})
			dp := disks.New(disks.Options{Keys: km, LUKS: luks, Secrets: conn, Records: st, Instances: st, Catalog: imgs,
				DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
			opts := controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Hypervisor: conn, Images: imgs,
				Domain: virt.Options{MemoryMiB: 128}, Parts: []part.Part{dp}}
			c := controller.New(st, opts)
			dp.Bind(c, nil)
			name := fmt.Sprintf("%s-%d-%d", prefix, k, i)
			names = append(names, name)
			enc := k > 0
			spec := fmt.Sprintf("name: %s\ndisks:\n  - {name: vda, size: 1G, encrypted: %t}\n  - {name: vdb, size: 1G, encrypted: %t}\n  - {name: vdc, size: 1G, encrypted: %t}\n", name, enc, enc, enc)
			start := time.Now()
			if _, err := c.Apply(ctx, []byte(spec)); err != nil {
				return err
			}
			if rows[what] == nil {
				rows[what] = &row{}
			}
			rows[what].times = append(rows[what].times, time.Since(start))
			if err := c.Delete(ctx, name); err != nil {
				return err
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\ninstance apply (new, libvirt define)\tmedian\trange\tvs plain")
	base := rows[order[0]].median()
	for _, what := range order {
		m := rows[what].median()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fx\n", what, m.Round(time.Millisecond), rows[what].span(), float64(m)/float64(base))
	}
	return tw.Flush()
}

// qemuIOLine is qemu-io's timing line: "64 MiB, 1 ops; 00.21 sec (…)".
var qemuIOLine = regexp.MustCompile(`(?m)^([0-9.]+) MiB, [0-9]+ ops; ([0-9]+):?([0-9.]+)? sec`)

// qemuIOTotals sums qemu-io's own timings of its requests.
func qemuIOTotals(out string) (mib, secs float64, err error) {
	for _, m := range qemuIOLine.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		mib += v
		if m[3] != "" {
			mins, _ := strconv.ParseFloat(m[2], 64)
			s, _ := strconv.ParseFloat(m[3], 64)
			secs += mins*60 + s
		} else {
			s, _ := strconv.ParseFloat(m[2], 64)
			secs += s
		}
	}
	if mib == 0 || secs == 0 {
		return 0, 0, fmt.Errorf("qemu-io: no timings in %q", out)
	}
	return mib, secs, nil
}

// runOut is runCmd returning the output.
func runOut(ctx context.Context, secret []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	w.Write(secret)
	w.Close()
	cmd.ExtraFiles = []*os.File{r}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// runCmd runs a command, secret (if any) readable on fd 3.
func runCmd(ctx context.Context, secret []byte, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if secret != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		w.Write(secret)
		w.Close()
		cmd.ExtraFiles = []*os.File{r}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
