// Command isocompare times vmeta's in-process config-drive builder against
// genisoimage, the tool Nova runs, on the same realistic tree, interleaving
// the runs so that both see the same machine state, and prints mean and
// median time per build, image sizes and the ratios.
//
//	go run ./test/bench/isocompare [-n 50] [-genisoimage genisoimage]
//
// Rows:
//   - configdrive.Build: from in-memory files to a durable image file (layout
//     in memory, write, fsync, rename, directory fsync).
//   - configdrive.WriteISO: the same image streamed to io.Discard: the
//     in-process build alone, no file system.
//   - genisoimage: Nova's exact command line (including -J) on a tree already
//     on disk: the exec alone.
//   - genisoimage + tree: what Nova does per drive: write the tree to a fresh
//     temporary directory, run genisoimage, remove the directory.
//
// It exits non-zero only on errors (a failed build, genisoimage missing),
// never because of the timings.
package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
)

func main() {
	n := flag.Int("n", 50, "builds per builder")
	genisoimage := flag.String("genisoimage", "genisoimage", "genisoimage binary")
	flag.Parse()
	if err := run(*n, *genisoimage); err != nil {
		fmt.Fprintln(os.Stderr, "isocompare:", err)
		os.Exit(1)
	}
}

type result struct {
	name  string
	times []time.Duration
	size  int64
}

func (r *result) mean() time.Duration {
	var sum time.Duration
	for _, t := range r.times {
		sum += t
	}
	return sum / time.Duration(len(r.times))
}

func (r *result) median() time.Duration {
	s := slices.Clone(r.times)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func run(n int, genisoimage string) error {
	if n < 1 {
		return fmt.Errorf("-n must be at least 1")
	}
	bin, err := exec.LookPath(genisoimage)
	if err != nil {
		return fmt.Errorf("%w (apt-get install genisoimage)", err)
	}
	files := sampleFiles()
	tmp, err := os.MkdirTemp("", "isocompare-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := writeTree(tree, files); err != nil {
		return err
	}
	ours := filepath.Join(tmp, "ours.iso")
	theirs := filepath.Join(tmp, "theirs.iso")
	nova := filepath.Join(tmp, "nova.iso")
	genargs := func(out, dir string) []string {
		// nova/virt/configdrive.py _make_iso9660, publisher "vmeta"
		return []string{"-o", out, "-ldots", "-allow-lowercase", "-allow-multidot", "-l",
			"-publisher", "vmeta", "-quiet", "-J", "-r", "-V", "config-2", dir}
	}
	genisoimageRun := func(out, dir string) error {
		if err := os.Remove(out); err != nil && !os.IsNotExist(err) {
			return err
		}
		if msg, err := exec.Command(bin, genargs(out, dir)...).CombinedOutput(); err != nil {
			return fmt.Errorf("genisoimage: %w\n%s", err, msg)
		}
		return nil
	}

	builders := []struct {
		res *result
		out string
		fn  func() error
	}{
		{&result{name: "vmeta configdrive.Build"}, ours, func() error {
			return configdrive.Build(ours, files, configdrive.Options{})
		}},
		{&result{name: "vmeta configdrive.WriteISO (io.Discard)"}, "", func() error {
			_, err := configdrive.WriteISO(io.Discard, files, configdrive.Options{})
			return err
		}},
		{&result{name: "genisoimage (tree on disk)"}, theirs, func() error {
			return genisoimageRun(theirs, tree)
		}},
		{&result{name: "genisoimage + write tree (Nova)"}, nova, func() error {
			dir, err := os.MkdirTemp(tmp, "md-*")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if err := writeTree(dir, files); err != nil {
				return err
			}
			return genisoimageRun(nova, dir)
		}},
	}
	// One untimed warm-up round, then n interleaved rounds.
	for i := -1; i < n; i++ {
		for _, b := range builders {
			start := time.Now()
			if err := b.fn(); err != nil {
				return fmt.Errorf("%s: %w", b.res.name, err)
			}
			if i >= 0 {
				b.res.times = append(b.res.times, time.Since(start))
			}
		}
	}
	for _, b := range builders {
		if b.out == "" {
			b.res.size = -1
			continue
		}
		st, err := os.Stat(b.out)
		if err != nil {
			return err
		}
		b.res.size = st.Size()
	}
	// Sanity: our image holds the tree.
	got, label, err := configdrive.Read(ours)
	if err != nil {
		return fmt.Errorf("reading our image: %w", err)
	}
	if label != "config-2" || len(got.Files) != len(files) {
		return fmt.Errorf("our image: label %q, %d files, want config-2 and %d", label, len(got.Files), len(files))
	}

	var total int
	for _, f := range files {
		total += len(f.Data)
	}
	fmt.Printf("%d files, %d bytes of content, %d interleaved builds each; images and temporary trees\n"+
		"in %s (set TMPDIR to compare a tmpfs)\n\n", len(files), total, n, os.TempDir())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "builder\tmean\tmedian\timage bytes")
	for _, b := range builders {
		size := "-"
		if b.res.size >= 0 {
			size = fmt.Sprint(b.res.size)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", b.res.name, ms(b.res.mean()), ms(b.res.median()), size)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	o, mem, g, nv := builders[0].res, builders[1].res, builders[2].res, builders[3].res
	fmt.Printf("\nours/genisoimage time (median): Build %.2f vs exec alone, %.2f vs Nova's write-tree-and-exec;\n"+
		"  in memory (WriteISO) %.3f vs exec alone, %.3f vs Nova's\n",
		ratio(o.median(), g.median()), ratio(o.median(), nv.median()),
		ratio(mem.median(), g.median()), ratio(mem.median(), nv.median()))
	fmt.Printf("ours/genisoimage size: %.2f (%d / %d bytes; genisoimage with -J, ours Rock Ridge only)\n",
		float64(o.size)/float64(g.size), o.size, g.size)
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func writeTree(dir string, files []metadata.File) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// sampleFiles is a realistic config-drive tree: every OpenStack version plus
// latest with the files Nova writes for it, a content blob and the two EC2
// versions Nova keeps. A trimmed copy of configdrive's test fixture
// (configdrive/sample_test.go), which test code cannot share with a command.
func sampleFiles() []metadata.File {
	rng := rand.New(rand.NewPCG(1, 2))
	seed := make([]byte, 512)
	for i := range seed {
		seed[i] = byte(rng.UintN(256))
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3yX6vQf1tqkJ8mR9P0wZ1bF2cD3eE4fG5hH6iJ7kL alice@example"
	userData := "#cloud-config\nhostname: web-1\npackages: [nginx]\n" + strings.Repeat("# padding line to make user data realistic\n", 30)
	network := `{"links":[{"id":"tap0","type":"ovs","mtu":1450,"ethernet_mac_address":"fa:16:3e:12:34:56"}],` +
		`"networks":[{"id":"network0","type":"ipv4_dhcp","link":"tap0"}],"services":[]}`
	t := metadata.Tree{Files: map[string][]byte{}}
	for _, v := range append(slices.Clone(metadata.OpenStackVersions), "latest") {
		md := fmt.Sprintf(`{"uuid":"d4f6b1a2-3c5e-4f70-8a9b-0c1d2e3f4a5b","public_keys":{"alice":%q},`+
			`"hostname":"web-1.novalocal","name":"web-1","launch_index":0,"availability_zone":"nova",`+
			`"files":[{"path":"/etc/motd","content_path":"/content/0000"}],"random_seed":%q}`,
			key, base64.StdEncoding.EncodeToString(seed))
		d := "openstack/" + v + "/"
		t.Files[d+"meta_data.json"] = []byte(md)
		t.Files[d+"user_data"] = []byte(userData)
		if v >= metadata.Havana || v == "latest" {
			t.Files[d+"vendor_data.json"] = []byte("{}")
		}
		if v >= metadata.Liberty || v == "latest" {
			t.Files[d+"network_data.json"] = []byte(network)
		}
		if v >= metadata.NewtonTwo || v == "latest" {
			t.Files[d+"vendor_data2.json"] = []byte(`{"static":{}}`)
		}
	}
	t.Files["openstack/content/0000"] = []byte("Welcome to web-1\n")
	ec2 := fmt.Sprintf(`{"instance-id":"i-00000001","hostname":"web-1.novalocal","public-keys":{"0":{"openssh-key":%q}}}`, key)
	for _, v := range []string{metadata.EC2Latest, "latest"} {
		t.Files["ec2/"+v+"/meta-data.json"] = []byte(ec2)
		t.Files["ec2/"+v+"/user-data"] = []byte(userData)
	}
	return t.ConfigDriveFiles()
}
