package cli

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/version"
)

// Manual pages hostctl prints.
const (
	PageHostctl = "hostctl"      // hostctl(1): every command and its flags
	PageConfig  = "hostctl.yaml" // hostctl.yaml(5): the keys of --config files
)

// manCommand is `hostctl man [hostctl|hostctl.yaml]`: the manual pages,
// generated from the command table (the same table --help and completion
// read), so a page cannot miss a command or a flag. The packages install
// what it prints (internal/pkgbuild runs it on the binary it packages).
func (a *app) manCommand() *Command {
	return &Command{Name: "man", Args: "[" + PageHostctl + "|" + PageConfig + "]", Summary: "print a manual page (roff): hostctl(1), or hostctl.yaml(5)",
		Help: `Read it with: hostctl man | man -l -
The page's date is that of $SOURCE_DATE_EPOCH when set (none otherwise).`,
		Setup: noFlags(func(ctx context.Context, c *Call) error {
			page := PageHostctl
			switch {
			case len(c.Args) > 1:
				return Usagef("man takes one page: %s or %s", PageHostctl, PageConfig)
			case len(c.Args) == 1:
				page = c.Args[0]
			}
			switch page {
			case PageHostctl, "hostctl.1", "1":
				return a.hostctlPage().Write(c.Stdout)
			case PageConfig, "hostctl.yaml.5", "5":
				return a.configPage().Write(c.Stdout)
			}
			return Usagef("man: unknown page %q: %s or %s", page, PageHostctl, PageConfig)
		})}
}

func pageHeader(name, section, summary string) manpage.Page {
	return manpage.Page{Name: name, Section: section, Summary: summary, Date: manpage.Date(),
		Source: "vmeta " + version.String(), Manual: manpage.ManualTitle}
}

// configCommands are the commands that take --config, and the files the
// packages install for them.
func (a *app) configCommands() (cmds []*Command, paths []string) {
	for _, c := range a.cmds {
		if c.ConfigFile {
			cmds = append(cmds, c)
			if c.ConfigPath != "" {
				paths = append(paths, c.ConfigPath)
			}
		}
	}
	return cmds, paths
}

func (a *app) hostctlPage() *manpage.Page {
	p := pageHeader("hostctl", "1", "the vmeta host controller and its client")
	p.Synopsis = []string{
		"hostctl [--socket PATH | --api URL] [--output table|json] COMMAND [ARGUMENTS] [FLAGS]",
		"hostctl COMMAND --help",
		"hostctl help [COMMAND]",
	}
	_, paths := a.configCommands()
	for _, c := range a.cmds {
		if c.ConfigFile {
			p.Synopsis = append(p.Synopsis, strings.TrimSpace("hostctl "+c.Name+" [--config FILE] [FLAGS]"))
		}
	}
	p.Sections = append(p.Sections, manpage.Section{Title: "Description", Blocks: []manpage.Block{{Text: `hostctl runs the instances of a libvirt/KVM host from instance specs and gives their guests what a cloud gives its instances: a Nova-compatible metadata service and config-2 config drive with device role tags, encrypted disk flags and virtiofs shares, which cloud-init and vmeta-agent(8) read.

hostctl serve is the daemon (the hostctl.service unit runs it); every other command is a client of its admin API, on the unix socket (--socket) or a TCP listener (--api). Flags may come before or after a command's arguments; a group of commands (hostctl instance) lists its commands with --help.`}}})

	var cmds []manpage.Block
	for _, c := range a.cmds {
		cmds = append(cmds, manpage.Block{Sub: strings.TrimSpace("hostctl " + c.Name + " " + c.Args)})
		text := c.Summary + "."
		if c.Help != "" {
			text += "\n\n" + strings.TrimSpace(c.Help)
		}
		if c.Client {
			text += "\n\nIt takes the client flags (CLIENT FLAGS)."
		}
		if c.ConfigFile {
			text += "\n\nEvery flag may be given in the --config file instead (hostctl.yaml(5))."
		}
		cmds = append(cmds, manpage.Block{Text: text})
		fs, _, _, _ := a.flagSet(c)
		skip := []string{}
		if c.Client {
			skip = clientFlagNames()
		}
		cmds = append(cmds, manpage.FlagBlocks(fs, skip...)...)
	}
	p.Sections = append(p.Sections, manpage.Section{Title: "Commands", Blocks: cmds})

	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addClientFlags(fs)
	p.Sections = append(p.Sections, manpage.Section{Title: "Client flags", Blocks: append([]manpage.Block{{
		Text: "The commands that talk to the daemon take these, before the command or after it."}}, manpage.FlagBlocks(fs)...)})

	p.Sections = append(p.Sections, manpage.Section{Title: "Environment", Blocks: []manpage.Block{
		{Tag: client.SocketEnv, Text: "the admin socket, of the daemon and of its clients (default of --socket)"},
		{Tag: APIEnv, Text: "the daemon's TCP admin listener (default of --api)"},
		{Tag: TokenEnv, Text: "the bearer token for --api; never a flag, so that no command line shows it"},
		{Tag: "VMETA_STORE_PASSWORD", Text: "the store's password for hostctl serve, when --store-password-file is not given (the unit loads it from /etc/vmeta/store.env)"},
		{Tag: "VMETA_VIRT", Text: "default of serve's --virt"},
		{Tag: "VMETA_DOMAIN_TYPE", Text: "default of serve's --domain-type"},
		{Tag: "SOURCE_DATE_EPOCH", Text: "the date hostctl man puts on the pages"},
	}})

	files := []manpage.Block{}
	for _, path := range paths {
		files = append(files, manpage.Block{Tag: path, Text: "the configuration file of hostctl serve; see hostctl.yaml(5)"})
	}
	files = append(files,
		manpage.Block{Tag: "/etc/default/hostctl", Text: "extra flags of hostctl serve for the hostctl.service unit ($HOSTCTL_OPTS)"},
		manpage.Block{Tag: "/etc/vmeta/store.env", Text: "VMETA_STORE_PASSWORD=..., readable by root only, which the unit loads"},
		manpage.Block{Tag: "/run/vmeta/hostctl.sock", Text: "the admin socket"},
		manpage.Block{Tag: "/var/lib/vmeta", Text: "the data directory: the embedded store, config drives, keys, images"},
	)
	p.Sections = append(p.Sections,
		manpage.Section{Title: "Files", Blocks: files},
		manpage.Section{Title: "Exit status", Blocks: []manpage.Block{
			{Tag: "0", Text: "success"},
			{Tag: "1", Text: "the command failed (the daemon refused it, or an error); the error is printed"},
			{Tag: "2", Text: "a usage error: an unknown command or flag, a missing argument"},
			{Tag: "130", Text: "stopped by SIGINT (128 plus the signal's number); serve exits 0 when stopped"},
			{Tag: "143", Text: "stopped by SIGTERM; serve exits 0 when stopped"},
		}},
		manpage.Section{Title: "See also", Blocks: []manpage.Block{{Text: "hostctl.yaml(5), vmeta-metadata(8), vmeta-agent(8), virsh(1)"}}},
	)
	return &p
}

func clientFlagNames() []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addClientFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

func (a *app) configPage() *manpage.Page {
	p := pageHeader("hostctl.yaml", "5", "configuration file of hostctl serve")
	cmds, paths := a.configCommands()
	p.Synopsis = paths
	p.Sections = append(p.Sections, manpage.Section{Title: "Description", Blocks: []manpage.Block{{Text: `hostctl serve --config FILE reads its flags from FILE, a YAML map with one key per flag, named as the flag without its dashes (data-dir: /srv/vmeta). A flag given on the command line overrides the file's key. Every key is optional; an unknown key, or a value of the wrong type, is an error naming the file, the key and the value, and the daemon does not start.

The hostctl.service unit runs hostctl serve --config ` + strings.Join(paths, ", ") + ` followed by the flags in $HOSTCTL_OPTS of /etc/default/hostctl, which therefore override the file.

Values: a string (quote it when YAML would read it as something else), an integer, true or false, a duration as Go writes it (10s, 1m30s, 1h), or for a repeatable flag a list of strings (or one string).`}}})
	for _, c := range cmds {
		fs, _, _, _ := a.flagSet(c)
		var keys []manpage.Block
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == configFlag {
				return
			}
			keys = append(keys, manpage.Block{Tag: f.Name + ": " + configType(f), Text: f.Usage + configDefault(f)})
		})
		title := "Keys"
		if len(cmds) > 1 {
			title = "Keys of hostctl " + c.Name
		}
		p.Sections = append(p.Sections, manpage.Section{Title: title, Blocks: keys})
	}
	p.Sections = append(p.Sections,
		manpage.Section{Title: "Example", Blocks: []manpage.Block{{Text: configExample}}},
		manpage.Section{Title: "See also", Blocks: []manpage.Block{{Text: "hostctl(1), vmeta-metadata(8)"}}},
	)
	return &p
}

const configExample = `  # /etc/vmeta/hostctl.yaml
  host: kvm-07
  store: redis://10.0.0.5:6379/0
  store-password-file: /etc/vmeta/store.password
  metadata-listen: 127.0.0.1:8775
  virt: libvirt
  domain-type: kvm
  reconcile-interval: 30s
  apply:
    - /etc/vmeta/instances/web-1.yaml`

// configType names the type a key's value must have (as loadConfigFile
// checks it).
func configType(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "list"
	}
	switch g.Get().(type) {
	case bool:
		return "boolean"
	case int, int64, uint, uint64:
		return "integer"
	case float64:
		return "number"
	case time.Duration:
		return "duration"
	}
	return "string"
}

// configDefault is the key's default, as the flag's.
func configDefault(f *flag.Flag) string {
	if _, ok := f.Value.(flag.Getter); !ok || f.DefValue == "" {
		return ""
	}
	return " (default: " + f.DefValue + ")"
}
