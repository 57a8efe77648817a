// Command mountcheck runs inside the test guest of test/nfsguest: it
// mounts an NFS share with hostctl's own mount code (shares.Mounts and
// the real ExecRunner: mount -t nfs, umount), for two instances, and
// writes what it saw after each step as one JSON line (nfsguest.Report)
// to a file, the guest's second serial port. It asserts nothing itself:
// the test does, on the host.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/test/nfsguest"
)

func main() {
	export := flag.String("export", "", "the share's export location (SERVER:/PATH)")
	base := flag.String("base", "/run/vmeta/shares", "where shares are mounted (one directory per share)")
	id := flag.String("share", "", "the share's ID")
	content := flag.String("write", "", "what to write to "+nfsguest.GuestFile+" through the mount")
	out := flag.String("report", "/dev/ttyS1", "where the report goes")
	flag.Parse()
	if *export == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "mountcheck: -export and -share are required")
		os.Exit(2)
	}
	r := run(context.Background(), *base, *id, *export, *content)
	b, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountcheck:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, append([]byte(nfsguest.ReportPrefix), append(b, '\n')...), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "mountcheck:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, base, id, export, content string) nfsguest.Report {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	m := shares.NewMounts(base, shares.ExecRunner{}, log)
	var r nfsguest.Report
	step := func(name string, err error) {
		s := nfsguest.Step{Name: name, Users: m.Users(id)}
		if err != nil {
			s.Err = err.Error()
		}
		s.Mounts, err = mountsUnder(base)
		if err != nil {
			s.Err += "; " + err.Error()
		}
		b, err := os.ReadFile(filepath.Join(m.Dir(id), nfsguest.HostFile))
		if err != nil {
			s.ReadErr = err.Error()
		}
		s.Read = string(b)
		log.Info("mountcheck step", "step", name, "err", s.Err, "mounts", len(s.Mounts), "users", s.Users)
		r.Steps = append(r.Steps, s)
	}
	step("acquire a", m.Acquire(ctx, id, export, "instance-a"))
	if err := os.WriteFile(filepath.Join(m.Dir(id), nfsguest.GuestFile), []byte(content), 0o644); err != nil {
		r.WriteErr = err.Error()
	} else {
		r.Wrote = content
	}
	// hostctl restarted: a fresh Mounts finds the share mounted in the
	// mount table.
	rebuilt, err := shares.NewMounts(base, shares.ExecRunner{}, log).Rebuild(nil, true)
	r.Rebuilt = rebuilt
	if err != nil {
		r.RebuildErr = err.Error()
	}
	step("acquire b", m.Acquire(ctx, id, export, "instance-b"))
	step("release a", m.Release(ctx, id, "instance-a"))
	step("release b", m.Release(ctx, id, "instance-b"))
	return r
}

// mountsUnder lists the entries of /proc/self/mountinfo (proc(5)) whose
// mount point is directly under base.
func mountsUnder(base string) ([]nfsguest.Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []nfsguest.Mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 {
			continue
		}
		if filepath.Dir(f[4]) != base {
			continue
		}
		out = append(out, nfsguest.Mount{Point: f[4], FSType: g[0], Source: g[1], Options: f[5], Super: g[2]})
	}
	return out, sc.Err()
}
