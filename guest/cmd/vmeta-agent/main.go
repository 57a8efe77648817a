// Command vmeta-agent applies the instance's device metadata inside a
// guest: udev tags and /dev/disk/by-tag/ links for disks, alternative
// names for NICs, virtiofs mounts for shares. See package guest.
//
//	vmeta-agent apply [flags]            one pass, then exit
//	vmeta-agent run [flags]              apply, then follow device events and metadata changes
//	vmeta-agent status [--output json]   what the last pass did
//	vmeta-agent find --tag T [--type disk|nic|share]
//	vmeta-agent version                  the version it was built as
//	vmeta-agent man                      its manual page, vmeta-agent(8), from the command table
//
// Exit status: 0 success; 1 the metadata could not be read or is
// invalid, or another error (nothing was changed by a failed read); 2
// applied, with problems (entries that match no device, or several; a
// share that could not be mounted; see the log or `status`); 3 find
// found nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/shares"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/guest/udev"
	"github.com/vmeta/vmeta/internal/version"
)

// command is one command of the agent. The table (commands) is what run
// dispatches on, what the usage lists and what the manual page
// (vmeta-agent man) documents, flags included: they cannot disagree.
type command struct {
	name, args, summary string
	// setup registers the command's flags on fs and returns what runs it
	// (after fs has parsed the arguments); it returns the exit status.
	setup func(fs *flag.FlagSet) func(ctx context.Context, stdout, stderr io.Writer, started time.Time) int
}

// commands is the agent's command table.
func commands() []command {
	return []command{
		{name: "apply", summary: "read the metadata and apply it once", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			var f applyFlags
			f.register(fs)
			return func(ctx context.Context, _, stderr io.Writer, started time.Time) int {
				return cmdApply(ctx, &f, stderr, started)
			}
		}},
		{name: "run", summary: "apply, then follow device events and metadata changes (daemon)", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			var f applyFlags
			f.register(fs)
			poll := fs.Duration("poll-interval", time.Minute, "how often the metadata is read again when nothing happens")
			return func(ctx context.Context, _, stderr io.Writer, started time.Time) int {
				return cmdRun(ctx, &f, *poll, stderr, started)
			}
		}},
		{name: "status", args: "[--output table|json]", summary: "show what the last pass applied", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			var c common
			c.register(fs)
			output := fs.String("output", "table", "table or json")
			return func(_ context.Context, stdout, stderr io.Writer, _ time.Time) int {
				return cmdStatus(&c, *output, stdout, stderr)
			}
		}},
		{name: "find", args: "--tag T [--type disk|nic|share]", summary: "print what carries a tag", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			var c common
			c.register(fs)
			tag := fs.String("tag", "", "the tag (for shares: the virtiofs tag)")
			typ := fs.String("type", "", "disk, nic or share (default: all)")
			return func(_ context.Context, stdout, stderr io.Writer, _ time.Time) int {
				return cmdFind(&c, *tag, *typ, stdout, stderr)
			}
		}},
		{name: "version", summary: "print the version (git describe of the build)", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			return func(_ context.Context, stdout, _ io.Writer, _ time.Time) int {
				fmt.Fprintln(stdout, version.String())
				return 0
			}
		}},
		{name: "man", summary: "print this program's manual page, vmeta-agent(8) (roff)", setup: func(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer, time.Time) int {
			return func(_ context.Context, stdout, stderr io.Writer, _ time.Time) int {
				if err := writeManual(stdout); err != nil {
					fmt.Fprintln(stderr, "vmeta-agent:", err)
					return 1
				}
				return 0
			}
		}},
	}
}

// usage lists the commands.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: vmeta-agent <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun \"vmeta-agent <command> -h\" for the flags of a command.\n")
	return b.String()
}

func main() {
	// The process started before main: systemd's set-up of the service, the exec, the page-in of
	// the binary and the Go runtime's start come first, and count in the
	// time the agent's unit holds the boot.
	started := time.Now()
	if age, ok := guest.ProcessAge(); ok {
		started = started.Add(-age)
	}
	mainEntered = time.Since(started)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, started))
}

// mainEntered is how long after the process's start (its fork, see
// guest.ProcessAge) main began: the service's set-up, the exec, the
// page-in of the binary, the Go runtime's start and the package
// initialisers.
var mainEntered time.Duration

// common are the flags every command takes.
type common struct {
	sysRoot, devRoot, stateDir, udevRunDir string
	logLevel                               string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.sysRoot, "sysfs", "/sys", "where sysfs is mounted")
	fs.StringVar(&c.devRoot, "dev", "/dev", "where device nodes are")
	fs.StringVar(&c.stateDir, "state-dir", guest.DefaultStateDir, "the agent's state directory")
	fs.StringVar(&c.udevRunDir, "udev-run-dir", udev.DefaultRunDir, "udev's runtime directory (its database is data/)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// applyFlags are the flags of apply and run.
type applyFlags struct {
	common
	source, configDrive, rulesFile, shareRoot, udevadm string
	firmwareDir                                        string
	metadataURLs                                       string
	shareWait, settle                                  time.Duration
	noAltNames                                         bool
}

func (a *applyFlags) register(fs *flag.FlagSet) {
	a.common.register(fs)
	fs.StringVar(&a.source, "source", "auto", "auto (the newest revision of firmware, config drive and, without a drive, metadata service), firmware, configdrive or http")
	fs.StringVar(&a.firmwareDir, "firmware-dir", "", "the qemu_fw_cfg sysfs directory (default <sysfs>/firmware/qemu_fw_cfg; the module is loaded only for the system's)")
	fs.StringVar(&a.configDrive, "config-drive", "", "read this image file or device instead of looking for the drive by label")
	fs.StringVar(&a.metadataURLs, "metadata-url", "", "metadata service base URLs, comma-separated (default http://169.254.169.254 and http://[fe80::a9fe:a9fe%<if>])")
	fs.StringVar(&a.rulesFile, "rules-file", udev.DefaultRulesFile, "the udev rules file the agent writes")
	fs.StringVar(&a.shareRoot, "share-root", shares.DefaultRoot, "shares are mounted at <share-root>/<tag>")
	fs.DurationVar(&a.shareWait, "share-wait", 5*time.Second, "how long one pass retries mounting a share whose device is missing")
	fs.DurationVar(&a.settle, "settle-timeout", 30*time.Second, "udevadm settle timeout")
	fs.StringVar(&a.udevadm, "udevadm", "", "udevadm binary (default: from PATH)")
	fs.BoolVar(&a.noAltNames, "no-altnames", false, "do not add alternative interface names")
}

// agent builds the agent. The daemon (daemon true) asks the metadata
// service once per read: its own loop retries, and its first read, which
// holds the boot until it ends, must not wait for a network that comes up
// only later.
func (a *applyFlags) agent(log *slog.Logger, started time.Time, daemon bool) (*guest.Agent, error) {
	shareWait := a.shareWait
	if shareWait <= 0 {
		shareWait = -1 // no retry (0 would mean the default)
	}
	drive := &source.ConfigDrive{Path: a.configDrive, SysRoot: a.sysRoot, DevRoot: a.devRoot}
	var urls []string
	for _, u := range strings.Split(a.metadataURLs, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	httpSrc := &source.HTTP{URLs: urls}
	if daemon {
		httpSrc.Attempts = 1
	}
	fw := guest.FirmwareSource(a.sysRoot)
	if a.firmwareDir != "" {
		fw.Dir = a.firmwareDir
	}
	var src source.Source
	switch a.source {
	case "auto":
		src = &source.Auto{Firmware: fw, Drive: drive, HTTP: httpSrc, Log: log}
		if a.configDrive != "" {
			src = drive
		}
	case "firmware":
		src = fw
	case "configdrive":
		src = drive
	case "http":
		src = httpSrc
	default:
		return nil, fmt.Errorf("--source %q: want auto, firmware, configdrive or http", a.source)
	}
	return guest.New(guest.Config{
		Source: src, SysRoot: a.sysRoot, DevRoot: a.devRoot, RulesFile: a.rulesFile, StateDir: a.stateDir,
		ShareRoot: a.shareRoot, ShareWait: shareWait, SettleTimeout: a.settle, NoAltNames: a.noAltNames,
		Udev: &udev.Udevadm{Path: a.udevadm}, UdevDB: udev.DB{RunDir: a.udevRunDir}, Log: log, Started: started,
	}), nil
}

func run(args []string, stdout, stderr io.Writer, started time.Time) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage())
		if len(args) == 0 {
			return 1
		}
		return 0
	}
	name, args := args[0], args[1:]
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		fs := flag.NewFlagSet("vmeta-agent "+name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		do := c.setup(fs)
		if err := fs.Parse(args); err != nil {
			return 1
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return do(ctx, stdout, stderr, started)
	}
	fmt.Fprintf(stderr, "vmeta-agent: unknown command %q\n\n%s", name, usage())
	return 1
}

func cmdApply(ctx context.Context, f *applyFlags, stderr io.Writer, started time.Time) int {
	log, err := f.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	a, err := f.agent(log, started, false)
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	rep, err := a.Apply(ctx)
	if err != nil {
		log.Error("metadata not applied; nothing changed", "err", err)
		return 1
	}
	st := rep.State
	if len(rep.Changes) == 0 {
		log.Info("nothing to change", "origin", st.Origin, "source", st.Source, "revision", st.Revision, "devices", len(st.Devices), "problems", len(st.Problems),
			"elapsed", time.Since(started).Round(time.Millisecond), "peak_rss", guest.PeakRSS())
	} else {
		log.Info("applied", "origin", st.Origin, "source", st.Source, "revision", st.Revision, "devices", len(st.Devices), "changes", strings.Join(rep.Changes, "; "),
			"problems", len(st.Problems), "elapsed", time.Since(started).Round(time.Millisecond), "peak_rss", guest.PeakRSS())
	}
	for _, p := range st.Problems {
		log.Warn("problem", "what", p)
	}
	if len(st.Problems) > 0 {
		return 2
	}
	return 0
}

func cmdRun(ctx context.Context, f *applyFlags, poll time.Duration, stderr io.Writer, started time.Time) int {
	log, err := f.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	a, err := f.agent(log, started, true)
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	// since_start: from the process's start (its fork) to this first
	// line; main_after: to main.
	log.Info("vmeta-agent running", "pid", os.Getpid(), "poll_interval", poll, "since_start", time.Since(started).Round(time.Millisecond), "main_after", mainEntered.Round(time.Millisecond))
	err = a.Run(ctx, guest.RunOptions{PollInterval: poll, Ready: func() {
		if err := guest.Notify("READY=1"); err != nil {
			log.Warn("sd_notify", "err", err)
		}
	}})
	if err != nil {
		log.Error("run", "err", err)
		return 1
	}
	log.Info("vmeta-agent stopped")
	return 0
}

func cmdStatus(c *common, output string, stdout, stderr io.Writer) int {
	st, err := guest.ReadState(c.stateDir)
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	switch output {
	case "table":
		err = guest.WriteStatusTable(stdout, st)
	case "json":
		err = guest.WriteStatusJSON(stdout, st)
	default:
		fmt.Fprintf(stderr, "vmeta-agent: --output %q: want table or json\n", output)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent:", err)
		return 1
	}
	return 0
}

func cmdFind(c *common, tag, typ string, stdout, stderr io.Writer) int {
	if tag == "" {
		fmt.Fprintln(stderr, "vmeta-agent find: --tag is required")
		return 1
	}
	switch typ {
	case "", "disk", "nic", "share":
	default:
		fmt.Fprintf(stderr, "vmeta-agent find: --type %q: want disk, nic or share\n", typ)
		return 1
	}
	found, err := guest.Find(tag, guest.FindOptions{Type: typ, SysRoot: c.sysRoot, DevRoot: c.devRoot,
		UdevDB: udev.DB{RunDir: c.udevRunDir}, StateDir: c.stateDir})
	if err != nil {
		fmt.Fprintln(stderr, "vmeta-agent find:", err)
		return 1
	}
	if len(found) == 0 {
		fmt.Fprintf(stderr, "vmeta-agent find: nothing carries tag %q\n", tag)
		return 3
	}
	for _, f := range found {
		fmt.Fprintln(stdout, f)
	}
	return 0
}
